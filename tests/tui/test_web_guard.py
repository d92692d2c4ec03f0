"""`amdtop web` refuses to start, with one `amdtop: error:` line and nothing written or listening, when textual-serve
is not the version its overrides were checked against or lacks a method it overrides (the token check and the
shell-less, reduced-environment viewers live in those overrides)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from textual_serve.app_service import AppService
from textual_serve.server import Server

from tests.web.cdp import free_port
from tui import web
from tui.entry import main


def _web(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    rc = main(
        ["--state-dir", str(tmp_path / "state"), "web", "--listen", f"127.0.0.1:{free_port()}", "--allow-control"]
    )
    return rc, capsys.readouterr().err.strip().splitlines()


def test_the_installed_textual_serve_is_the_checked_one() -> None:
    assert importlib.metadata.version("textual-serve") == web.TEXTUAL_SERVE_CHECKED
    web.check_textual_serve()
    overridden = {(cls, name) for cls, name in web.OVERRIDDEN if name != "_process_messages"}  # that one is called
    for cls, name in overridden:  # each is really overridden here, else the guard guards nothing
        ours = web.WebServer if cls is Server else web.ViewerService
        assert getattr(ours, name) is not getattr(cls, name), name


def test_another_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "1.2.0" if d == "textual-serve" else real(d))
    rc, err = _web(tmp_path, capsys)
    assert rc != 0
    assert err == [
        "amdtop: error: web: textual-serve 1.2.0 is not 1.1.3, the version amdtop web was checked against; "
        "pip install textual-serve==1.1.3"
    ]
    assert not (tmp_path / "state" / web.TOKEN_FILE).exists()


@pytest.mark.parametrize(("cls", "name"), [(Server, "_make_app"), (AppService, "_open_app_process")])
def test_a_missing_override_is_refused(
    cls: type, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delattr(cls, name)  # as a textual-serve that renamed it would be
    rc, err = _web(tmp_path, capsys)
    assert rc != 0
    assert err == [
        f"amdtop: error: web: textual-serve 1.1.3 has no {cls.__name__}.{name}, which amdtop web overrides or calls; "
        "pip install textual-serve==1.1.3"
    ]
    assert not (tmp_path / "state" / web.TOKEN_FILE).exists()
