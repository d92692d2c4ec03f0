"""The Processes pane (key 7): sorting, the / filter, the signal confirmation, read-only, workers going through stop,
and its snapshots at 200x50 and 80x24 with and without workers.

Host facts of the simulated processes come from a fixed table (known ground truth for the pictures); the signal
tests use real child processes read through psutil.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

from amdtop.gpuprocs import HostInfo, HostProcs
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend
from tests.tui.conftest import FROZEN, NO_PROC, open_app, settle
from tests.tui.demo_control import DemoControl
from tui.app import AmdtopApp
from tui.screens.confirm import ConfirmScreen
from widgets.processes_table import ProcessesTable

ALICE, BOB = 31337, 31400


class FixedHost:
    """Host facts for known pids, as the live host would give them (the snapshot tests need the same picture)."""

    def __init__(self, table: dict[int, HostInfo]) -> None:
        self.table = table

    def read(self, pids: Collection[int]) -> dict[int, HostInfo]:
        return {p: self.table[p] for p in pids if p in self.table}


HOST = {
    ALICE: HostInfo(ALICE, "alice", 1001, "python3 train.py --lr 3e-4 --wandb-api-key ***", FROZEN - 5400, 99.7, 6 * GIB),
    BOB: HostInfo(BOB, "bob", 1002, "jupyter-kernel --KernelApp.token=***", FROZEN - 86400 * 2, 3.1, 900 << 20),
    **{
        41000 + i: HostInfo(41000 + i, "amdtop", 999, f"vllm serve /models/{name} --port {18080 + i}", FROZEN - 3725,
                            12.5 + i, 4 * GIB)
        for i, name in enumerate(("llama-70b", "qwen-32b", "mistral-7b"))
    },
}  # fmt: skip


def procs_app(
    *, workers: bool, readonly: bool = False, host: Any = None, extra: dict[str, Any] | None = None
) -> AmdtopApp:
    sim = SimBackend(seed=7, clock=lambda: FROZEN, hostname="amdtop-demo")
    control = DemoControl(
        sim, None if workers else [], clock=lambda: FROZEN, pid_base=41000,
        log_dir=Path(tempfile.mkdtemp(prefix="amdtop-demo-logs-")) if workers else None,
    )  # fmt: skip
    # Foreign jobs: alice's training run and bob's notebook share GPU 7 (GPU 0 too without workers).
    gpu = 7 if workers else 0
    sim.set_demand("alice", {gpu: GpuDemand(0.40, 60 * GIB, ALICE, "python3")})
    sim.set_demand("bob", {gpu: GpuDemand(0.55, 2 * GIB, BOB, "jupyter")})
    for name, demand in (extra or {}).items():
        sim.set_demand(name, demand)
    return open_app(
        sim, workers=control, demo_load=control.demo_load(), readonly=readonly,
        clock=lambda: FROZEN, proc_root=NO_PROC, discover=False, state_dir=NO_PROC, autopoll=False,
        follow_logs=workers, host_procs=host if host is not None else FixedHost(HOST),
        config_path=Path("/etc/amdtop/config.toml"),
    )  # fmt: skip


async def _ready(pilot: Any, steps: int = 2) -> None:
    await pilot.pause()
    pilot.app.step(steps)
    await settle(pilot)


def _table(app: AmdtopApp) -> ProcessesTable:
    return app.dashboard.query_one("#pane-procs", ProcessesTable)


def _pids(app: AmdtopApp) -> list[str]:
    table = _table(app)
    return [table.get_row(k)[1] for k in table._keys if k.startswith("p-")]


def _select(app: AmdtopApp, key: str) -> None:
    table = _table(app)
    table.focus()
    table.move_cursor(row=table._keys.index(key))


# -- snapshots -----------------------------------------------------------------------------------------------------------


def test_processes_200x50_with_workers(snap_compare: Any) -> None:
    assert snap_compare(procs_app(workers=True), terminal_size=(200, 50), run_before=_ready)


def test_processes_200x50_without_workers(snap_compare: Any) -> None:
    # Nothing in Workers or Logs: each says what would fill it, and the Processes pane takes their room.
    assert snap_compare(procs_app(workers=False), terminal_size=(200, 50), run_before=_ready)


def test_processes_80x24_with_workers(snap_compare: Any) -> None:
    assert snap_compare(procs_app(workers=True), terminal_size=(80, 24), press=["7"], run_before=_ready)


def test_processes_80x24_without_workers(snap_compare: Any) -> None:
    assert snap_compare(procs_app(workers=False), terminal_size=(80, 24), press=["7"], run_before=_ready)


# -- Pilot ------------------------------------------------------------------------------------------------------------------


async def test_key_7_shows_every_process_with_owner_and_totals() -> None:
    app = procs_app(workers=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("7")
        await settle(pilot)
        table = _table(app)
        assert app.dashboard.active_pane == "procs" and table.has_focus
        owners = {table.get_row(k)[1]: table.get_row(k)[3].plain for k in table._keys if k.startswith("p-")}
        assert owners[str(ALICE)] == "foreign" and owners["41000"].startswith("llama-70b/r")
        total = table.get_row("t-7")
        assert total[3].plain == "2 proc" and total[4].plain == "62.0G"
        assert "held by no live process" in total[9].plain


async def test_t_groups_the_processes_under_their_workers() -> None:
    app = procs_app(workers=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("7", "t")
        await settle(pilot)
        table = _table(app)
        keys = list(table._keys)
        owners = [k for k in keys if k.startswith("o-")]
        # amdtop's workers first, the foreign processes last; each owner's row over its own processes.
        assert owners[0] == "o-llama-70b" and owners[-1] == "o-foreign", owners
        first = keys[keys.index("o-llama-70b") + 1 : keys.index(owners[1])]
        assert first and all(table.get_row(k)[3].plain.startswith("llama-70b/r") for k in first)
        head = table.get_row("o-llama-70b")
        assert head[3].plain == "llama-70b" and f"{len(first)} proc on GPUs" in head[9].plain
        assert str(ALICE) in [table.get_row(k)[1] for k in keys[keys.index("o-foreign") :]]
        assert not any(k.startswith("t-") for k in keys) and "by worker (t)" in table.border_subtitle
        await pilot.press("t")
        await settle(pilot)
        assert not any(k.startswith("o-") for k in table._keys)


async def test_sort_keys_cycle_and_reverse() -> None:
    app = procs_app(workers=False)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("7")
        assert _pids(app) == [str(ALICE), str(BOB)]  # GPU memory, biggest first
        await pilot.press("o")  # GPU%: bob's notebook is busier
        await settle(pilot)
        assert _pids(app) == [str(BOB), str(ALICE)]
        assert "sort GPU% ▼" in _table(app).border_subtitle and _table(app).border_subtitle.startswith("by GPU (t)")
        await pilot.press("O")
        await settle(pilot)
        assert _pids(app) == [str(ALICE), str(BOB)] and "▲" in _table(app).border_subtitle
        for _ in range(5):  # -> CPU%, RSS, Elapsed, PID, User
            await pilot.press("o")
        await settle(pilot)
        assert _table(app).sort == "user" and _pids(app) == [str(ALICE), str(BOB)]


async def test_slash_filter_by_user_and_gpu() -> None:
    app = procs_app(workers=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("7", "slash", *"bob", "enter")
        await settle(pilot)
        assert _pids(app) == [str(BOB)] and list(_table(app)._keys) == [f"p-7-{BOB}", "t-7"]
        assert "/bob" in _table(app).border_subtitle
        await pilot.press("slash", *["backspace"] * 3, *"gpu1", "enter")
        await settle(pilot)
        assert _pids(app) == ["41000"]  # llama-70b's API server on GPU 1
        await pilot.press("slash", "escape")
        await settle(pilot)
        assert len(_pids(app)) == 9


async def test_signal_confirmation_names_pid_user_command_then_term_then_kill() -> None:
    stubborn = subprocess.Popen(
        [
            "python3",
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)",
            "--token",
            "s3cret",
        ]
    )
    try:
        app = procs_app(
            workers=False, host=HostProcs(), extra={"stubborn": {3: GpuDemand(0.2, 5 * GIB, stubborn.pid, "python3")}}
        )
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            await _ready(pilot)
            _select(app, f"p-3-{stubborn.pid}")
            await pilot.press("k")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, ConfirmScreen)
            user = _table(app).get_row(f"p-3-{stubborn.pid}")[2]
            assert f"Send TERM to pid {stubborn.pid} of user {user} on GPU 3?" in screen.text
            assert "--token ***" in screen.text and "s3cret" not in screen.text
            await pilot.press("n")  # no: nothing sent
            await settle(pilot)
            assert app.screen is app.dashboard and not app.controller.termed
            await pilot.press("k", "y")
            await settle(pilot)
            assert app.controller.termed and stubborn.poll() is None  # TERM sent, and ignored
            await pilot.press("k")
            await settle(pilot)
            assert isinstance(app.screen, ConfirmScreen) and "Send KILL (it did not exit after TERM)" in app.screen.text
            await pilot.press("y")
            await settle(pilot)
            assert stubborn.wait(5) == -signal.SIGKILL
    finally:
        stubborn.kill()
        stubborn.wait()


async def test_readonly_hides_the_signal_key_and_refuses() -> None:
    victim = subprocess.Popen(["sleep", "30"])
    try:
        app = procs_app(
            workers=False, readonly=True, host=HostProcs(),
            extra={"victim": {2: GpuDemand(0.2, GIB, victim.pid, "sleep")}},
        )  # fmt: skip
        async with app.run_test(size=(200, 50)) as pilot:
            await _ready(pilot)
            _select(app, f"p-2-{victim.pid}")
            await settle(pilot)
            assert _table(app).check_action("signal", ()) is False
            await pilot.press("k")
            await settle(pilot)
            assert app.screen is app.dashboard  # no confirmation
            from tui.viewmodel.processes import find_row

            # as if the key got through
            app.controller.signal(find_row(app.dashboard.last_frame, f"p-2-{victim.pid}"))
            await settle(pilot)
            assert app.screen is app.dashboard
            assert any("read-only" in str(n.message) for n in app._notifications)
            assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


async def test_k_on_a_worker_process_asks_to_stop_the_worker() -> None:
    app = procs_app(workers=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        _select(app, "p-6-41002")  # mistral-7b's process on GPU 6
        await pilot.press("k")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "Stop worker mistral-7b?" in app.screen.text
        await pilot.press("y")
        await settle(pilot)
        assert ("stop", "mistral-7b") in app.control.calls  # type: ignore[union-attr]


async def test_another_users_process_as_root_says_whose_it_is() -> None:
    if os.geteuid() != 0:
        return  # only root can start another user's process here; the policy itself is unit-tested
    other = subprocess.Popen(["sleep", "30"], user=65534)
    try:
        app = procs_app(workers=False, host=HostProcs(), extra={"other": {5: GpuDemand(0.1, GIB, other.pid, "sleep")}})
        async with app.run_test(size=(200, 50)) as pilot:
            await _ready(pilot)
            _select(app, f"p-5-{other.pid}")
            await pilot.press("k")
            await settle(pilot)
            assert isinstance(app.screen, ConfirmScreen)
            assert "amdtop runs as root: this signals nobody's process" in app.screen.text
            await pilot.press("n")
    finally:
        other.kill()
        other.wait()


async def test_pane_json_and_exporter_read_the_same_rows() -> None:
    from amdtop.exporter.families import build_families
    from amdtop.report import frame_json

    app = procs_app(workers=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        frame = app.dashboard.last_frame
        assert frame is not None
        shown = {k for k in _table(app)._keys if k.startswith("p-")}
        doc = frame_json(frame)
        in_json = {f"p-{g['index']}-{p['pid']}" for g in doc["gpus"] for p in g["processes"]}
        (fam,) = [f for f in build_families(frame) if f.name == "amdtop_gpu_process_memory_bytes"]
        exported = {f"p-{s.labels['gpu_id']}-{s.labels['pid']}" for s in fam.samples}
        assert shown == in_json == exported and len(shown) == 9
        alice = next(p for g in doc["gpus"] for p in g["processes"] if p["pid"] == ALICE)
        assert (alice["user"], alice["owner"], alice["cpu_pct"], alice["elapsed_s"]) == ("alice", "foreign", 99.7, 5400.0)


def test_the_subtitle_names_when_the_rows_were_read() -> None:
    """Process lists read on their own cadence (issue 34): the pane says which reading its rows are, in UTC as the
    status clock; rows read with every tick say nothing."""
    from amdtop.model import NodeSnapshot, Topology
    from amdtop.pipeline import NodeFrame
    from tui.viewmodel import processes as process_view

    snap = NodeSnapshot("nvml", "h", 1_700_000_001.0, Topology((), (), ()), (), processes_at=1_700_000_000.0)
    assert process_view.read_at(NodeFrame(snapshot=snap)) == " · read 22:13:20Z"
    every_tick = NodeSnapshot("sim", "h", 1_700_000_001.0, Topology((), (), ()), ())
    assert process_view.read_at(NodeFrame(snapshot=every_tick)) == ""
    assert process_view.read_at(None) == ""
