"""RampScreen with a finished ramp (deterministic data): table, knee, charts, and apply after confirmation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App
from textual.widgets import DataTable

from tui.screens.ramp import RampScreen
from widgets.ramp_chart import RampChart


def finished_doc() -> dict[str, Any]:
    steps = []
    for c, thr, ttft in ((1, 480.0, 21.0), (2, 950.0, 22.0), (4, 1800.0, 25.0), (6, 2650.0, 30.0), (8, 2700.0, 95.0),
                         (16, 2710.0, 410.0)):  # fmt: skip
        steps.append({
            "concurrency": c, "completed": int(thr / 16), "failed": 0, "duration": 2.0, "request_throughput": thr / 64,
            "output_throughput": thr, "total_token_throughput": thr * 1.5, "mean_ttft_ms": ttft, "p99_ttft_ms": ttft * 1.8,
            "mean_tpot_ms": 2.1, "p99_tpot_ms": 2.6, "p99_itl_ms": 3.0, "mean_e2el_ms": ttft + 130, "client_cpu_pct": 4.0,
            "refined": c == 6,
        })  # fmt: skip
    return {"url": "http://127.0.0.1:8000", "model": "llama-70b", "steps": steps, "aborted": None, "finished": True,
            "knee": {"concurrency": 6, "reason": "output throughput 2650.0 tok/s is within 90% of the best 2710.0 tok/s (at concurrency 16)"},
            "recommended_max_num_seqs": 6}  # fmt: skip


class Host(App[None]):
    def __init__(self, screen: RampScreen) -> None:
        super().__init__()
        self.ramp_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.ramp_screen)


def make(tmp_path: Path, applied: list[int] | None = None) -> Host:
    apply = applied.append if applied is not None else None
    screen = RampScreen("http://127.0.0.1:8000", None, worker="llama-a", state_dir=tmp_path, apply=apply,
                        result=finished_doc())  # fmt: skip
    return Host(screen)


async def test_apply_knee_after_confirmation(tmp_path: Path) -> None:
    applied: list[int] = []
    app = make(tmp_path, applied)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#ramp-steps", DataTable)
        assert table.row_count == 6
        assert table.get_row("c6")[0] == "◆"  # knee row marked
        assert all(chart._key is not None for chart in app.screen.query(RampChart))
        await pilot.press("k")
        await pilot.pause()
        await pilot.press("n")  # declined: nothing applied
        await pilot.pause()
        assert applied == []
        await pilot.press("k")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert applied == [6]


async def test_apply_disabled_without_callback(tmp_path: Path) -> None:
    app = make(tmp_path, None)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert app.screen.check_action("apply_knee", ()) is False
        assert app.screen.check_action("abort", ()) is False


def test_snapshot_finished_ramp(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(make(Path("/nonexistent-state"), []), terminal_size=(160, 50))


async def test_live_ramp_against_simulated_server(tmp_path: Path) -> None:
    from amdtop.ramp import RampConfig
    from tests.unit.simproc import simserver

    with simserver(18117, "--capacity", "2", "--tokens-per-s", "200", "--ttft-ms", "5"):
        cfg = RampConfig(url="http://127.0.0.1:18117", concurrencies=(1, 2, 4), step_seconds=0.5, warmup_seconds=0.2,
                         input_len=4, output_len=4, refine_points=0)  # fmt: skip
        screen = RampScreen(cfg.url, None, worker="sim", state_dir=tmp_path, apply=None, config=cfg)
        app = Host(screen)
        async with app.run_test(size=(160, 50)) as pilot:
            for _ in range(200):
                await pilot.pause(0.05)
                if screen.doc and screen.doc.get("finished"):
                    break
            assert screen.doc is not None and screen.doc["finished"]
            assert screen.query_one("#ramp-steps", DataTable).row_count == 3
            assert screen.check_action("abort", ()) is False  # no ramp running any more
    assert list((tmp_path / "ramp").glob("*.json"))
