"""The exporter's metric families, the min-interval cache and the HTTP endpoint."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from amdtop.audit.model import AuditReport, Finding
from amdtop.errors import AmdtopError, InputError
from amdtop.exporter import FAMILIES, Exporter, parse_listen
from amdtop.exporter.families import GPU_LABELS, MB
from amdtop.exporter.server import is_loopback
from amdtop.model import (
    Flag,
    FlagKind,
    GpuInfo,
    GpuSample,
    NodeSnapshot,
    Topology,
    WorkerState,
    WorkerStatus,
)
from amdtop.pipeline import LinkBandwidth, LogCounts, NodeFrame, NodePipeline, RampKnee
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.sim import GpuDemand, SimBackend
from amdtop.telemetry.sysfs import open_backend as open_sysfs
from tests.fixtures.sysfs_tree import SysfsTree, build_mi300x_8, build_pcie_4

GIB = 1024**3


def scrape(exporter: Exporter) -> dict[str, object]:
    """Families by name (counters under their base name, as the parser gives them)."""
    return {f.name: f for f in text_string_to_metric_families(exporter.render().decode())}


class Workers:
    """A fixed worker list as the supervisor would report it."""

    def __init__(self, workers: tuple[WorkerStatus, ...]) -> None:
        self.workers = workers

    def status(self) -> list[WorkerStatus]:
        return list(self.workers)


def frames(backend: Any, workers: tuple[WorkerStatus, ...] = ()) -> Callable[[], NodeFrame]:
    """The exporter's provider: the node pipeline's tick, as ``amdtop export`` runs it."""
    return NodePipeline(backend, Workers(workers) if workers else None, discover=False).tick


def full_state(sim: SimBackend) -> NodeFrame:
    """A demo node with two workers, flags, RCCL counts, a ramp knee and probe results: every family has data."""
    sim.set_demand("llama-a", {i: GpuDemand(0.9 if i else 0.3, 150 * GIB, 4242) for i in range(4)})
    sim.throttle(2, "power_cap", 0.4)
    workers = (
        WorkerStatus("llama-a", WorkerState.READY, (0, 1, 2, 3), port=19499, numa_node=0, restarts=2),
        WorkerStatus("llama-b", WorkerState.CRASHED, (4, 5, 6, 7), port=19498, numa_node=None),
    )
    tick = frames(sim, workers)
    tick()
    frame = tick()  # two ticks: live fabric traffic is a rate between polls
    # The facts the log monitor and the state dir would add to the frame.
    flags = (
        Flag(FlagKind.NUMA_MISMATCH, "not pinned", worker="llama-b"),
        Flag(FlagKind.TRANSPORT_FALLBACK, "SHM between 4 and 5", worker="llama-b", gpus=(4, 5)),
    )
    return replace(
        frame,
        flags=frame.flags + flags,
        ramp_knees=(RampKnee("llama-a", 48, 48, 1764412345.0),),
        log_counts=(LogCounts("llama-b", 3, 1),),
        bandwidth=(LinkBandwidth(0, 1, 48.5),),
        audit=AuditReport(findings=(Finding("aiter_off", "warn", "worker", "AITER off", (), "", "", worker="llama-a"),)),
    )


def test_every_family_present_with_type_labels_and_unit() -> None:
    sim = SimBackend(seed=1)
    state = full_state(sim)
    fams = scrape(Exporter(lambda: state, "127.0.0.1:0"))
    # The partition families have samples on partitioned GPUs only (test_partitions checks them on a CPX node).
    assert set(fams) == set(FAMILIES) - {"amdtop_gpu_partition_mode_info", "amdtop_gpu_partition_info"}
    for name, spec in FAMILIES.items():
        if name not in fams:
            continue
        fam = fams[name]
        assert fam.type == spec.kind, name
        assert fam.documentation.endswith(f"({spec.unit})"), name
        for sample in fam.samples:
            assert set(sample.labels) == set(spec.labels), (name, sample.labels)
            assert sample.labels["hostname"] == "amdtop-demo"


def test_demo_values_in_amd_exporter_units() -> None:
    sim = SimBackend(seed=1)
    state = full_state(sim)
    fams = scrape(Exporter(lambda: state, "127.0.0.1:0"))

    def value(name: str, **labels: str) -> float:
        hits = [s.value for s in fams[name].samples if all(s.labels[k] == v for k, v in labels.items())]
        assert len(hits) == 1, (name, labels, hits)
        return float(hits[0])

    s0 = state.snapshot.sample(0)
    assert s0 is not None and s0.vram_used_bytes is not None and s0.vram_total_bytes is not None
    assert value("gpu_used_vram", gpu_id="0") == pytest.approx(s0.vram_used_bytes / MB)
    assert value("gpu_total_vram", gpu_id="0") == pytest.approx(196592.0, abs=1)  # MI300X in MB
    assert value("gpu_free_vram", gpu_id="0") == pytest.approx((s0.vram_total_bytes - s0.vram_used_bytes) / MB)
    assert value("gpu_package_power", gpu_id="0") == s0.power_w
    assert value("gpu_gfx_activity", gpu_id="0") == s0.util_pct
    assert value("gpu_clock", gpu_id="0", clock_type="GPU_CLOCK_TYPE_SYSTEM") == s0.sclk_mhz
    assert value("gpu_clock", gpu_id="0", clock_type="GPU_CLOCK_TYPE_MEMORY") == 1300.0
    assert len(fams["gpu_gfx_activity"].samples) == 8
    assert len(fams["amdtop_link_info"].samples) == 28  # every unordered pair of 8 once
    assert value("amdtop_link_info", gpu_a="0", gpu_b="1", type="XGMI", hops="1", weight="15") == 1
    assert value("amdtop_link_measured_bandwidth_bytes_per_second", gpu_a="0", gpu_b="1") == 48.5e9
    assert value("amdtop_link_max_bandwidth_bytes_per_second", gpu_a="0", gpu_b="1") == 64e9
    # GPU 0 runs at 30%, its peers at 90%: spread (90-30)/90.
    assert value("amdtop_tp_spread_percent", worker="llama-a", metric="util_pct") == pytest.approx(66.7, abs=3)
    assert value("amdtop_tp_imbalance", worker="llama-a") == 1
    assert value("amdtop_tp_imbalance", worker="llama-b") == 0
    assert value("amdtop_numa_mismatch", worker="llama-b") == 1
    assert value("amdtop_numa_mismatch", worker="llama-a") == 0
    assert value("amdtop_transport_fallback", worker="llama-b") == 1
    assert value("amdtop_worker_state", worker="llama-b", state="crashed") == 1
    assert value("amdtop_worker_state", worker="llama-b", state="ready") == 0
    assert value("amdtop_worker_ready", worker="llama-a") == 1
    assert value("amdtop_worker_restarts", worker="llama-a") == 2
    assert value("amdtop_worker_info", worker="llama-a", gpus="0,1,2,3", numa_node="0", port="19499") == 1
    assert value("amdtop_rccl_errors", worker="llama-b") == 3
    assert value("amdtop_ramp_knee_concurrency", worker="llama-a") == 48
    assert value("amdtop_flags", kind="tp_imbalance") == 1
    assert value("amdtop_flags", kind="gpu_lost") == 0


def test_idle_demo_node_has_gpu_metrics_but_no_worker_series() -> None:
    sim = SimBackend()
    fams = scrape(Exporter(frames(sim), "127.0.0.1:0"))
    assert {"gpu_gfx_activity", "gpu_used_vram", "gpu_junction_temperature", "amdtop_link_info"} <= set(fams)
    absent = {n for n in FAMILIES if n.startswith(("amdtop_worker", "amdtop_rccl", "amdtop_ramp", "amdtop_tp_"))}
    assert not absent & set(fams)
    assert "amdtop_link_measured_bandwidth_bytes_per_second" not in fams


def test_pcie_scenario_links_without_driver_bandwidth() -> None:
    sim = SimBackend(scenario="pcie-4")
    fams = scrape(Exporter(frames(sim), "127.0.0.1:0"))
    types = {s.labels["type"] for s in fams["amdtop_link_info"].samples}
    assert types == {"PCIE"}
    hops = {(s.labels["gpu_a"], s.labels["gpu_b"]): s.labels["hops"] for s in fams["amdtop_link_info"].samples}
    assert hops[("0", "1")] == "2" and hops[("0", "2")] == "3"
    assert "amdtop_link_max_bandwidth_bytes_per_second" not in fams


def test_empty_node_publishes_no_gpu_series() -> None:
    sim = SimBackend(scenario="empty")
    fams = scrape(Exporter(frames(sim), "127.0.0.1:0"))
    assert not [n for n in fams if n.startswith("gpu_")]
    assert "amdtop_snapshot_timestamp_seconds" in fams


def test_no_series_for_what_the_backend_cannot_give() -> None:
    """A backend that gives only utilisation and VRAM used (no total, power, temps, clocks) and one lost GPU."""
    info = (
        GpuInfo(0, "Some GPU", "0000:01:00.0", None, vendor="NVIDIA"),
        GpuInfo(1, "Some GPU", "0000:02:00.0", None, vendor="NVIDIA"),
    )
    snap = NodeSnapshot(
        "partial",
        "host-x",
        1.0,
        Topology(info, (), ()),
        (GpuSample(0, util_pct=12.0, vram_used_bytes=5 * MB), GpuSample(1, lost=True, error="gone")),
    )
    fams = scrape(Exporter(lambda: NodeFrame(snap, flags=snap.flags), "127.0.0.1:0"))
    present = {n for n in fams if n.startswith("gpu_")}
    assert present == {"gpu_gfx_activity", "gpu_used_vram"}
    assert [s.labels["gpu_id"] for s in fams["gpu_gfx_activity"].samples] == ["0"]
    assert "amdtop_gpu_power_cap_watts" not in fams
    lost = {s.labels["gpu_id"]: s.value for s in fams["amdtop_gpu_lost"].samples}
    assert lost == {"0": 0.0, "1": 1.0}
    info_labels = fams["amdtop_gpu_info"].samples[0].labels
    assert info_labels["numa_node"] == "" and info_labels["serial_number"] == ""


def test_lost_sim_gpu_drops_its_metrics() -> None:
    sim = SimBackend()
    sim.lose_gpu(3)
    fams = scrape(Exporter(frames(sim), "127.0.0.1:0"))
    assert "3" not in {s.labels["gpu_id"] for s in fams["gpu_package_power"].samples}
    assert {s.labels["gpu_id"]: s.value for s in fams["amdtop_gpu_lost"].samples}["3"] == 1.0
    kinds = {s.labels["kind"]: s.value for s in fams["amdtop_flags"].samples}
    assert kinds["gpu_lost"] == 1.0


class CountingSim:
    """Counts the backend polls a provider makes."""

    def __init__(self) -> None:
        self.sim = SimBackend()
        self.calls = 0

    def __call__(self) -> NodeFrame:
        self.calls += 1
        return NodeFrame(self.sim.sample())


def test_min_interval_two_scrapes_one_sample() -> None:
    now = [100.0]
    counting = CountingSim()
    exp = Exporter(counting, "127.0.0.1:0", min_interval=1.0, clock=lambda: now[0])
    first = exp.render()
    now[0] += 0.5
    second = exp.render()
    assert counting.calls == 1
    assert first == second  # same cached state, byte for byte
    now[0] += 0.6
    exp.render()
    assert counting.calls == 2
    polls = scrape(exp)["amdtop_exporter_polls"].samples[0].value
    assert polls == 2


def test_concurrent_http_scrapes_share_one_poll() -> None:
    counting = CountingSim()
    exp = Exporter(counting, "127.0.0.1:0", min_interval=3600.0)
    exp.start()
    try:
        bodies: list[bytes] = []

        def get() -> None:
            with urllib.request.urlopen(exp.url, timeout=10) as resp:
                bodies.append(resp.read())

        threads = [threading.Thread(target=get) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(bodies) == 6 and all(b"gpu_gfx_activity{" in b for b in bodies)
        assert counting.calls == 1
    finally:
        exp.stop()


def test_start_stop_start_again_and_url() -> None:
    exp = Exporter(CountingSim(), "127.0.0.1:19410")
    exp.start()
    assert exp.running and exp.url == "http://127.0.0.1:19410/metrics"
    exp.stop()
    assert not exp.running
    exp.start()  # the TUI toggles it: the port must be free again
    try:
        with urllib.request.urlopen(exp.url, timeout=10) as resp:
            assert resp.status == 200
    finally:
        exp.stop()


def _voluntary_switches(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_an_idle_exporter_sleeps_until_a_scrape_and_stops_at_once(host: str) -> None:
    exp = Exporter(CountingSim(), f"[{host}]:0" if ":" in host else f"{host}:0")
    exp.start()
    try:
        with urllib.request.urlopen(exp.url, timeout=10) as resp:
            assert resp.status == 200
        thread = exp._thread
        assert thread is not None and thread.native_id is not None
        time.sleep(0.2)
        before = _voluntary_switches(thread.native_id)
        time.sleep(1.5)
        woke = _voluntary_switches(thread.native_id) - before
        assert woke <= 1, f"the idle exporter woke {woke} times in 1.5 s"  # start_http_server's loop wakes 3
    finally:
        start = time.monotonic()
        exp.stop()
    assert time.monotonic() - start < 2.0  # the loop has no timeout: the stop wakes it
    assert thread is not None and not thread.is_alive()
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, exp.port))  # the port is free again


def test_port_in_use_is_one_line_runtime_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 19411))
        sock.listen(1)
        exp = Exporter(CountingSim(), "127.0.0.1:19411")
        with pytest.raises(AmdtopError, match=r"--listen: 127.0.0.1:19411 is already in use") as info:
            exp.start()
        assert info.value.exit_code == 1
        assert not exp.running


@pytest.mark.parametrize("text", ["9464", ":9464", "host:", "host:port", "127.0.0.1:70000"])
def test_bad_listen_is_input_error(text: str) -> None:
    with pytest.raises(InputError, match="--listen"):
        parse_listen(text)


def test_listen_forms() -> None:
    assert parse_listen("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_listen("[::1]:19412") == ("::1", 19412)
    assert parse_listen("0.0.0.0:19413") == ("0.0.0.0", 19413)


def test_gpu_labels_match_amd_exporter() -> None:
    assert GPU_LABELS[:2] == ("gpu_id", "hostname")
    assert FAMILIES["gpu_used_vram"].unit == "MB"


def sysfs_families(tree: SysfsTree, vanish: int | None = None) -> dict[str, object]:
    backend = open_sysfs(BackendOptions(sysfs_root=tree.root, proc_root=tree.proc_root))
    try:
        if vanish is not None:
            backend.sample()
            tree.vanish(vanish)  # falls off the bus mid-run
        return scrape(Exporter(frames(backend), "127.0.0.1:0"))
    finally:
        backend.close()


def test_sysfs_fixture_node_families_and_units(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    fams = sysfs_families(tree)
    for name, fam in fams.items():
        assert fam.type == FAMILIES[name].kind, name
        for sample in fam.samples:
            assert set(sample.labels) == set(FAMILIES[name].labels), name
    spec = tree.gpus[0]

    def gpu0(name: str, **labels: str) -> float:
        hits = [
            s.value
            for s in fams[name].samples
            if s.labels["gpu_id"] == "0" and all(s.labels[k] == v for k, v in labels.items())
        ]
        assert len(hits) == 1, name
        return float(hits[0])

    assert gpu0("gpu_used_vram") == pytest.approx(spec.vram_used / MB)
    assert gpu0("gpu_total_vram") == pytest.approx(spec.vram_total / MB)
    assert gpu0("gpu_package_power") == spec.power_uw / 1e6
    assert gpu0("gpu_junction_temperature") == spec.temps_mc["junction"] / 1000
    assert gpu0("gpu_memory_temperature") == spec.temps_mc["mem"] / 1000
    assert gpu0("gpu_gfx_activity") == spec.busy
    assert gpu0("gpu_clock", clock_type="GPU_CLOCK_TYPE_SYSTEM") == spec.sclk_hz / 1e6
    assert fams["gpu_gfx_activity"].samples[0].labels["card_model"] == "AMD Instinct MI300X"
    assert len(fams["gpu_gfx_activity"].samples) == 8
    assert {s.labels["type"] for s in fams["amdtop_link_info"].samples} == {"XGMI"}


def test_sysfs_missing_files_and_vanished_gpu_give_no_series(tmp_path: Path) -> None:
    tree = build_pcie_4(tmp_path)
    (tree.device_dir(1) / "mem_busy_percent").unlink()
    fams = sysfs_families(tree, vanish=3)
    assert "1" not in {s.labels["gpu_id"] for s in fams["gpu_umc_activity"].samples}
    assert "1" in {s.labels["gpu_id"] for s in fams["gpu_gfx_activity"].samples}
    for name in ("gpu_gfx_activity", "gpu_used_vram", "gpu_package_power", "gpu_junction_temperature"):
        assert "3" not in {s.labels["gpu_id"] for s in fams[name].samples}, name
    assert {s.labels["gpu_id"]: s.value for s in fams["amdtop_gpu_lost"].samples}["3"] == 1.0
    assert {s.labels["type"] for s in fams["amdtop_link_info"].samples} == {"PCIE"}


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("gpu-node-1")


def test_export_ticks_on_its_own_clock_not_on_scrapes(tmp_path: Path) -> None:
    """`amdtop export` polls every --interval whoever scrapes: nobody scrapes for a while, yet the frame served is
    fresh and the polls went on (the TP window holds the samples it is sized for)."""
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "amdtop", "export", "--demo", "--listen", f"127.0.0.1:{port}", "--interval", "0.2",
         "--state-dir", str(tmp_path), "--config", str(tmp_path / "none.toml")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=5).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)

        def polls() -> tuple[float, float]:
            with urllib.request.urlopen(url, timeout=10) as resp:
                fams = {f.name: f for f in text_string_to_metric_families(resp.read().decode())}
            return fams["amdtop_polls"].samples[0].value, fams["amdtop_frame_timestamp_seconds"].samples[0].value

        first, _ = polls()
        time.sleep(2.0)  # no scrape for 2 s: ten ticks at 0.2 s (a loaded box makes it fewer, never none)
        second, stamp = polls()
        third, _ = polls()
        assert second >= first + 3
        assert third - second <= 1  # a scrape does not tick
        assert time.time() - stamp < 2.0
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_runtime_exporter_polls_on_the_runtime_clock_whoever_scrapes(tmp_path: Path) -> None:
    """amdtop export / serve / x: ten scrapes between two ticks poll nothing; amdtop_exporter_polls counts ticks."""
    from amdtop import runtime
    from amdtop.exporter import runtime_exporter
    from amdtop.runtime import NodeSpec

    node = runtime.open(NodeSpec(config=tmp_path / "none.toml", state_dir=tmp_path, backend="sim"), kernel=False)
    try:
        exp = runtime_exporter(node.runtime, "127.0.0.1:0")
        node.runtime.tick()
        sampled = node._node.backend.sample
        calls = [0]

        def counting_sample() -> Any:
            calls[0] += 1
            return sampled()

        node._node.backend.sample = counting_sample  # type: ignore[method-assign]
        bodies = [exp.render() for _ in range(10)]
        assert calls[0] == 0 and len(set(bodies)) == 1  # the scrapes served the one frame; nothing polled
        assert scrape(exp)["amdtop_exporter_polls"].samples[0].value == 1
        node.runtime.tick()
        node.runtime.tick()
        assert calls[0] == 2
        assert scrape(exp)["amdtop_exporter_polls"].samples[0].value == 3  # the runtime's polls, not 12 scrapes
    finally:
        node.shutdown()
