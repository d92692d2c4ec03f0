"""The ramp screen's verdict beside the curves, and the one-key apply of the recommendation (confirmed first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.tui.test_ramp_screen import Host, finished_doc
from tui.screens.ramp import RampScreen
from widgets.ramp_verdict import RampVerdict


def kv_doc() -> dict[str, Any]:
    doc = finished_doc()
    doc["knee"].update(
        cause="kv_cache",
        evidence=[
            "throughput 2650 tok/s at concurrency 6; 2700 tok/s at 8",
            "37 preemptions at concurrency 8 (KV cache ran out of blocks)",
            "KV cache 100% full at concurrency 8",
            "KV cache holds 2048 tokens = 6 sequences of 288 tokens; concurrency 8 asks for 8",
            "at concurrency 8: up to 2 waiting, mean queue time 61.0 ms",
        ],
    )
    doc["recommendation"] = {
        "cause": "kv_cache",
        "changes": {"max-num-seqs": "6", "gpu-memory-utilization": "0.92"},
        "advice": ["max-num-seqs=6: no more sequences than the KV cache holds, so none are preempted",
                   "gpu-memory-utilization 0.9 -> 0.92: more memory for KV blocks",
                   "or lower max-model-len (fewer reserved tokens per sequence), or block-size 16 (less waste)"],
        "pane": "workers", "flag": "gpu-memory-utilization",
    }  # fmt: skip
    return doc


def make(doc: dict[str, Any], *, applied: list[int] | None = None, changed: list[dict[str, str]] | None = None) -> Host:
    screen = RampScreen(
        "http://127.0.0.1:8000", None, worker="llama-a", state_dir=Path("/nonexistent-state"),
        apply=applied.append if applied is not None else None, result=doc,
        apply_changes=changed.append if changed is not None else None,
    )  # fmt: skip
    return Host(screen)


async def test_apply_fix_sends_every_change_after_confirmation() -> None:
    changed: list[dict[str, str]] = []
    app = make(kv_doc(), applied=[], changed=changed)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        verdict = app.screen.query_one(RampVerdict)
        assert verdict.display and "KV cache full" in str(verdict.render())
        await pilot.press("f")
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert changed == []
        await pilot.press("f")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert changed == [{"max-num-seqs": "6", "gpu-memory-utilization": "0.92"}]


async def test_apply_fix_without_multi_key_retune() -> None:
    # Only the max-num-seqs callback: a kv_cache fix needs more keys, so the key is off; a compute fix goes through.
    applied: list[int] = []
    app = make(kv_doc(), applied=applied)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert app.screen.check_action("apply_fix", ()) is False
    doc = kv_doc()
    doc["knee"]["cause"] = "compute"
    doc["recommendation"] = {"cause": "compute", "changes": {"max-num-seqs": "6"}, "advice": [], "pane": None,
                             "flag": None}  # fmt: skip
    app = make(doc, applied=applied)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
    assert applied == [6]


async def test_old_document_hides_the_verdict() -> None:
    app = make(finished_doc(), applied=[])
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        assert not app.screen.query_one(RampVerdict).display
        assert app.screen.check_action("apply_fix", ()) is False


def test_snapshot_ramp_verdict(snap_compare: Any) -> None:
    assert snap_compare(make(kv_doc(), applied=[], changed=[]), terminal_size=(160, 50))
