"""A data-parallel worker in the dashboard: engine rows under its Workers row (enter), sleep/wake (z), TP groups pane."""

from __future__ import annotations

from typing import Any

from amdtop.layout import WorkerLayout
from tests.gates import PASS
from tests.tui.conftest import make_app, open_app, settle
from tests.tui.demo_control import Scenario
from tui.screens.confirm import ConfirmScreen
from widgets.workers_table import WorkersTable

STEPS = 6


async def _ready(pilot: Any, steps: int = STEPS) -> None:
    await pilot.pause()
    pilot.app.step(steps)
    await settle(pilot)


async def test_enter_expands_and_collapses_engine_rows() -> None:
    app = make_app(demo_layout="dp")
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5")
        table = app.dashboard.query_one("#pane-workers", WorkersTable)
        assert table.row_count == 1
        assert str(table.get_row("w-deepseek-moe")[0]).startswith("▸ deepseek-moe")
        assert "DP2xTP4+EP" in str(table.get_row("w-deepseek-moe")[2])
        await pilot.press("enter")
        await pilot.pause()
        assert table.row_count == 3
        engine1 = table.get_row("e-deepseek-moe/1")
        assert str(engine1[2]) == "4,5,6,7" and str(engine1[10]) == "dp1"
        # Engine rows belong to their worker: control keys act on it.
        await pilot.press("down")
        await pilot.pause()
        assert app.dashboard.selected_worker() == "deepseek-moe"
        await pilot.press("enter")
        await pilot.pause()
        assert table.row_count == 1


async def test_z_sleeps_after_confirmation_and_wakes_at_once() -> None:
    app = make_app(demo_layout="dp")
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "z")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(pilot)
        app.step(2)
        await settle(pilot)
        table = app.dashboard.query_one("#pane-workers", WorkersTable)
        assert str(table.get_row("w-deepseek-moe")[1]) == "asleep L1"
        assert app.control.calls[-1] == ("sleep", "deepseek-moe", "1")  # type: ignore[attr-defined]
        await pilot.press("z")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)
        app.step(2)
        await settle(pilot)
        assert str(table.get_row("w-deepseek-moe")[1]) == "ready"


async def test_readonly_has_no_sleep_key() -> None:
    app = make_app(demo_layout="dp", readonly=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5", "z")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen)
        assert app.check_action("sleep", ()) is False


def test_dp_by_tp_node(snap_compare: Any) -> None:
    assert snap_compare(make_app(demo_layout="dp"), terminal_size=(200, 50), run_before=_ready)


def test_expanded_dp_worker(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _ready(pilot)
        await pilot.press("5", "enter")
        await pilot.pause()

    assert snap_compare(make_app(demo_layout="dp"), terminal_size=(200, 50), run_before=run_before)


def test_imbalance_inside_one_dp_replica(snap_compare: Any) -> None:
    # DP0 (GPUs 0-3) even, DP1 (4-7) with GPU 7 lagging: only DP1 is flagged; the gap between replicas is not.
    # The worker is bound to node 0: a NUMA mismatch for DP1 (GPUs on node 1) only.
    node0 = tuple(range(0, 32)) + tuple(range(64, 96))
    spec = Scenario("moe", tuple(range(8)), 18210, (0.85, 0.84, 0.86, 0.85, 0.50, 0.52, 0.51, 0.12), (170,) * 8,
                    node0, (0,), 0, WorkerLayout(dp=2, tp=4, expert_parallel=True))  # fmt: skip
    assert snap_compare(make_app(specs=[spec]), terminal_size=(200, 50), run_before=_ready)


async def test_retune_dialog_checks_dp_against_the_gpus(tmp_path: Any) -> None:
    from pathlib import Path

    from amdtop.supervisor import Supervisor
    from amdtop.telemetry.sim import SimBackend
    from tests.tui.conftest import FROZEN, NO_PROC
    from tui.screens.retune import RetuneScreen

    sim = SimBackend(seed=7, clock=lambda: FROZEN, hostname="amdtop-demo")
    cfg = Path(tmp_path) / "w.toml"
    text = '[[worker]]\nname = "moe"\nmodel = "m"\ngpus = [0, 1, 2, 3, 4, 5, 6, 7]\nnuma_node = "none"\nport = 18480\n'
    cfg.write_text(text)
    sup = Supervisor(cfg, Path(tmp_path) / "st", gate=PASS, topology=sim.topology())
    app = open_app(sim, workers=sup, autopoll=False, clock=lambda: FROZEN, proc_root=NO_PROC,
                    discover=False, state_dir=Path(tmp_path) / "st")  # fmt: skip
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot, 2)
        await pilot.press("5", "e")
        await pilot.pause()
        assert isinstance(app.screen, RetuneScreen)
        await pilot.press(*"data-parallel-size=3", "enter")
        await settle(pilot)
        assert not isinstance(app.screen, ConfirmScreen)  # refused before any confirmation: nothing restarts
        assert app.dashboard.worker_errors["moe"].startswith(
            "retune moe: worker[moe].args.data-parallel-size: DP3xTP2 needs 6 GPUs"
        )
        assert cfg.read_text() == text


async def test_sglang_worker_is_named_with_its_engine() -> None:
    app = make_app(demo_layout="sglang")
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("5")
        table = app.dashboard.query_one("#pane-workers", WorkersTable)
        assert table.row_count == 4
        assert str(table.get_row("w-sglang-qwen")[0]) == "sglang-qwen sglang"
        assert str(table.get_row("w-llama-70b")[0]) == "llama-70b"  # vLLM, the default, is not named
        assert str(table.get_row("w-sglang-qwen")[2]) == "7"


def test_sglang_worker_beside_vllm_workers(snap_compare: Any) -> None:
    async def run_before(pilot: Any) -> None:
        await _ready(pilot)
        await pilot.press("5")
        await pilot.pause()

    assert snap_compare(make_app(demo_layout="sglang"), terminal_size=(200, 50), run_before=run_before)
