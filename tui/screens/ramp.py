"""The load-ramp screen: live throughput/latency charts against concurrency, the step table, the knee, apply."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from amdtop.errors import AmdtopError
from amdtop.ramp import Ramp, RampConfig, run_blocking
from tui.screens.confirm import ConfirmScreen
from widgets.ramp_chart import RampChart
from widgets.ramp_verdict import RampVerdict, recommended_changes

COLUMNS = (
    ("concurrency", "Conc", "{:d}"), ("request_throughput", "Req/s", "{:.2f}"),
    ("output_throughput", "Out tok/s", "{:.1f}"), ("mean_ttft_ms", "TTFT ms", "{:.1f}"),
    ("p99_ttft_ms", "p99 TTFT", "{:.1f}"), ("mean_tpot_ms", "TPOT ms", "{:.2f}"), ("p99_tpot_ms", "p99 TPOT", "{:.2f}"),
    ("p99_itl_ms", "p99 ITL", "{:.2f}"), ("mean_e2el_ms", "E2EL ms", "{:.1f}"), ("completed", "OK", "{:d}"),
    ("failed", "Fail", "{:d}"), ("client_cpu_pct", "Client CPU%", "{:.0f}"),
)  # fmt: skip


def _cell(step: dict[str, Any], key: str, fmt: str) -> str:
    value = step.get(key)
    return "-" if value is None else fmt.format(value)


class RampScreen(Screen[None]):
    """Runs a ramp against ``url`` in a thread worker and shows it live; ``apply(n)`` retunes max-num-seqs."""

    DEFAULT_CSS = """
    RampScreen #ramp-status { height: auto; padding: 0 1; background: $boost; }
    RampScreen #ramp-charts { height: 2fr; }
    RampScreen #ramp-steps { height: 1fr; }
    """
    BINDINGS = [
        Binding("s", "start", "Start", id="ramp-start", tooltip="start (or restart) the ramp"),
        Binding("x", "abort", "Abort", id="ramp-abort", tooltip="stop the running ramp, keep partial results"),
        Binding("k", "apply_knee", "Apply knee", id="ramp-apply", tooltip="retune max-num-seqs to the knee"),
        Binding("f", "apply_fix", "Apply fix", id="ramp-apply-fix", tooltip="retune to the recommendation (confirm)"),
        Binding("escape,q", "close", "Back", id="ramp-close"),
    ]

    class Progress(Message):
        """A newer ramp document (latest wins)."""

        def __init__(self, doc: dict[str, Any], status: str, *, running: bool | None = None) -> None:
            super().__init__()
            self.doc = doc
            self.status = status
            self.running = running
            """From the node service: whether its ramp still runs; ``None`` for a ramp this screen runs."""

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, RampScreen.Progress)

    class Failed(Message):
        """The ramp could not start or run (one line)."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(
        self,
        url: str,
        model: str | None,
        *,
        worker: str | None,
        state_dir: Path,
        apply: Callable[[int], None] | None,
        config: RampConfig | None = None,
        result: dict[str, Any] | None = None,
        autostart: bool = True,
        apply_changes: Callable[[dict[str, str]], None] | None = None,
        observer: Any = None,
        runner: Any = None,
    ) -> None:
        super().__init__()
        self.url = url
        self.model = model
        self.worker = worker
        self.state_dir = state_dir
        self.apply = apply
        self.config = config or RampConfig(url=url, model=model)
        self.doc: dict[str, Any] | None = result
        """The latest ramp document (contract shape)."""
        self.status = "finished" if result else "idle"
        self.autostart = autostart and result is None
        self._ramp: Ramp | None = None
        self.apply_changes = apply_changes
        """Retune with several ``key -> value`` changes (the recommendation); ``None``: only max-num-seqs via apply."""
        self.observer = observer
        """``amdtop.ramp.observe.NodeObserver`` over the worker's GPUs (the frame's), passed to each ramp."""
        self.runner = runner
        """``tui.service_ramp.ServiceRamp`` in the dashboard: the node runs the ramp, which outlives this screen;
        ``None``: this screen runs it (``amdtop ramp``)."""
        self._node_running = False
        if runner is not None:
            runner.bind(self)
            current = runner.current()
            if current is not None:  # a ramp the node runs or ran: show it (its live plot or result), do not redo it
                self.doc, self.status, self._node_running = current
                self.autostart = False

    def compose(self) -> ComposeResult:
        yield Static("", id="ramp-status", markup=False)
        with Horizontal(id="ramp-charts"):
            yield RampChart("throughput", id="ramp-throughput")
            yield RampChart("latency", id="ramp-latency")
            yield RampVerdict(id="ramp-verdict")
        yield DataTable(id="ramp-steps", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#ramp-steps", DataTable)
        table.add_column("", key="mark", width=1)
        for key, label, _ in COLUMNS:
            table.add_column(label, key=key)
        self._show()
        if self.autostart:
            self.action_start()

    # --- actions -------------------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        running = self._ramp is not None or self._node_running
        if action == "abort":
            return running
        if action == "start":
            return not running
        if action == "apply_fix":
            return not running and bool(self._fix_changes())
        if action == "apply_knee":
            return (
                self.apply is not None and not running and bool(self.doc and self.doc.get("recommended_max_num_seqs"))
            )
        return True

    def action_start(self) -> None:
        if self.runner is not None:
            self._node_running = True
            self.status = "starting"
            self.doc = None
            self._show()
            self.refresh_bindings()
            self.runner.start(self.config)
            return
        try:
            self._ramp = Ramp(
                self.config, self.state_dir, on_update=self._ramp_update, worker=self.worker, observer=self.observer
            )
        except AmdtopError as exc:
            self._fail(str(exc))
            return
        self.status = "starting"
        self._show()
        self.refresh_bindings()
        self._run_ramp(self._ramp)

    def action_abort(self) -> None:
        if self.runner is not None and self._node_running:
            self.runner.abort()
            self.status = "aborting"
            self._show()
        if self._ramp is not None:
            self._ramp.abort()
            self.status = "aborting"
            self._show()

    def action_close(self) -> None:
        if self._node_running:
            self.notify("the ramp goes on: a on the worker shows it again", timeout=4)
        if self._ramp is not None:
            self._ramp.abort()
        self.dismiss(None)

    def action_apply_knee(self) -> None:
        if self.apply is None or not self.doc or not self.doc.get("recommended_max_num_seqs"):
            return
        n = int(self.doc["recommended_max_num_seqs"])
        target = self.worker or self.url
        apply = self.apply

        def answered(yes: bool | None) -> None:
            if yes:
                apply(n)
                self.notify(f"retuning {target}: max-num-seqs = {n}")

        self.app.push_screen(
            ConfirmScreen(f"Retune {target} to max-num-seqs = {n} and restart it?", yes="Apply"), answered
        )

    def _fix_changes(self) -> dict[str, str]:
        """The recommendation's changes this screen can apply (all with ``apply_changes``, else max-num-seqs only)."""
        changes = recommended_changes(self.doc)
        if ((self.doc or {}).get("recommendation") or {}).get("command_line"):
            return {}  # a server amdtop did not start: the change is shown as its command line, never applied
        if self.apply_changes is not None:
            return changes
        if self.apply is not None and set(changes) == {"max-num-seqs"}:
            return changes
        return {}

    def action_apply_fix(self) -> None:
        changes = self._fix_changes()
        if not changes:
            return
        target = self.worker or self.url
        text = " ".join(f"{k}={v}" for k, v in changes.items())
        apply_changes, apply = self.apply_changes, self.apply

        def answered(yes: bool | None) -> None:
            if not yes:
                return
            if apply_changes is not None:
                apply_changes(dict(changes))
            elif apply is not None:
                apply(int(changes["max-num-seqs"]))
            self.notify(f"retuning {target}: {text}")

        self.app.push_screen(ConfirmScreen(f"Retune {target} to {text} and restart it?", yes="Apply"), answered)

    # --- the worker thread -------------------------------------------------------------------------------------------
    def _ramp_update(self, result: Any) -> None:
        # Called on the worker thread: hand a copy to the UI through a message, never shared state.
        ramp = self._ramp
        self.post_message(self.Progress(result.to_json(), ramp.status if ramp else "running"))

    @work(thread=True, exclusive=True, exit_on_error=False, group="ramp", description="load ramp")
    def _run_ramp(self, ramp: Ramp) -> None:
        try:
            run_blocking(ramp)
        except AmdtopError as exc:
            self.post_message(self.Failed(str(exc)))
            return
        except Exception as exc:  # a crash of the generator must not take the app down
            self.post_message(self.Failed(f"ramp crashed: {type(exc).__name__}: {exc}"))
            return
        self.post_message(self.Progress(ramp.result.to_json(), ramp.status))

    def on_ramp_screen_progress(self, message: Progress) -> None:
        self.doc = message.doc
        self.status = message.status
        if message.running is not None:
            self._node_running = message.running
            self.refresh_bindings()
        if message.doc.get("finished") or message.doc.get("aborted"):
            self._ramp = None
            self.refresh_bindings()
        self._show()

    def on_ramp_screen_failed(self, message: Failed) -> None:
        self._fail(message.text)

    def _fail(self, text: str) -> None:
        self._ramp = None
        self._node_running = False
        self.status = f"error: {text}"
        self.refresh_bindings()
        self._show()
        self.notify(text, severity="error")

    # --- rendering ---------------------------------------------------------------------------------------------------
    def _show(self) -> None:
        doc = self.doc or {}
        steps: list[dict[str, Any]] = list(doc.get("steps") or [])
        knee = doc.get("knee") or None
        knee_c = knee["concurrency"] if knee else None
        head = f"Ramp {self.worker or ''} {self.url}  model {doc.get('model') or self.model or '?'}  [{self.status}]"
        if doc.get("aborted"):
            head += f"  stopped early: {doc['aborted']}"
        if knee:
            head += f"\nknee: concurrency {knee_c} -> recommended max-num-seqs {doc.get('recommended_max_num_seqs')}"
            head += f"  ({knee['reason']})"
        self.query_one("#ramp-status", Static).update(head)
        for chart in self.query(RampChart):
            chart.set_steps(steps, knee_c)
        self.query_one(RampVerdict).show_doc(self.doc, apply_key="f" if self._fix_changes() else None)
        table = self.query_one("#ramp-steps", DataTable)
        with self.app.batch_update():
            table.clear()
            for s in sorted(steps, key=lambda s: s["concurrency"]):
                mark = "◆" if s["concurrency"] == knee_c else ("·" if s.get("refined") else "")
                table.add_row(mark, *(_cell(s, k, f) for k, _, f in COLUMNS), key=f"c{s['concurrency']}")
