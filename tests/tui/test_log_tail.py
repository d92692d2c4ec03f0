"""The log tail pane on its own: filter keys, pause/follow, dropped note, SVG snapshots with a fallback and an error."""

from __future__ import annotations

from typing import Any

from textual.app import App, ComposeResult
from textual.widgets import Input, Log, Static

from amdtop.logread.rccl import LogLine, make_line
from amdtop.logread.rccl.diagnose import diagnose
from amdtop.logread.rccl.parser import LogParser
from amdtop.telemetry.sim import SimBackend
from tests.fixtures.rccl.make_logs import rccl_rank_lines
from widgets.log_tail import LogTailPane


def _lines(worker: str, nranks: int = 2, **kw: Any) -> list[LogLine]:
    out = []
    for r in range(nranks):
        out += [make_line(worker, f"rank{r}.log", t) for t in rccl_rank_lines(r, nranks, nchannels=2, **kw) if t]
    return out


def _summary_and_flags(lines: list[LogLine], worker: str) -> tuple[str, list[Any]]:
    p = LogParser()
    for n, line in enumerate(lines, 1):
        p.feed(line.text, line.file, n)
    rep = p.report()
    flags = diagnose(rep, SimBackend().topology(), worker)
    return "\n".join(f"{worker}: {rep.library} {rep.version} comm {c.id}: {c.summary}" for c in rep.comms), flags


class PaneApp(App[None]):
    """Hosts one pane, fed before the first frame."""

    def __init__(self, lines: list[LogLine], summary: str = "", flags: list[Any] | None = None) -> None:
        super().__init__()
        self._lines, self._summary, self._flags = lines, summary, flags or []

    def compose(self) -> ComposeResult:
        yield LogTailPane(id="logs", max_lines=500)

    def on_mount(self) -> None:
        pane = self.query_one(LogTailPane)
        pane.feed(self._lines)
        if self._summary:
            pane.set_summary(self._summary)
        pane.set_flags(self._flags)
        pane.focus()


def _shown(app: App[None]) -> list[str]:
    return list(app.query_one(Log).lines)


async def test_filter_keys_pause_and_search() -> None:
    lines = _lines("llama-a", errors=True) + _lines("qwen-b", transport="SHM/direct")
    app = PaneApp(lines)
    async with app.run_test(size=(140, 40)) as pilot:
        pane = app.query_one(LogTailPane)
        assert len(_shown(app)) == len(lines)
        await pilot.press("e")
        shown = _shown(app)
        assert shown and all(("WARN" in t or "-> 3" in t or "Error" in t or "Watchdog" in t) for t in shown)
        await pilot.press("e", "t")
        assert _shown(app) and all(" via " in t or "Connected all" in t for t in _shown(app))
        await pilot.press("w")  # first worker only
        assert pane.worker == "llama-a" and all(t.startswith("llama-a|") for t in _shown(app))
        await pilot.press("c", "slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"shm/direct", "enter")
        assert pane.search == "shm/direct" and app.focused is pane
        assert _shown(app) and all("SHM/direct" in t for t in _shown(app))
        await pilot.press("c", "p")
        before = len(_shown(app))
        pane.feed([make_line("llama-a", "x", "n1:1:1 [0] NCCL INFO late line")])
        await pilot.pause()
        assert len(_shown(app)) == before
        assert "PAUSED (1 new)" in str(app.query_one("#logs-status", Static).render())
        await pilot.press("p")
        assert _shown(app)[-1].endswith("late line")


async def test_dropped_note_is_visible() -> None:
    app = PaneApp([])
    async with app.run_test(size=(100, 20)) as pilot:
        pane = app.query_one(LogTailPane)
        pane.feed([make_line("w", "f", "n1:1:1 [0] NCCL INFO kept")], dropped=12345)
        await pilot.pause()
        assert "12345 lines dropped" in _shown(app)[-1]
        assert "12345 lines dropped" in str(app.query_one("#logs-status", Static).render())


def test_snapshot_transport_fallback(snap_compare: Any) -> None:
    lines = _lines("llama-a", nranks=4, transport="SHM/direct")
    summary, flags = _summary_and_flags(lines, "llama-a")
    assert [f.kind.value for f in flags] == ["transport_fallback"]
    assert snap_compare(PaneApp(lines[-30:], summary, flags), terminal_size=(140, 30))


def test_snapshot_error(snap_compare: Any) -> None:
    lines = _lines("llama-a", nranks=2, errors=True)
    summary, flags = _summary_and_flags(lines, "llama-a")
    assert {f.kind.value for f in flags} == {"nccl_error", "nccl_timeout"}
    assert snap_compare(PaneApp(lines[-24:], summary, flags[:3]), terminal_size=(140, 30))


async def test_show_update_from_a_monitor(tmp_path: Any) -> None:
    from amdtop.logread.rccl.monitor import LogMonitor

    log = tmp_path / "llama-a.log"
    log.write_text("\n".join(rccl_rank_lines(0, 2, transport="SHM/direct", errors=True)) + "\n")
    monitor = LogMonitor([("llama-a", log)], SimBackend().topology())
    app = PaneApp([])
    async with app.run_test(size=(140, 30)) as pilot:
        pane = app.query_one(LogTailPane)
        pane.show_update(monitor.poll())
        await pilot.pause()
        summary = str(app.query_one("#logs-summary", Static).render())
        assert "llama-a · RCCL 2.22.3 · 0x551d06754c6bacf2: 2 ranks, all pairs SHM/direct" in summary
        assert "! nccl_timeout [llama-a · GPUs 0,1]:" in summary and "! nccl_error [llama-a · GPUs 0]:" in summary
        assert "SHM/direct FALLBACK: the GPUs share a XGMI link: 0→1 GPU 0→1" in summary
        assert _shown(app)[-1].startswith("[rank0]") and "Watchdog caught" in _shown(app)[-1]
        pane.show_worker("other")
        await pilot.pause()
        assert _shown(app) == []
        pane.show_worker(None)
        await pilot.pause()
        assert len(_shown(app)) == len([t for t in rccl_rank_lines(0, 2, errors=True) if t])


def test_snapshot_demo_workers_live_pane(snap_compare: Any, tmp_path: Any) -> None:
    """What the demo's Logs pane shows from its simulated TP workers: llama on GPUs 0-3 over P2P/IPC, qwen on GPUs
    4,5 with NCCL_P2P_DISABLE=1 (SHM/direct where the topology says XGMI: the fallback flag on that TP group)."""
    from amdtop.logread.rccl.monitor import LogMonitor
    from amdtop.simserver.logs import rccl_init_lines
    from amdtop.telemetry.sim import MI300X_BDFS

    llama, qwen = tmp_path / "llama-70b.log", tmp_path / "qwen-32b.log"
    llama.write_text("\n".join(rccl_init_lines(4, 4100, bdfs=MI300X_BDFS[:4], host="demo")) + "\n")
    qwen.write_text("\n".join(rccl_init_lines(2, 4200, bdfs=MI300X_BDFS[4:6], p2p=False, host="demo")) + "\n")
    update = LogMonitor([("llama-70b", llama), ("qwen-32b", qwen)], SimBackend().topology()).poll()
    assert [(f.kind.value, f.worker, f.gpus) for f in update.flags] == [("transport_fallback", "qwen-32b", (4, 5))]

    class UpdateApp(App[None]):
        def compose(self) -> ComposeResult:
            yield LogTailPane(id="logs", max_lines=500)

        def on_mount(self) -> None:
            self.query_one(LogTailPane).show_update(update)

    assert snap_compare(UpdateApp(), terminal_size=(150, 34))


async def test_a_flood_batch_shows_its_newest_lines_built_or_not() -> None:
    from amdtop.logread.rccl.lines import LineRun, LogLines

    texts = tuple(f"n1:1:1 [0] NCCL INFO x{i}" if i % 7 else f"n1:1:1 [0] a.cc:1 NCCL WARN w{i}" for i in range(9000))
    runs = LogLines([LineRun("wa", "a.log", texts[:5000]), LineRun("wb", "b.log", texts[5000:])])
    shown: dict[str, tuple[list[str], list[LogLine]]] = {}
    for kind, batch in (("runs", runs), ("tuple", tuple(runs))):
        app = PaneApp([])
        async with app.run_test(size=(100, 20)) as pilot:
            pane = app.query_one(LogTailPane)
            pane.action_filter("problems")
            pane.feed(batch, dropped=3)
            await pilot.pause()
            shown[kind] = (_shown(app), list(pane._buffer))
    lines, buffer = shown["runs"]
    assert (lines, buffer) == shown["tuple"]
    # 500 lines on screen: the dropped note and the newest 499 WARNs; the buffer keeps the newest 2000 lines
    assert len(lines) == 500 and lines[-1].startswith("… 3 lines dropped") and lines[-2].endswith("w8995")
    assert all("NCCL WARN" in x for x in lines[:-1])
    assert len(buffer) == 2000 and buffer[-1].text == texts[-1] and buffer[0].text == texts[-2000]
