"""The protocol declared once: the fingerprint, the unpickler's allow-list and the argument checks are all read off
``NodeService`` and the ``NodeFrame`` type tree, and the serve survives hostile calls (issue 52, bugs 10, 13, 14)."""

from __future__ import annotations

import os
import pickle
import resource
import socket
import struct
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from amdtop import runtime
from amdtop.gpuprocs.rows import ProcessRow
from amdtop.logread.rccl.lines import LogLines
from amdtop.model import WorkerStatus
from amdtop.pipeline import frame as frame_module
from amdtop.pipeline.series import Series
from amdtop.runtime import NodeSpec
from amdtop.serve.server import Serve
from amdtop.serve.wire import ALLOWED, WIRE_PROTOCOL, WIRE_VERSION, WireError, decode, read_message, send_message
from amdtop.service import api
from amdtop.service.protocol import check_call, fingerprint, travelling_types
from amdtop.supervisor.stopper import StopReport


# -- the fingerprint covers every type that travels ----------------------------------------------------------------
def test_the_version_is_the_protocols_fingerprint() -> None:
    assert f"{WIRE_PROTOCOL}-{fingerprint()}" == WIRE_VERSION


def _named_tuple_copy(extra: bool) -> type:
    fields = [(name, ProcessRow.__annotations__[name]) for name in ProcessRow._fields]
    if extra:
        fields.append(("added", int))
    copy = NamedTuple("ProcessRow", fields)  # type: ignore[misc]
    copy.__module__, copy.__qualname__ = ProcessRow.__module__, ProcessRow.__qualname__
    return copy


def test_a_field_added_to_a_copy_of_processrow_changes_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # A named tuple in every frame: the old fingerprint walked dataclasses and enums only and missed it.
    real = fingerprint()
    monkeypatch.setattr(frame_module, "ProcessRow", _named_tuple_copy(extra=False))
    assert fingerprint() == real  # a faithful copy is the type itself, as the wire sees it
    monkeypatch.setattr(frame_module, "ProcessRow", _named_tuple_copy(extra=True))
    assert fingerprint() != real


def _series_copy(extra_slot: bool) -> type:
    slots = ("_points", "_start", "_stop", "last", *(("added",) if extra_slot else ()))

    class Copy(Sequence[float | None]):
        __slots__ = slots

        def __init__(self, points: Sequence[float | None] = ()) -> None:
            self._points = list(points)

        def __len__(self) -> int:
            return len(self._points)

        def __getitem__(self, i: Any) -> Any:
            return self._points[i]

    Copy.__module__, Copy.__qualname__, Copy.__name__ = Series.__module__, "Series", "Series"
    return Copy


def test_a_field_added_to_a_copy_of_a_plain_class_changes_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frame_module, "Series", _series_copy(extra_slot=False))
    same = fingerprint()
    monkeypatch.setattr(frame_module, "Series", _series_copy(extra_slot=True))
    assert fingerprint() != same


def test_a_field_added_to_a_reply_type_changes_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # StopReport travels as stop's reply only (never in a frame): the op's declared return type carries it.
    import dataclasses

    fields = [(f.name, f.type, f) for f in dataclasses.fields(StopReport)]
    grown = dataclasses.make_dataclass("StopReport", [*fields, ("added", "int", dataclasses.field(default=0))])
    grown.__module__ = StopReport.__module__
    before = fingerprint()
    monkeypatch.setattr(api, "StopReport", grown)
    assert fingerprint() != before


# -- the allow-list is exactly the protocol's types ----------------------------------------------------------------
def test_the_allow_list_equals_the_types_the_protocol_declares() -> None:
    declared = travelling_types()
    assert set(ALLOWED.values()) == declared
    assert {ProcessRow, Series, LogLines, StopReport, WorkerStatus} <= declared
    assert ("builtins", "bytearray") not in ALLOWED
    from amdtop.audit.gate import LaunchGate  # an amdtop dataclass that never travels: the old list took it

    assert LaunchGate not in declared
    with pytest.raises(WireError, match=r"amdtop\.audit\.gate\.LaunchGate"):
        decode(b"\x80\x04\x8c\x11amdtop.audit.gate\x94\x8c\nLaunchGate\x94\x93\x94.")


def _global(module: str, name: str) -> bytes:
    """A protocol-0 GLOBAL naming ``module.name`` (what a hostile peer writes by hand)."""
    return b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n."


def test_bug10_a_message_naming_amdtop_main_imports_nothing() -> None:
    for module in ("amdtop.__main__", "amdtop.simserver.__main__", "amdtop.cli.main"):
        was = module in sys.modules
        with pytest.raises(WireError, match="which the wire does not carry"):
            decode(_global(module, "X"))
        assert (module in sys.modules) == was, f"decoding imported {module}"


def test_bug13_bytearray_is_refused_by_name_and_by_opcode() -> None:
    with pytest.raises(WireError, match=r"builtin_*\.bytearray"):
        decode(pickle.dumps({"b": bytearray(b"x")}, protocol=2))
    # 60 bytes or so that declare a 4 GiB bytearray: refused before anything is allocated.
    body = b"\x80\x05\x96" + struct.pack("<Q", 4 << 30) + b"x" * 40 + b"."
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(WireError, match=r"(?i)bytearray8"):
        decode(body, untrusted=True)
    with pytest.raises(WireError, match="BYTEARRAY8"):  # one of an honest size too: the opcode is not carried
        decode(pickle.dumps({"b": bytearray(b"x")}, protocol=5), untrusted=True)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024  # KiB: nowhere near 4 GiB


# -- the argument checks are the ops' declared parameters ------------------------------------------------------------
def test_every_op_is_checked_by_its_declared_parameters() -> None:
    from amdtop.errors import InputError

    assert check_call("retune", ("w", {"max-num-seqs": "8"}), {"grace": 3, "force": True}) == (
        ("w", {"max-num-seqs": "8"}),
        {"grace": 3.0, "force": True},
    )
    assert check_call("ramp_start", ("w", "http://h:1", [0, 1], {"c": 1.0}), {}) == (
        ("w", "http://h:1", (0, 1), {"c": 1.0}),
        {},
    )
    for op, args, kwargs in (
        ("launch", (), {}),  # missing
        ("launch", ("w",), {"nope": 1}),  # unknown
        ("retune", ("w", {"k": 1}), {}),  # a value that is not text
        ("signal_process", ("12",), {}),  # a pid that is not an integer
        ("sleep", ("w",), {"level": float("nan")}),
        ("ramp_start", ("w", "http://h:1", ["0"], {}), {}),
        ("stop", ("w",), {"grace": 1e12}),
        ("status", ("x",), {}),  # takes none
    ):
        with pytest.raises(InputError):
            check_call(op, args, kwargs)


# -- against a real serve --------------------------------------------------------------------------------------------
@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    state = tmp_path / "state"
    service = runtime.open(NodeSpec(config=tmp_path / "none.toml", state_dir=state, demo=True, interval=0.5), ui=True)
    srv = Serve(service, state).start()
    try:
        yield srv
    finally:
        srv.close()
        service.shutdown()


def _viewer(serve: Serve) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20)
    sock.connect(str(serve.path))
    assert read_message(sock)["type"] == "hello"
    send_message(sock, {"type": "hello", "version": WIRE_VERSION, "pid": os.getpid(), "readonly": False})
    return sock


def _reply(sock: socket.socket, call_id: int) -> dict[str, Any]:
    while True:
        msg = read_message(sock)
        if msg.get("type") == "reply" and msg.get("id") == call_id:
            return msg


def _text(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _nested_call(depth: int) -> bytes:
    """``{"type": "call", "id": 1, "op": [[[...]]] (depth deep), "args": (), "kwargs": {}}`` written opcode by opcode
    (pickling such a list here would recurse as deep)."""
    nested = b"]" * depth + b"a" * (depth - 1)
    items = _text("type") + _text("call") + _text("id") + b"K\x01" + _text("op") + nested
    items += _text("args") + b")" + _text("kwargs") + b"}"
    return b"\x80\x04}(" + items + b"u."


def test_bug14_a_deeply_nested_op_is_one_error_line(serve: Serve, capfd: pytest.CaptureFixture[str]) -> None:
    sock = _viewer(serve)
    try:
        body = _nested_call(200_000)
        sock.sendall(struct.pack(">I", len(body)) + body)
        reply = _reply(sock, 1)
        assert reply["ok"] is False and reply["input"] is True
        assert len(str(reply["error"]).splitlines()) == 1 and str(reply["error"]).startswith("call: op [[")
        send_message(sock, {"type": "call", "id": 2, "op": "stats", "args": (), "kwargs": {}})
        assert _reply(sock, 2)["ok"] is True  # the connection and the serve go on
    finally:
        sock.close()
    time.sleep(0.2)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err, err


def test_bug10_and_13_over_the_socket(serve: Serve) -> None:
    was = "amdtop.__main__" in sys.modules
    for body in (_global("amdtop.__main__", "X"), b"\x80\x05\x96" + struct.pack("<Q", 4 << 30) + b"x" * 40 + b"."):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        sock = _viewer(serve)
        try:
            sock.sendall(struct.pack(">I", len(body)) + body)
            with pytest.raises((WireError, OSError)):  # the serve closed this viewer: nothing else happened
                while True:
                    read_message(sock)
        finally:
            sock.close()
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100 * 1024
    assert ("amdtop.__main__" in sys.modules) == was  # the serve (this process) imported nothing
    sock = _viewer(serve)  # and it still serves
    try:
        send_message(sock, {"type": "call", "id": 3, "op": "stats", "args": (), "kwargs": {}})
        assert _reply(sock, 3)["ok"] is True
    finally:
        sock.close()
