"""One frame, three views: the TUI panes, the exporter and ``snapshot --json`` show the same flags and spreads.

The frames are recorded once from the node pipeline (an imbalanced TP-4 group judged over its 5 s window, a TP-2
group pinned to the wrong socket, a lost GPU, a log-derived transport fallback) and fed unchanged to each view.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from amdtop.cli import main as cli_main
from amdtop.cli import snapshot as snapshot_cli
from amdtop.exporter.families import build_families
from amdtop.model import FlagKind, WorkerState, WorkerStatus
from amdtop.pipeline import NodeFrame, NodePipeline
from amdtop.telemetry.sim import GIB, GpuDemand, SimBackend
from tests.fixtures.rccl.make_logs import rccl_rank_lines
from tests.tui.conftest import NO_PROC, open_app, settle
from widgets.text_pane import TextPane

NODE0 = tuple(range(0, 32)) + tuple(range(64, 96))


def record_frames(tmp_path: Path) -> list[NodeFrame]:
    """Eight ticks, one simulated second apart, of a node with three problems."""
    now = [1764412345.0]
    sim = SimBackend(seed=5, clock=lambda: now[0], hostname="h")
    sim.set_demand("llama", {g: GpuDemand(0.9 if g != 2 else 0.35, 160 * GIB) for g in range(4)})
    sim.set_demand("qwen", {4: GpuDemand(0.6, 150 * GIB), 5: GpuDemand(0.62, 150 * GIB)})
    sim.lose_gpu(7)
    # RCCL init of the llama group, generated from the grammar, with its rings over SHM where XGMI links exist.
    log = tmp_path / "llama.log"
    log.write_text("".join(line + "\n" for r in range(4) for line in rccl_rank_lines(r, 4, transport="SHM/direct")))
    workers = [
        WorkerStatus("llama", WorkerState.READY, (0, 1, 2, 3), numa_node=0, cpu_affinity=NODE0, mems_allowed=(0,),
                     log=str(log), simulated=True),
        # Pinned to node 0 while its GPUs sit on node 1.
        WorkerStatus("qwen", WorkerState.READY, (4, 5), numa_node=0, cpu_affinity=NODE0, mems_allowed=(0,),
                     simulated=True),
    ]  # fmt: skip

    class Source:
        def status(self) -> list[WorkerStatus]:
            return workers

    pipeline = NodePipeline(sim, Source(), proc_root=NO_PROC, discover=False, follow_logs=True)
    frames = []
    for _ in range(8):
        frames.append(pipeline.tick())
        now[0] += 1.0
    pipeline.close()
    return frames


def tui_text(frame: NodeFrame) -> str:
    """What the TP groups and NUMA panes print for ``frame``."""

    async def draw() -> str:
        app = open_app(SimBackend(), autopoll=False, proc_root=NO_PROC, discover=False, clock=lambda: 0.0)
        async with app.run_test(size=(200, 50)) as pilot:
            app._show(frame)
            await settle(pilot)
            console = Console(width=400, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
            for pane in ("#pane-groups", "#pane-numa"):
                widget = app.dashboard.query_one(pane, TextPane)
                console.print(widget.render_view(widget.view))
            return console.export_text()

    import asyncio

    return asyncio.run(draw())


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list[NodeFrame]:
    return record_frames(tmp_path_factory.mktemp("one-frame"))


def test_the_recorded_frames_hold_every_problem(frames: list[NodeFrame]) -> None:
    last = frames[-1]
    kinds = {(f.kind, f.worker) for f in last.flags}
    assert (FlagKind.TP_IMBALANCE, "llama") in kinds
    assert (FlagKind.NUMA_MISMATCH, "qwen") in kinds
    assert (FlagKind.TRANSPORT_FALLBACK, "llama") in kinds
    assert (FlagKind.GPU_LOST, None) in kinds
    llama = last.group("llama")
    assert llama is not None and llama.samples == 6 and llama.imbalanced  # 5 s window at one tick per second


def test_tui_exporter_and_json_agree(frames: list[NodeFrame], monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    frame = frames[-1]
    # snapshot --json, with the recorded frame in place of a fresh one.
    monkeypatch.setattr(snapshot_cli, "sample_frame", lambda args: frame)
    assert cli_main.main(["snapshot", "--json", "--demo"]) == 0
    doc = json.loads(capsys.readouterr().out)
    json_flags = {(f["kind"], f.get("worker")) for f in doc["flags"]}
    json_spreads = {(g["worker"], "util_pct"): g["util_spread_pct"] for g in doc["tp_groups"]}
    json_spreads |= {(g["worker"], "vram_used_bytes"): g["vram_spread_pct"] for g in doc["tp_groups"]}

    # The exporter.
    text = "".join(
        line for fam in build_families(frame) for line in _exposition(fam)
    )
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    exp_flags = {(s.labels["kind"], s.labels["worker"] or None) for s in fams["amdtop_flag_active"].samples}
    exp_spreads = {(s.labels["worker"], s.labels["metric"]): s.value for s in fams["amdtop_tp_spread_percent"].samples}

    assert json_flags == exp_flags == {(f.kind.value, f.worker) for f in frame.flags}
    for key, value in exp_spreads.items():
        assert json_spreads[key] == pytest.approx(value, abs=0.01), key

    # The TUI: every flag's message is on screen, and each group's spreads as the JSON has them.
    shown = tui_text(frame)
    for flag in frame.flags:
        if flag.kind is not FlagKind.GPU_LOST:  # the GPU pane marks lost GPUs in their row
            assert flag.message in shown.replace("\n", ""), flag
    for group in doc["tp_groups"]:
        match = re.search(rf"{group['worker']}\s.*?spread over \S+: util (\S+) vram (\S+)", shown)
        assert match, group["worker"]
        for seen, key in zip(match.groups(), ("util_spread_pct", "vram_spread_pct"), strict=True):
            assert seen == ("-" if group[key] is None else f"{group[key]:.0f}%")


def _exposition(family: Any) -> list[str]:
    from prometheus_client.exposition import generate_latest
    from prometheus_client.registry import CollectorRegistry

    class One:
        def collect(self) -> list[Any]:
            return [family]

    registry = CollectorRegistry()
    registry.register(One())  # type: ignore[arg-type]
    return [generate_latest(registry).decode()]
