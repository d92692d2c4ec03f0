"""Pilot tests: navigation, every key, read-only mode, the poller thread and row diffing."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

from rich.console import Console

from amdtop.errors import InputError
from amdtop.supervisor.retune import parse_changes
from tests.tui.conftest import imbalanced_specs, make_app, open_app, settle
from tui.screens.confirm import ConfirmScreen
from tui.screens.help import HelpScreen
from tui.screens.retune import RetuneScreen
from widgets.gpu_table import GpuTable
from widgets.topo_matrix import TopoMatrix


async def _ready(pilot: Any, steps: int = 3) -> None:
    await pilot.pause()
    pilot.app.step(steps)
    await settle(pilot)


async def test_q_quits() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


async def test_ctrl_c_quits() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.is_running


async def test_lost_terminal_exits() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        app._check_tty()  # stdin under pytest is not a TTY: same as an SSH drop
        await pilot.pause()
    assert not app.is_running


async def test_a_frame_checks_the_terminal_once_a_second(monkeypatch: Any) -> None:
    # The tty watch rides on the frames (its own 1 s timer woke the app once more every second): a frame
    # checks at most once a second, and the first frame after an SSH drop exits.
    import types

    import tui.app
    from tui.messages import SnapshotReady

    # The app's clock stands still unless the test moves it: five frames applied on a loaded CI machine can take
    # more than a second of real time (seen once: two checks 1.3 s apart).
    monkeypatch.setattr(tui.app, "time", types.SimpleNamespace(monotonic=lambda: 1000.0, time=time.time, strftime=time.strftime, gmtime=time.gmtime, localtime=time.localtime))
    app = make_app()
    app.watch_tty = True
    checks: list[float] = []
    app._check_tty = lambda: checks.append(time.monotonic())  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        frame = app.step()
        for _ in range(5):
            app.on_snapshot_ready(SnapshotReady(frame))
        assert len(checks) == 1
        app._tty_checked -= 1.0  # a second later
        app.on_snapshot_ready(SnapshotReady(frame))
        assert len(checks) == 2
        del app._check_tty  # the real check: stdin under pytest is not a TTY, as after an SSH drop
        app._tty_checked -= 1.0
        app.on_snapshot_ready(SnapshotReady(frame))
        await pilot.pause()
    assert not app.is_running


async def test_panes_built_from_gpu_list_and_rows_diffed() -> None:
    for scenario, n in (("mi300x-8", 8), ("pcie-4", 4), ("empty", 0)):
        app = make_app(scenario)
        async with app.run_test(size=(200, 50)) as pilot:
            await _ready(pilot)
            table = app.dashboard.query_one("#pane-gpus", GpuTable)
            assert table.row_count == n
            rebuilds = table.rebuilds
            app.step(3)
            await settle(pilot)
            assert table.rebuilds == rebuilds  # updated cell by cell, never rebuilt per tick


async def test_number_keys_switch_tabs_on_small_terminal() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await _ready(pilot)
        board = app.dashboard
        assert board.narrow  # panes folded under one tab strip; the GPU table stays
        for key, pane in zip("234567", ("topo", "groups", "numa", "workers", "logs", "procs"), strict=True):
            await pilot.press(key)
            await pilot.pause()
            assert board.active_pane == pane
            assert board.query_one(f"#pane-{pane}").display
            assert board.query_one("#pane-gpus").region.height  # always on screen
            if pane in board.plan.folded:
                assert board.plan.slot_pane == pane  # shown in the slot under the tabs
            hidden = [p for p in board.plan.folded if p != board.plan.slot_pane]
            assert not any(board.query_one(f"#pane-{p}").region.height for p in hidden), hidden
        await pilot.press("1")
        await pilot.pause()
        assert board.active_pane == "gpus" and board.query_one("#pane-gpus").has_focus


async def test_wide_terminal_shows_every_pane() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        assert not app.dashboard.narrow
        for pane in ("gpus", "topo", "groups", "numa", "workers", "logs"):
            assert app.dashboard.query_one(f"#pane-{pane}").region.height > 0, pane


async def test_help_opens_and_closes() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert any(k == "s" for k, _, _ in app.screen.keys)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard


async def test_stop_asks_then_stops_selected_worker() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "down")  # workers pane, second worker
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settle(pilot)
        assert app.control.calls == []
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        assert app.control.calls == [("stop", "qwen-32b")]


async def test_restart_and_launch_keys() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "r")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot)
        await pilot.press("l")
        await settle(pilot)
        assert app.control.calls == [("restart", "llama-70b"), ("launch", "llama-70b")]


async def test_retune_dialog_diff_confirm() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "e")
        await pilot.pause()
        assert isinstance(app.screen, RetuneScreen)
        # The dialog starts from the worker's current flags and env; only what the user changes is sent.
        value = app.screen.query_one("#retune-input").value
        assert value.startswith("max-num-seqs=") and "gpu-memory-utilization=0.9" in value
        assert "env.NCCL_DEBUG=INFO" in value and "numa_node=" in value
        await pilot.press("end", " ", *"max-num-seqs=64", "enter")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "max-num-seqs" in app.screen.text
        await pilot.press("y")
        await settle(pilot)
        assert app.control.calls == [("retune", "llama-70b", "max-num-seqs=64")]


def test_retune_words_mask_secrets_and_keep_them_unwritten() -> None:
    from amdtop.supervisor.profiles import Profile
    from amdtop.supervisor.retune import changed_words, retune_words

    p = Profile("w", "m", (0,), "auto", 8000, args=(("max-num-seqs", 64), ("enforce-eager", True)),
                env=(("HF_TOKEN", "hf_abcdefgh12345678"), ("NCCL_DEBUG", "INFO")))  # fmt: skip
    words = retune_words(p)
    assert words[0] == "max-num-seqs=64" and "numa_node=auto" in words
    assert not any("hf_abcdefgh12345678" in w for w in words) and any(w.startswith("env.HF_TOKEN=") for w in words)
    typed = parse_changes([*words, "max-num-seqs=32"])
    assert changed_words(words, typed) == {"max-num-seqs": "32"}  # the masked token is never written back
    kept = [w for w in words if not w.startswith("env.NCCL_DEBUG")]
    assert changed_words(words, parse_changes(kept)) == {"env.NCCL_DEBUG": ""}  # deleting a variable unsets it


def test_parse_changes_rejects_bad_pairs() -> None:
    """One parse_changes for the CLI, the dialog and command mode: dashes dropped, empty only for env.NAME."""
    assert parse_changes(["--max-num-seqs=8", "block-size=16"]) == {"max-num-seqs": "8", "block-size": "16"}
    assert parse_changes(["env.NCCL_DEBUG="]) == {"env.NCCL_DEBUG": ""}  # unsets the variable
    for bad in ("", "max-num-seqs", "=3", "max-num-seqs=", "--=3"):
        try:
            parse_changes(bad.split())
        except InputError:
            continue
        raise AssertionError(bad)


async def test_readonly_hides_and_blocks_control_keys() -> None:
    app = make_app(readonly=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        for action in ("launch", "restart", "stop", "retune", "ramp", "probe"):
            assert app.check_action(action, ()) is False
        await pilot.press("5", "s", "r", "l", "e")
        await settle(pilot)
        assert app.screen is app.dashboard
        footer_keys = {b.binding.key for b in app.screen.active_bindings.values() if b.enabled and b.binding.show}
        assert "s" not in footer_keys and "q" in footer_keys
        # Exporting is observation: the key stays in --readonly.
        assert app.check_action("exporter", ()) is True and "x" in footer_keys


def _scrape_polls(app: Any) -> tuple[float, float]:
    """(amdtop_polls_total, amdtop_frame_timestamp_seconds) of one in-process scrape of the app's exporter."""
    from prometheus_client.parser import text_string_to_metric_families

    text = app.exporter.render().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return fams["amdtop_polls"].samples[0].value, fams["amdtop_frame_timestamp_seconds"].samples[0].value


async def test_exporter_stays_fresh_under_a_modal_and_while_paused() -> None:
    """The runtime publishes every frame to the exporter whatever the dashboard draws."""
    from tui.screens.help import HelpScreen

    app = make_app(exporter_listen="127.0.0.1:0")
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert app.exporter is not None and app.exporter.running
        first, _ = _scrape_polls(app)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        drawn = app.frames
        app.runtime.tick()
        app.runtime.tick()
        await settle(pilot)
        under_modal, _ = _scrape_polls(app)
        assert under_modal == first + 2 and app.frames == drawn  # served, not drawn
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert app.paused
        app.runtime.tick()
        await settle(pilot)
        paused, stamp = _scrape_polls(app)
        assert paused == under_modal + 1 and stamp == app.runtime.latest().made_at
        await pilot.press("x")  # stop it: the port is freed
        await settle(pilot)
        assert app.exporter is None


async def test_ramp_observer_records_a_new_frame_per_step_under_its_screen() -> None:
    """The ramp screen covers the dashboard; the node runs the ramp, and its observer still reads the frame of each
    new tick."""
    from amdtop.ramp.observe import observer_from_frames
    from amdtop.telemetry.sim import GpuDemand
    from tui.screens.ramp import RampScreen

    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "a")
        await settle(pilot)
        assert isinstance(app.screen, RampScreen)
        name = app.screen.worker
        assert name is not None
        # The ramp is the node's (its service's ramps), not the screen's: the screen runs none itself.
        await _until(lambda: any(w == name for w, *_ in app.service.ramps()))
        assert app.screen._ramp is None
        # What the node's ramp observes: the runtime's newest frame, drawn or not.
        ramps = app.service.node_ramps  # type: ignore[attr-defined]
        assert ramps.latest == app.runtime.latest
        worker = app.runtime.latest().worker(name)
        assert worker is not None
        observe = observer_from_frames(ramps.latest, worker.gpus, [g.gpus for g in worker.tp_groups()])
        steps = []
        for load in (0.1, 0.9, 0.4):  # one ramp step per tick, each at another load
            app.backend.set_demand("ramp-test", {g: GpuDemand(load, 0) for g in worker.gpus})
            frame = app.runtime.tick()
            want = {g.index: g.util_pct for g in frame.snapshot.gpus if g.index in worker.gpus}
            got = {o.index: o.util_pct for o in observe()}
            assert got == want  # this tick's frame, not the one drawn before the screen opened
            steps.append(got)
        assert steps[0] != steps[1] != steps[2]


async def _until(cond: Any, timeout: float = 20.0) -> None:
    import asyncio
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_ramp_key_opens_ramp_screen_for_selected_worker() -> None:
    from tui.screens.ramp import RampScreen

    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        app.push_screen = _capture(app, RampScreen)  # type: ignore[method-assign]
        await pilot.press("5", "a")
        await pilot.pause()
        assert app.pushed.url == "http://127.0.0.1:18080" and app.pushed.worker == "llama-70b"


def _capture(app: Any, kind: type) -> Any:
    def push(screen: Any, *args: Any, **kw: Any) -> None:
        assert isinstance(screen, kind)
        app.pushed = screen

    return push


async def test_exporter_key_starts_and_stops_exporter() -> None:
    app = make_app(exporter_listen="127.0.0.1:18290")
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert app.exporter is not None and "18290" in app.exporter.url
        await pilot.press("x")
        await settle(pilot)
        assert app.exporter is None


async def test_matrix_mode_cycles_link_gbps_and_live_traffic(tmp_path: Any) -> None:
    from amdtop.probe.cache import save_results
    from amdtop.probe.model import CopyResult, ProbeResults

    def topo_text() -> str:
        topo = app.dashboard.query_one("#pane-topo", TopoMatrix)
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(topo.render_view(topo.view))
        return console.export_text()

    app = make_app(state_dir=tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("m")  # no probe yet: straight to live traffic and GPU health
        await pilot.pause()
        assert (app.dashboard.show_gbps, app.dashboard.show_traffic) == (False, True)
        text = topo_text()
        assert "throttled now" in text and "ECC" in text
        await pilot.press("m")
        await pilot.pause()
        assert (app.dashboard.show_gbps, app.dashboard.show_traffic) == (False, False)
        copy = (1 << 30) / 48.5e9
        save_results(tmp_path, ProbeResults(1.0, "h", (0, 1), (CopyResult(0, 1, 1 << 30, copy), CopyResult(1, 0, 1 << 30, copy))))
        app.pipeline.request_state_files()
        app.step(1)
        await pilot.press("m")
        await pilot.pause()
        assert app.dashboard.show_gbps is True
        assert "48GB/s" in topo_text()
        await pilot.press("m")
        await pilot.pause()
        assert app.dashboard.show_traffic is True and app.dashboard.show_gbps is False


async def test_pause_freezes_the_view() -> None:
    app = make_app(specs=imbalanced_specs())
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("p")
        before = app.frames
        from tui.messages import SnapshotReady

        app.post_message(SnapshotReady(app.pipeline.tick()))
        await settle(pilot)
        assert app.frames == before
        await pilot.press("p")
        await settle(pilot)
        assert app.frames == before + 1


async def test_poller_thread_delivers_frames_and_stops_on_quit() -> None:
    app = make_app(autopoll=True, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(750):  # up to 15 s: a busy 2-core CI box may starve the first frames
            await pilot.pause(0.02)
            if app.frames >= 3:
                break
        assert app.frames >= 3
        assert app.runtime.running
        assert [t.name for t in threading.enumerate()].count("amdtop-runtime") == 1  # one tick loop, no overlap
    assert not app.runtime.running
    assert "amdtop-runtime" not in [t.name for t in threading.enumerate()]


async def test_frames_arriving_under_a_modal_are_drawn_when_it_closes() -> None:
    from tui.messages import SnapshotReady

    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        before = app.frames
        app.post_message(SnapshotReady(app.pipeline.tick()))
        await settle(pilot)
        assert app.frames == before  # nobody sees the dashboard: skipped
        await pilot.press("escape")
        await settle(pilot)
        assert app.frames == before + 1


async def test_log_pane_fed_from_worker_logs(tmp_path: Any) -> None:
    from textual.widgets import Log

    from amdtop.model import WorkerState, WorkerStatus
    from amdtop.telemetry.sim import SimBackend
    from tests.tui.conftest import FROZEN, NO_PROC

    log = tmp_path / "llama.log"
    log.write_text("(APIServer pid=1) INFO 11-29 13:46:59 [api_server.py:1] Starting vLLM API server\n")

    class Source:
        def status(self) -> list[WorkerStatus]:
            return [WorkerStatus("llama", WorkerState.READY, (0, 1), log=str(log))]

        def close(self) -> None:
            pass

    sim = SimBackend(seed=1, clock=lambda: FROZEN)
    app = open_app(
        sim, workers=Source(), autopoll=False, clock=lambda: FROZEN, proc_root=NO_PROC, discover=False, follow_logs=True
    )
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.step(1)
        app.step(1)
        await settle(pilot)
        with log.open("a") as fh:
            fh.write("vm:979:979 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")
        app.step(1)
        await settle(pilot)
        text = "\n".join(app.dashboard.query_one("#pane-logs").query_one(Log).lines)
        assert "Starting vLLM API server" in text and "via P2P/IPC" in text


async def test_probe_key_confirms_measures_caches_and_shows_gbps(tmp_path: Any, monkeypatch: Any) -> None:
    import amdtop.probe.torch_runner as torch_runner
    from amdtop.probe.cache import load_results
    from tests.unit.test_probe import FakeDist

    monkeypatch.setattr(torch_runner, "TorchDist", lambda: FakeDist({(0, 1): 40.0}, default=60.0))
    app = make_app(state_dir=tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("b")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await settle(pilot)
        app.step(1)  # the poller thread is off in tests: take the tick that carries the fresh results
        await settle(pilot)
        results = load_results(tmp_path)
        assert results is not None and results.pair_gbps(0, 1) is not None
        assert app.dashboard.show_gbps is True
        topo = app.dashboard.query_one("#pane-topo", TopoMatrix)
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(topo.render_view(topo.view))
        text = console.export_text()
        assert "40GB/s" in text and "60GB/s" in text  # the slow pair 0-1 and the others, as measured


async def test_probe_without_torch_is_one_line_and_readonly_hides_it() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("b")
        await pilot.pause()
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await settle(pilot)
        texts = [n.message for n in app._notifications]
        assert any(t.startswith("probe: PyTorch is not installed") for t in texts), texts
    ro = make_app(readonly=True)
    async with ro.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        assert ro.check_action("probe", ()) is False


async def test_the_heap_settles_once_after_the_first_frame_drawn(monkeypatch: Any) -> None:
    # A real run (settle_heap, as tui/launch.py and tui/attached.py open it) freezes start-up's objects once the first
    # frame is on screen, and never again; a test's app (the default) never does.
    import tui.app

    calls: list[int] = []
    monkeypatch.setattr(tui.app.heap, "settle", lambda: calls.append(1) or True)
    app = make_app(settle_heap=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert calls == []  # nothing drawn yet
        await _ready(pilot, steps=4)
    assert calls == [1] and app.frames >= 1
    plain = make_app()
    async with plain.run_test(size=(120, 40)) as pilot:
        await _ready(pilot)
    assert len(calls) == 1
