"""The viewer's loop reads the socket without blocking: :class:`MessageBuffer` cuts whatever bytes arrive into the
same messages :func:`read_message` reads from a blocking socket."""

from __future__ import annotations

import socket

import pytest

from amdtop.serve.wire import MAX_MESSAGE, MessageBuffer, WireError, encode, read_message


def test_messages_split_anywhere_come_out_whole_and_in_order() -> None:
    messages = [{"type": "frame", "n": i, "pad": "x" * (i * 997)} for i in range(6)]
    data = b"".join(encode(m) for m in messages)
    for step in (1, 3, 4, 5, 1000, len(data)):
        buf = MessageBuffer()
        out = []
        for i in range(0, len(data), step):
            out += buf.feed(data[i : i + step])
        assert out == messages, step


def test_a_partial_message_waits_for_its_rest() -> None:
    one = encode({"type": "bye", "reason": "serve stopped"})
    buf = MessageBuffer()
    assert list(buf.feed(one[:-1])) == []
    assert list(buf.feed(one[-1:])) == [{"type": "bye", "reason": "serve stopped"}]


def test_same_messages_as_the_blocking_reader() -> None:
    a, b = socket.socketpair()
    with a, b:
        message = {"type": "poll_error", "text": "backend raised"}
        a.sendall(encode(message) * 2)
        assert read_message(b) == message
        assert list(MessageBuffer().feed(b.recv(1 << 16))) == [message]


def test_an_oversized_length_or_a_foreign_body_is_a_wire_error() -> None:
    with pytest.raises(WireError, match="over the"):
        list(MessageBuffer().feed((MAX_MESSAGE + 1).to_bytes(4, "big")))
    with pytest.raises(WireError, match="unreadable"):
        list(MessageBuffer().feed((3).to_bytes(4, "big") + b"abc"))
