"""The node service in-process and over the serve's socket: every operation through both, against the same simulated
node and the same simulated vLLM workers (real processes on free ports), with the same results, the same refusals
(a real launch-gate refusal: a process listening on the worker's port; read-only; a wrong name) and the same
one-line errors; no secret of a profile crosses the wire."""

from __future__ import annotations

import inspect
import logging
import pickle
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from amdtop import runtime
from amdtop.audit.gate import GateRefused
from amdtop.errors import AmdtopError
from amdtop.model import WorkerState
from amdtop.pipeline.frame import NodeFrame
from amdtop.runtime import LocalService, NodeSpec
from amdtop.runtime.node import Node
from amdtop.serve import client as client_module
from amdtop.serve.client import RemoteService, ServeClient
from amdtop.serve.server import SERVE_OPS, Serve
from amdtop.service import CONTROL_OPS, WIRE_OPS, NodeService
from amdtop.service.api import READ_ONLY
from tests.fixtures.demo_node import port_holder, write_demo_profiles

SECRET_KEY = "sk-parity-0123456789abcdef"
SECRET_TOKEN = "hf_parityTOKEN0123456789"
LOCAL_ONLY = {"subscribe", "latest", "deliver_in", "on_ramp", "close", "api_key"}
"""The stream and the lifetime (frames and ramp updates come to a subscriber without a request, on the thread the
view names), and the API key, which is never a request: nothing else is local-only."""
W = "mistral-7b"
BY_NAME: dict[str, Any] = {"url": "http://127.0.0.1:1", "fix_id": "no-such-fix", "pid": 999_999_999}
"""A value for the parameters whose name says more than their type (a URL, a finding's id, a pid that is no one's)."""
BY_TYPE: dict[str, Any] = {"str": W, "Mapping[str, str]": {"max-num-seqs": "8"}, "dict[str, Any]": {}, "tuple[int, ...]": (0,)}


def _sample(op: str) -> tuple[Any, ...]:
    """One call of ``op``, its required parameters filled from their declared types: the op table is the protocol's."""
    sig = inspect.signature(getattr(NodeService, op))
    out: list[Any] = []
    for p in list(sig.parameters.values())[1:]:
        if p.default is not inspect.Parameter.empty:
            break
        hint = str(p.annotation)
        out.append(BY_NAME[p.name] if p.name in BY_NAME else None if hint.endswith("| None") else BY_TYPE[hint])
    return tuple(out)


ARGS: dict[str, tuple[Any, ...]] = {op: _sample(op) for op in sorted(WIRE_OPS)}
"""One call of every wire op (a new op without one fails the first test)."""


@dataclass
class Stack:
    node: Node
    serve: Serve
    local: LocalService
    remote: RemoteService
    client: ServeClient
    received: list[bytes]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("parity")
    state = tmp / "state"
    keyed = (f'api-key = "{SECRET_KEY}"\n', f'HF_TOKEN = "{SECRET_TOKEN}"\nVLLM_SERVER_DEV_MODE = "1"\n')
    write_demo_profiles(state, {W: keyed})
    spec = NodeSpec(config=tmp / "none.toml", state_dir=state, demo=True, interval=0.2)
    local = runtime.open(spec, ui=True)
    node = local._node
    serve = Serve(local, state).start()
    node.runtime.start()
    received: list[bytes] = []
    real_read = client_module.read_message

    def recording_read(sock: socket.socket, last: NodeFrame | None = None) -> dict[str, Any]:
        msg = real_read(sock, last)
        received.append(pickle.dumps(msg))
        return msg

    client_module.read_message = recording_read  # type: ignore[assignment]
    client = ServeClient(state)
    client.wait_first_frame(10)
    remote = RemoteService(client)
    try:
        yield Stack(node, serve, local, remote, client, received)
    finally:
        client_module.read_message = real_read  # type: ignore[assignment]
        for st in local.status():
            if st.pid is not None:
                local.stop(st.name, grace=2)
        client.close()
        serve.close()
        node.close()


def _outcome(service: Any, op: str, *args: Any) -> tuple[str, str]:
    """What ``service.op(*args)`` did, as a view shows it: the value's text, or the error's class and first line."""
    try:
        return ("ok", repr(getattr(service, op)(*args)))
    except Exception as exc:
        return (type(exc).__name__, str(exc).splitlines()[0])


def _until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# -- the interface and the wire ---------------------------------------------------------------------------------------
def test_every_interface_method_is_a_wire_op_of_its_name() -> None:
    methods = {n for n, v in vars(NodeService).items() if inspect.isfunction(v) and not n.startswith("_")}
    missing = methods - WIRE_OPS - LOCAL_ONLY
    assert not missing, f"NodeService methods without a wire op: {sorted(missing)} (mark them with @op)"
    assert methods >= WIRE_OPS and CONTROL_OPS <= WIRE_OPS
    assert not (WIRE_OPS & SERVE_OPS)  # the serve's own reads never shadow a node request
    assert set(ARGS) == WIRE_OPS


def test_the_remote_service_sends_each_op_by_its_own_name() -> None:
    sent: list[str] = []

    class Recorder:
        readonly = False
        hello: dict[str, Any] = {"interval": 1.0}
        interval = 1.0

        def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
            sent.append(op)
            return [] if op in ("status", "ramps", "profile_words") else "x"

        def call_async(self, op: str, *args: Any, **kwargs: Any) -> None:
            sent.append(op)

    remote = RemoteService(Recorder())  # type: ignore[arg-type]
    for op in sorted(WIRE_OPS):
        getattr(remote, op)(*ARGS[op])
        assert sent[-1] == op


def test_both_implementations_have_every_method_with_the_same_signature() -> None:
    for name in WIRE_OPS | LOCAL_ONLY:
        declared = inspect.signature(getattr(NodeService, name))
        for impl in (LocalService, RemoteService):
            assert inspect.signature(getattr(impl, name)).parameters.keys() == declared.parameters.keys(), (impl, name)


# -- the same results -------------------------------------------------------------------------------------------------
def test_reads_are_the_same(stack: Stack) -> None:
    local, remote = stack.local, stack.remote
    assert (
        [w.name for w in remote.status()] == [w.name for w in local.status()] == ["llama-70b", "qwen-32b", "mistral-7b"]
    )
    assert remote.profile_words("mistral-7b") == local.profile_words("mistral-7b")
    assert any(w.startswith("max-num-seqs=") for w in local.profile_words("mistral-7b"))
    changes = {"max-num-seqs": "24"}
    assert remote.retune_diff("mistral-7b", changes) == local.retune_diff("mistral-7b", changes)
    assert remote.ramps() == local.ramps()
    assert remote.latest().tick <= stack.node.runtime.latest().tick


def test_wrong_names_give_the_same_one_line_errors(stack: Stack) -> None:
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("launch", ("nope",)),
        ("stop", ("nope",)),
        ("restart", ("nope",)),
        ("retune", ("nope", {"max-num-seqs": "8"})),
        ("retune_diff", ("nope", {"max-num-seqs": "8"})),
        ("sleep", ("nope",)),
        ("stacks", ("nope",)),
        ("profile_words", ("nope",)),
        ("audit_fix", ("no-such-fix",)),
        ("signal_process", (999_999_999,)),
        ("ramp_abort", ("nope",)),
        ("retune", ("mistral-7b", {"max-num-seqs": "-3"})),
        ("probe_links", ((0, 1), (1 << 20,))),  # no PyTorch (or no GPU of its own) here: one line, alike
        ("probe_links", ((99,), (1 << 20,))),  # not this node's GPU
    ]
    for op, args in calls:
        here = _outcome(stack.local, op, *args)
        there = _outcome(stack.remote, op, *args)
        assert here[0] != "ok", (op, here)
        assert here == there, op


def test_read_only_refuses_every_control_op_the_same_way(stack: Stack, tmp_path: Path) -> None:
    local = stack.local.read_only()
    viewer = ServeClient(stack.serve.state_dir, readonly=True)
    try:
        remote = RemoteService(viewer)
        for op in sorted(CONTROL_OPS):
            fn_args = ARGS[op]
            here = _outcome(local, op, *fn_args)
            there = _outcome(remote, op, *fn_args)
            assert here == there == ("InputError", f"{op}: {READ_ONLY}"), op
            # The serve refuses the read-only viewer's request itself too (a viewer that skips the check): the
            # service's one read-only check, the same line.
            with pytest.raises(AmdtopError, match=f"{op}: refused: read-only"):
                viewer.call(op, *fn_args, timeout=10)
    finally:
        viewer.close()


@pytest.fixture
def held_port(stack: Stack) -> Iterator[int]:
    """A real leftover: a process listening on qwen-32b's port (the gate's leftover rule refuses the launch)."""
    port = next(w.port for w in stack.local.status() if w.name == "qwen-32b")
    assert port is not None
    with port_holder(port) as pid:
        yield pid


def test_the_launch_gate_refuses_the_same_launch_both_ways(stack: Stack, held_port: int) -> None:
    here = _outcome(stack.local, "launch", "qwen-32b")
    there = _outcome(stack.remote, "launch", "qwen-32b")
    assert here == there
    assert here == ("GateRefused", "worker[qwen-32b]: launch refused (1 reason(s); --force overrides):")
    with pytest.raises(GateRefused) as refused:
        stack.remote.launch("qwen-32b")
    assert f"pid {held_port}" in refused.value.findings[0].evidence[0]  # the dialog shows the real reason
    assert [w.pid for w in stack.local.status() if w.name == "qwen-32b"] == [None]  # nothing was started


# -- control: the same node changes the same way ----------------------------------------------------------------------
def test_launch_sleep_wake_stacks_and_stop_through_either(stack: Stack) -> None:
    local, remote = stack.local, stack.remote
    assert remote.launch("mistral-7b").name == "mistral-7b"
    _until(lambda: next(w for w in local.status() if w.name == "mistral-7b").state is WorkerState.READY)
    # A second launch of a running worker: the same refusal both ways.
    assert _outcome(local, "launch", "mistral-7b") == _outcome(remote, "launch", "mistral-7b")
    remote.sleep("mistral-7b", level=1)  # `z` attached
    _until(lambda: next(w for w in local.status() if w.name == "mistral-7b").state is WorkerState.ASLEEP)
    local.sleep("mistral-7b", wake=True)
    _until(lambda: next(w for w in remote.status() if w.name == "mistral-7b").state is WorkerState.READY)
    here, there = _outcome(local, "stacks", "mistral-7b"), _outcome(remote, "stacks", "mistral-7b")
    assert here[0] == there[0]  # py-spy's text differs by the instant; both dump (or both say why not)
    report = remote.stop("mistral-7b", grace=5)
    assert "mistral-7b" in report.message
    assert [w.pid for w in local.status() if w.name == "mistral-7b"] == [None]


def test_no_secret_crosses_the_wire(stack: Stack) -> None:
    remote = stack.remote
    remote.launch("mistral-7b")
    try:
        _until(lambda: any(w.name == "mistral-7b" and w.pid for w in remote.latest().workers))
        for op in sorted(WIRE_OPS - CONTROL_OPS):
            _outcome(remote, op, *ARGS[op])
        assert any(w.startswith("env.HF_TOKEN=") for w in remote.profile_words("mistral-7b"))
        time.sleep(0.5)  # a few frames with the keyed worker running
    finally:
        remote.stop("mistral-7b", grace=5)
    wire = b"".join(stack.received)
    assert stack.received and SECRET_KEY.encode() not in wire and SECRET_TOKEN.encode() not in wire
    assert re.search(rb"HF_TOKEN", wire)  # the variable is named, its value masked


def test_a_subscriber_that_raises_is_shielded_and_reported_once_at_both_ends(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    """One rule for the runtime's hub and the viewer's: the broken subscriber stays subscribed (called on every frame),
    the others still get every frame, its failure is reported once (error channel and log) and the viewer stays
    attached (its reader thread used to die of it: "serve closed the connection")."""
    caplog.set_level(logging.WARNING, logger="amdtop.service")
    for service in (stack.local, stack.remote):
        errors: list[str] = []
        got: list[int] = []
        calls: list[int] = []

        def broken(frame: Any, calls: list[int] = calls) -> None:
            calls.append(frame.tick)
            raise ValueError("boom")

        caplog.clear()
        undo = [service.subscribe(broken, errors.append), service.subscribe(lambda f, got=got: got.append(f.tick))]
        try:
            _until(lambda got=got, calls=calls: len(got) >= 4 and len(calls) >= 4, 10)
        finally:
            for u in undo:
                u()
        assert errors == ["frame subscriber: boom"], (service, errors)
        logged = [r.getMessage() for r in caplog.records if r.name == "amdtop.service"]
        assert logged == ["frame subscriber: boom (reported once; it stays subscribed)"], (service, logged)
    assert stack.client.gone is None


def test_frames_reach_subscribers_in_tick_order_when_two_threads_tick(stack: Stack) -> None:
    """The gate ticks from the supervisor's thread while the loop ticks: the serve's history and deltas must still
    see each frame after the one before it."""
    import threading

    seen: list[int] = []
    lock = threading.Lock()

    delays = iter([0.03, 0.0] * 40)

    def record(frame: Any) -> None:
        # A subscriber that sometimes takes a moment before it records: a frame published beside another (not after
        # it) would be recorded out of order.
        with lock:
            delay = next(delays, 0.0)
        time.sleep(delay)
        with lock:
            seen.append(frame.tick)

    undo = stack.node.runtime.subscribe(record)
    try:
        threads = [threading.Thread(target=lambda: [stack.node.runtime.tick() for _ in range(15)]) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        undo()
    assert len(seen) >= 45 and seen == sorted(seen)


# -- the dashboard's other controls: ramps, signals, audit fixes -------------------------------------------------------
@pytest.fixture
def silent_port() -> Iterator[int]:
    """A real listener that never answers: a ramp against it waits on its first request until aborted."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield int(sock.getsockname()[1])


def test_ramps_start_list_refuse_and_abort_the_same_way(stack: Stack, silent_port: int) -> None:
    """A ramp against a listener that never answers runs until aborted: a second start, the list, an abort and an
    abort of none give the same answers through either implementation; so does a refused URL. The ramps are a
    node service's (a ramp outlives the view that started it): the in-process side here is the serve's own."""
    local, remote = stack.serve.service, stack.remote
    q = "qwen-32b"
    url = f"http://127.0.0.1:{silent_port}"
    settings = {"request_timeout_s": 30.0, "step_seconds": 1.0, "num_prompts": 2, "record": False}
    bad = ("http://127.0.0.1:99999", None, settings)
    assert _outcome(local, "ramp_start", q, *bad) == _outcome(remote, "ramp_start", q, *bad)
    assert _outcome(local, "ramp_start", q, *bad)[0] != "ok"
    remote.ramp_start(q, url, None, settings)
    try:
        again = (url, None, settings)
        assert (
            _outcome(local, "ramp_start", q, *again)
            == _outcome(remote, "ramp_start", q, *again)
            == (
                "InputError",
                f"ramp: one already runs against {q}; abort it first",
            )
        )
        assert [(w, running) for w, _doc, _st, running in remote.ramps()] == [
            (w, running) for w, _doc, _st, running in local.ramps()
        ]
        assert (q, True) in [(w, running) for w, _doc, _st, running in remote.ramps()]
    finally:
        local.ramp_abort(q)
    _until(lambda: not any(w == q and running for w, _d, _s, running in local.ramps()))
    assert (
        _outcome(local, "ramp_abort", q)
        == _outcome(remote, "ramp_abort", q)
        == (
            "InputError",
            f"ramp: none runs against {q}",
        )
    )


def test_signal_refuses_a_workers_process_the_same_way(stack: Stack) -> None:
    """``k`` on a worker's own process: both implementations refuse (the worker stops as a whole, not by pid)."""
    local, remote = stack.local, stack.remote
    remote.launch(W)
    try:
        _until(lambda: any(p.owner == W for p in local.latest().processes))
        pid = next(p.pid for p in local.latest().processes if p.owner == W)
        here, there = _outcome(local, "signal_process", pid), _outcome(remote, "signal_process", pid)
        assert here == there and here[0] == "AmdtopError" and "stop the worker" in here[1], here
    finally:
        remote.stop(W, grace=5)


def test_audit_fix_refuses_a_fix_that_is_not_a_retune_the_same_way(stack: Stack) -> None:
    report = stack.local.latest().audit
    by_hand = [f for f in (report.findings if report else ()) if f.worker is None or f.fix.kind != "retune"]
    if not by_hand:
        pytest.skip("this host's audit has no finding to apply by hand")
    fix = by_hand[0].fix_id
    here, there = _outcome(stack.local, "audit_fix", fix), _outcome(stack.remote, "audit_fix", fix)
    assert here == there == ("InputError", f"audit fix {fix}: not a retune of a worker; apply it by hand")


def test_a_node_without_profiles_refuses_control_alike_and_still_signals(tmp_path: Path) -> None:
    # No profile file: no supervisor. The serve's hello once said "read-only" for such a node, so an attached viewer
    # hid every control key, said "read-only" where the in-process dashboard names the missing profile file, and could
    # not signal a GPU process at all, which needs no profile.
    from amdtop.runtime import NodeParts
    from amdtop.telemetry.sim import SimBackend

    state = tmp_path / "state"
    spec = NodeSpec(config=tmp_path / "none.toml", state_dir=state, interval=0.2)
    local = runtime.open(spec, ui=True, parts=NodeParts(backend=SimBackend(seed=3), discover=False))
    node = local._node
    assert node.control is None
    serve = Serve(local, state).start()
    node.runtime.start()
    client = ServeClient(state)
    try:
        client.wait_first_frame(10)
        assert client.hello["readonly"] is False
        remote = RemoteService(client)
        assert remote.readonly is local.readonly is False
        for op in ("launch", "restart", "stop", "sleep", "retune"):
            args = (W, {"max-num-seqs": "8"}) if op == "retune" else (W,)
            here, there = _outcome(local, op, *args), _outcome(remote, op, *args)
            assert here == there, op
            assert here[0] == "AmdtopError" and "no worker profiles on this node" in here[1], (op, here)
        # Stacks read discovered servers too: no such worker, alike.
        assert (
            _outcome(local, "stacks", W) == _outcome(remote, "stacks", W) == ("InputError", f"stacks: no worker '{W}'")
        )
        # A GPU process that is gone: refused alike by the signal's own check, not by a read-only viewer.
        here, there = _outcome(local, "signal_process", 999_999_999), _outcome(remote, "signal_process", 999_999_999)
        assert here == there and "read-only" not in here[1], here
    finally:
        client.close()
        serve.close()
        node.close()
