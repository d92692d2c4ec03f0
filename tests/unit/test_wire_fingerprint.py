"""The wire's version is the frame's field tree, fingerprinted: a changed field changes it, and a viewer and a serve
of different fingerprints refuse with one line that names both and the fix."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
from pathlib import Path

import pytest

from amdtop import runtime
from amdtop.runtime import NodeSpec
from amdtop.serve import server as server_module
from amdtop.serve.server import Serve
from amdtop.serve.wire import WIRE_PROTOCOL, WIRE_VERSION
from amdtop.service.protocol import fingerprint as field_fingerprint


class Mode(enum.Enum):
    A = "a"


def _tree(leaf_fields: dict[str, type], root_fields: dict[str, object] | None = None) -> type:
    leaf = dataclasses.make_dataclass("Leaf", list(leaf_fields.items()), frozen=True)
    leaf.__module__ = __name__
    fields = {"leaves": tuple[leaf, ...], "name": str | None, **(root_fields or {})}  # type: ignore[valid-type]
    root = dataclasses.make_dataclass("Root", list(fields.items()), frozen=True)
    root.__module__ = __name__
    return root


def test_the_version_is_computed_from_the_frame() -> None:
    assert f"{WIRE_PROTOCOL}-{field_fingerprint()}" == WIRE_VERSION
    assert field_fingerprint() == field_fingerprint()  # stable within a build


def test_a_nested_field_change_changes_the_fingerprint() -> None:
    base = field_fingerprint(_tree({"value": float, "mode": Mode}))
    assert base == field_fingerprint(_tree({"value": float, "mode": Mode}))
    assert base != field_fingerprint(_tree({"value": int, "mode": Mode}))  # a type, two levels down
    assert base != field_fingerprint(_tree({"value": float, "mode": Mode, "extra": str}))  # an added field
    assert base != field_fingerprint(_tree({"amount": float, "mode": Mode}))  # a renamed field
    assert base != field_fingerprint(_tree({"value": float, "mode": Mode}), ops=("launch",))  # the op names


def test_an_enum_member_changes_the_fingerprint() -> None:
    class Mode2(enum.Enum):
        A = "a"
        B = "b"

    assert field_fingerprint(_tree({"value": float, "mode": Mode})) != field_fingerprint(
        _tree({"value": float, "mode": Mode2})
    )


def test_a_viewer_and_an_older_serve_refuse_with_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = f"{WIRE_PROTOCOL}-000000000000"
    monkeypatch.setattr(server_module, "WIRE_VERSION", old)  # the serve that ran before `pip install -U amdtop`
    state = tmp_path / "state"
    node = runtime.open(NodeSpec(config=tmp_path / "none.toml", state_dir=state, demo=True), ui=True)
    serve = Serve(node, state).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tui", "--state-dir", str(state), "--config", str(tmp_path / "none.toml")],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    finally:
        serve.close()
        node.shutdown()
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines == [f"amdtop: error: serve is {old}, viewer {WIRE_VERSION}: restart serve"]
    assert serve.refused == 0  # the viewer refused first: it read the serve's hello
