"""The ramp's verdict beside its curves: why throughput stops growing, the numbers, and what to change."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

CAUSE_TITLES = {
    "kv_cache": "KV cache full",
    "admission": "admission cap (queueing, memory free)",
    "compute": "compute-bound",
    "tp_imbalance": "TP ranks imbalanced",
    "communication": "communication-bound",
    "power": "power / throttling",
    "client": "load generator is the limit",
    "unknown": "cause unknown",
}
PANE_KEYS = {"gpus": "1 GPUs", "topo": "2 Topology", "groups": "3 TP groups", "numa": "4 NUMA", "workers": "5 Workers",
             "logs": "6 Logs"}  # fmt: skip
"""Dashboard pane names with the key that opens them (``tui.screens.dashboard.PANES`` order)."""


def has_verdict(doc: dict[str, Any] | None) -> bool:
    """Whether ``doc`` (a ramp document) names a knee cause (documents from before issue 16 do not)."""
    knee = (doc or {}).get("knee") or {}
    return "cause" in knee


def recommended_changes(doc: dict[str, Any] | None) -> dict[str, str]:
    """The retune ``key -> value`` pairs of the recommendation (empty when there is nothing to apply)."""
    rec = (doc or {}).get("recommendation") or {}
    changes = rec.get("changes") or {}
    return {str(k): str(v) for k, v in changes.items()}


def verdict_text(doc: dict[str, Any], *, apply_key: str | None = None) -> Text:
    """Cause, evidence, recommendation and pane as one rich Text (``apply_key`` shown when applying is possible)."""
    knee = doc.get("knee") or {}
    cause = str(knee.get("cause", "unknown"))
    out = Text()
    out.append(f"{CAUSE_TITLES.get(cause, cause)}", style="bold")
    out.append(f"  ({cause})\n", style="dim")
    for line in knee.get("evidence") or []:
        warn = str(line).startswith("warning:")
        out.append("! " if warn else "• ", style="yellow" if warn else "cyan")
        out.append(f"{line}\n", style="yellow" if warn else "")
    rec = doc.get("recommendation") or {}
    changes = recommended_changes(doc)
    if changes:
        out.append("\nRecommend: ", style="bold")
        out.append(" ".join(f"{k}={v}" for k, v in changes.items()) + "\n", style="green")
    for line in rec.get("advice") or []:
        out.append(f"  {line}\n", style="dim")
    if rec.get("pane"):
        out.append(f"See pane {PANE_KEYS.get(rec['pane'], rec['pane'])}")
        out.append(f", flag {rec['flag']}\n" if rec.get("flag") else "\n")
    cmd = rec.get("command_line")
    if cmd:
        # A server amdtop did not start: the change is its own command line, which amdtop does not restart.
        out.append(f"\n{cmd.get('note', '')}:\n", style="bold")
        out.append(f"{cmd.get('after', '')}\n", style="green")
    elif changes and apply_key:
        out.append(f"\n[{apply_key}] apply (confirm first)", style="bold")
    return out


class RampVerdict(Static):
    """The verdict panel; hidden until the ramp document names a cause."""

    DEFAULT_CSS = """
    RampVerdict { width: 52; height: 1fr; border: round $accent; padding: 0 1; overflow-y: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.border_title = "Why the knee"

    def show_doc(self, doc: dict[str, Any] | None, *, apply_key: str | None) -> None:
        """Render ``doc``'s verdict, or hide the panel when it has none."""
        self.display = has_verdict(doc)
        if doc is not None and self.display:
            self.update(verdict_text(doc, apply_key=apply_key))
