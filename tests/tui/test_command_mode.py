"""``:`` command mode and the ``/`` filter: parser, completion, and the keys through Pilot."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tui.conftest import imbalanced_specs, make_app, settle
from tui.command_mode import Command, CommandError, candidates, complete, parse_command
from tui.screens.confirm import ConfirmScreen
from tui.screens.help import HelpScreen
from tui.screens.ramp import RampScreen
from tui.viewmodel.filter import filter_rows
from widgets.gpu_table import GpuTable
from widgets.workers_table import WorkersTable

WORKERS = ["llama-70b", "qwen-32b"]


def test_parse_commands() -> None:
    assert parse_command("launch llama-70b", WORKERS) == Command("launch", "llama-70b")
    assert parse_command(":ra qw", WORKERS) == Command("ramp", "qwen-32b")  # unique prefixes
    assert parse_command("retune llama-70b max-num-seqs=64 --block-size=32", WORKERS) == Command(
        "retune", "llama-70b", {"max-num-seqs": "64", "block-size": "32"}
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty command; use one of: launch, ramp, retune, restart, stop"),
        ("frobnicate x", "no command 'frobnicate'; use one of: launch, ramp, retune, restart, stop"),
        ("re llama-70b", "command 're' is ambiguous: retune, restart"),
        ("launch", ":launch needs a worker: llama-70b, qwen-32b"),
        ("launch mistral", "no worker 'mistral'; use one of: llama-70b, qwen-32b"),
        ("launch llama-70b now", ":launch takes one worker; unexpected 'now'"),
        ("retune llama-70b max-num-seqs", ":retune llama-70b: 'max-num-seqs' is not KEY=VALUE"),
    ],
)
def test_parse_errors_are_one_line(text: str, error: str) -> None:
    with pytest.raises(CommandError) as exc:
        parse_command(text, WORKERS)
    assert str(exc.value) == error


def test_completion() -> None:
    assert candidates("", WORKERS) == ["launch", "ramp", "retune", "restart", "stop"]
    assert complete("la", WORKERS) == "launch "
    assert complete("re", WORKERS) == "re"  # retune and restart share only "re"
    assert complete("ret", WORKERS) == "retune "
    assert complete("launch q", WORKERS) == "launch qwen-32b "
    assert complete("launch ", WORKERS) == "launch "  # two workers, no common prefix beyond ""
    assert complete("retune qwen-32b max", WORKERS) == "retune qwen-32b max-"  # max-num-seqs, max-model-len
    assert complete("retune qwen-32b max-n", WORKERS) == "retune qwen-32b max-num-"  # -seqs, -batched-tokens
    assert complete("retune qwen-32b max-num-s", WORKERS) == "retune qwen-32b max-num-seqs="
    assert candidates("retune qwen-32b max-num-seqs=8 ", WORKERS)[0] == "retune qwen-32b max-num-seqs=8 gpu-memory-utilization="


def test_filter_rows_by_gpu_worker_and_flag() -> None:
    gpus = {f"gpu-{i}": (f"{i} n{i // 4}", "50%", f"{'llama-70b' if i < 4 else 'qwen-32b'}/r{i % 4}", "IMB" if i == 2 else "") for i in range(8)}
    assert list(filter_rows(gpus, "gpu3")) == ["gpu-3"]
    assert list(filter_rows(gpus, "3")) == ["gpu-3"]
    assert list(filter_rows(gpus, "llama")) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert list(filter_rows(gpus, "imb")) == ["gpu-2"]
    assert filter_rows(gpus, "  ") == gpus
    workers = {"w-llama-70b": ("llama-70b", "ready", "0,1,2,3"), "w-qwen-32b": ("qwen-32b", "ready", "4,5,6,7")}
    assert list(filter_rows(workers, "gpu5")) == ["w-qwen-32b"]  # the worker using GPU 5
    assert list(filter_rows(workers, "imbalance", {"w-llama-70b": "tp_imbalance"})) == ["w-llama-70b"]


async def _ready(pilot: Any) -> None:
    await pilot.pause()
    pilot.app.step(3)
    await settle(pilot)


async def type_text(pilot: Any, text: str) -> None:
    await pilot.press(*[{" ": "space", "=": "equals_sign", "-": "minus", ".": "full_stop"}.get(c, c) for c in text])


async def test_colon_launch_with_tab_completion() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        app.control.stop("qwen-32b")
        await pilot.press("colon")
        await type_text(pilot, "la")
        await pilot.press("tab")
        await type_text(pilot, "q")
        await pilot.press("tab")
        assert app.dashboard.query_one("#command-input").value == "launch qwen-32b "
        await pilot.press("enter")
        await settle(pilot)
        assert app.control.calls[-1] == ("launch", "qwen-32b")
        assert not app.dashboard.query_one("#command").has_class("open")
        assert app.focused is not None and app.focused.id == "pane-gpus"  # focus back on a pane


async def test_colon_retune_goes_to_the_diff_and_its_confirmation() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("colon")
        await type_text(pilot, "retune llama-70b max-num-seqs=64")
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and "max-num-seqs" in app.screen.text
        await pilot.press("y")
        await settle(pilot)
        assert app.control.calls[-1] == ("retune", "llama-70b", "max-num-seqs=64")


async def test_colon_ramp_and_errors() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("colon")
        await type_text(pilot, "ramp nobody")
        await pilot.press("enter")
        await settle(pilot)
        assert [n.message for n in app._notifications][-1] == "no worker 'nobody'; use one of: llama-70b, qwen-32b, mistral-7b"
        assert app.dashboard.query_one("#command").has_class("open")  # still open to fix the line
        box = app.dashboard.query_one("#command-input")
        box.value = "ramp qwen-32b"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, RampScreen)


async def test_colon_refused_read_only() -> None:
    app = make_app(readonly=True)
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("colon")
        await type_text(pilot, "launch llama-70b")
        await pilot.press("enter")
        await settle(pilot)
        assert "not available here" in [n.message for n in app._notifications][-1]


async def test_slash_filters_gpus_and_workers_live() -> None:
    app = make_app(specs=imbalanced_specs())
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        gpus = app.dashboard.query_one("#pane-gpus", GpuTable)
        workers = app.dashboard.query_one("#pane-workers", WorkersTable)
        await pilot.press("slash")
        await type_text(pilot, "qwen")
        await settle(pilot)
        assert gpus.row_count == 4 and workers.row_count == 1  # as you type
        await pilot.press("enter")
        app.step(2)  # new frames keep the filter
        await settle(pilot)
        assert gpus.row_count == 4 and gpus.border_subtitle == "/qwen"
        assert app.focused is gpus
        await pilot.press("slash")
        app.dashboard.query_one("#filter").value = "imb"
        await settle(pilot)
        assert [str(gpus.get_row(k)[0]) for k in gpus._rows] == ["0 n0", "1 n0", "2 n0", "3 n0"]  # flagged IMB
        await pilot.press("escape")
        await settle(pilot)
        assert gpus.row_count == 8 and workers.row_count == 2 and not gpus.border_subtitle


async def test_help_and_palette_list_colon_and_slash() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await _ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = {k for k, _, _ in app.screen.keys}
        assert {"colon", "slash"} <= keys or {":", "/"} <= keys
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Command" in titles and "Filter" in titles
