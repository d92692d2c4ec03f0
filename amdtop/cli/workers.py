"""``amdtop workers status|launch|stop|restart|retune``: the worker supervisor, headless.

A client of the node service: with ``amdtop serve`` running for the state dir, every action is the serve's (its
supervisor owns the workers, its launch gate judges); without one, a supervisor of this process's own does it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from amdtop import runtime
from amdtop.audit.context import AuditContext, target_of
from amdtop.audit.rules_numa import localities
from amdtop.cli import adopt as adopt_cli
from amdtop.cli.common import default_config, node_spec, print_json
from amdtop.cli.served import first_frame
from amdtop.engines_json import worker_extra_json
from amdtop.errors import AmdtopError, InputError
from amdtop.health.stall import health_json
from amdtop.model import Topology, WorkerStatus
from amdtop.runtime import LocalService, NodeParts
from amdtop.serve.client import RemoteService, ServeClient, attach
from amdtop.service.api import NodeService
from amdtop.supervisor.readiness import wait_ready
from amdtop.supervisor.retune import parse_changes

if TYPE_CHECKING:
    # Annotations only: the supervisor loads when a command opens one (amdtop.runtime.node), not with the parser.
    from amdtop.supervisor import StopReport

MAX_SECONDS = 7 * 24 * 3600.0
"""Longest --grace/--timeout taken: a week; more is a typo that would leave a stop hanging."""


def seconds(lo_open: bool) -> Any:
    """An argparse type for a finite number of seconds: ``> 0`` when ``lo_open``, else ``>= 0``; at most a week."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; e.g. 30") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number of seconds; e.g. 30")
        if value < 0 or (lo_open and value == 0):
            raise argparse.ArgumentTypeError(
                f"{text} must be {'greater than' if lo_open else 'at least'} 0 seconds; e.g. 30"
            )
        if value > MAX_SECONDS:
            raise argparse.ArgumentTypeError(f"{text} is more than a week ({MAX_SECONDS:g} s); give fewer seconds")
        return value

    return parse


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``workers`` command group."""
    w = sub.add_parser("workers", parents=[parent], help="launch, stop, restart and retune vLLM workers")
    wsub = w.add_subparsers(dest="workers_command", metavar="ACTION", required=True)
    st = wsub.add_parser("status", parents=[parent], help="state of every worker")
    st.add_argument("--json", action="store_true", help="one JSON document on stdout")
    st.set_defaults(func=run_status)
    for action, helptext, func in (
        ("launch", "start a worker", run_launch),
        ("stop", "stop a worker (SIGTERM, grace, SIGKILL, sweep)", run_stop),
        ("restart", "stop and start a worker", run_restart),
        ("retune", "change a worker's settings and restart it", run_retune),
    ):
        p = wsub.add_parser(action, parents=[parent], help=helptext)
        p.add_argument("name", metavar="NAME", help="worker name from the profile file")
        if action == "retune":
            p.add_argument("changes", metavar="KEY=VALUE", nargs="+", help="e.g. max-num-seqs=64 env.NCCL_DEBUG=INFO")
            p.add_argument("--dry-run", action="store_true", help="print the diff, change nothing")
        if action != "launch":
            p.add_argument(
                "--grace", type=seconds(False), default=None, help="seconds between SIGTERM and SIGKILL (default 30)"
            )
        if action != "stop":
            p.add_argument("--force", action="store_true", help="start past the launch gate's refusal (recorded)")
            p.add_argument("--wait", action="store_true", help="wait until /health answers 200")
            p.add_argument("--timeout", type=seconds(True), default=300.0, help="seconds --wait waits (default 300)")
        p.set_defaults(func=func)
    for action, helptext in (
        ("sleep", "vLLM sleep mode: free the worker's weights and KV cache, keep it running (needs dev mode)"),
        ("wake", "wake a sleeping worker"),
    ):
        p = wsub.add_parser(action, parents=[parent], help=helptext)
        p.add_argument("name", metavar="NAME", help="worker name from the profile file")
        if action == "sleep":
            p.add_argument(
                "--level", type=int, choices=(1, 2), default=1, help="1: offload weights to CPU (default), 2: discard"
            )
        p.set_defaults(func=run_sleep)
    adopt_cli.register(wsub, parent)
    sk = wsub.add_parser("stacks", parents=[parent], help="Python stacks of each rank of a worker (py-spy)")
    sk.add_argument("name", metavar="NAME", help="worker name from the profile file")
    sk.add_argument("--json", action="store_true", help="one JSON document on stdout")
    sk.set_defaults(func=run_stacks)


class Workers:
    """The workers of one state dir as a command reaches them: the node service of the serve when one runs there
    (its supervisor owns the workers and does what the command asks), else the same service opened in this process
    (:func:`amdtop.runtime.open`, its own supervisor). One supervisor per state dir either way; the calls below
    take the same names and arguments on both.

    In-process the supervisor is lenient: a bad profile file does not stop ``status``/``stop``/``restart`` of a
    running worker (they work from its launch record); ``launch`` and ``retune`` still refuse with the file's error.
    An explicit ``--config`` that does not exist is an error (a typo would otherwise read as "no workers")."""

    def __init__(self, args: argparse.Namespace) -> None:
        spec = node_spec(args)
        self.state_dir = spec.state_dir
        self.client: ServeClient | None = attach(spec.state_dir, readonly=spec.readonly)
        self.local: LocalService | None = None
        self.control: NodeService
        if self.client is not None:
            self.control = RemoteService(self.client)
        else:
            if args.config and not args.demo and not os.path.lexists(args.config):
                raise InputError(
                    f"--config: {args.config} does not exist; fix the path, or leave --config out for "
                    f"{default_config()}"
                )
            self.local = runtime.open(
                spec, supervise=True, follow_logs=False, kernel=False, parts=NodeParts(discover=False)
            )
            self.control = self.local

    def topology(self) -> Topology:
        if self.local is not None:
            return self.local.topology()
        assert self.client is not None
        return first_frame(self.client).snapshot.topology

    def status_one(self, name: str) -> WorkerStatus:
        rows = self.control.status()
        for st in rows:
            if st.name == name:
                return st
        known = ", ".join(st.name for st in rows) or "none"
        raise InputError(f"worker[{name}]: no such worker; use one of: {known}")

    def report(self) -> tuple[list[str], Exception | None]:
        """The status pass's notes and the profile file's error (a serve says its own on its stderr)."""
        return self.local.supervisor_report() if self.local is not None else ([], None)

    def forced(self, name: str) -> tuple[str, ...]:
        """The launch gate's reasons ``--force`` overrode for ``name``'s run (its state record)."""
        from amdtop.supervisor.state import StateStore

        rec = StateStore(self.state_dir).load(name)
        return () if rec is None else tuple(rec.forced)

    def wait_ready(self, name: str, timeout: float) -> WorkerStatus:
        return wait_ready(lambda: self.status_one(name), name, timeout)

    def close(self) -> None:
        if self.local is not None:
            self.local.shutdown()
        if self.client is not None:
            self.client.close()


def with_locality(docs: list[dict[str, Any]], rows: list[WorkerStatus], topology: Topology) -> list[dict[str, Any]]:
    """Add ``numa_locality`` (share of resident pages on the GPUs' node, from numa_maps) to each running worker."""
    ctx = AuditContext(topology=topology, targets=[target_of(r) for r in rows])
    pct = dict(localities(ctx))
    for doc in docs:
        if doc["name"] in pct:
            doc["numa_locality"] = {"local_pct": pct[doc["name"]]}
    return docs


def status_json(st: WorkerStatus, now: float | None = None) -> dict[str, Any]:
    """The contract's ``workers status --json`` entry (plus extra keys)."""
    now = time.time() if now is None else now
    eng = st.engine
    return {
        "name": st.name,
        "state": st.state.value,
        "pid": st.pid,
        "pgid": st.pgid,
        "gpus": list(st.gpus),
        "numa_node": st.numa_node,
        "port": st.port,
        "url": st.url,
        "cpu_affinity": list(st.cpu_affinity),
        "mems_allowed": list(st.mems_allowed),
        "log": st.log,
        "restarts": st.restarts,
        "pids": list(st.pids),
        "rank_pids": [list(p) for p in st.rank_pids],
        "started_at": st.started_at,
        "uptime_s": None if st.started_at is None else round(now - st.started_at, 1),
        "engine": None
        if eng is None
        else {
            "running": eng.running,
            "waiting": eng.waiting,
            "kv_cache_usage": eng.kv_cache_usage,
            "gen_tokens_per_s": eng.gen_tokens_per_s,
            "cache_hit_rate": eng.cache_hit_rate,
            "ttft_mean_s": eng.ttft_mean_s,
            "itl_mean_s": eng.itl_mean_s,
        },
        "last_log_lines": list(st.last_log_lines),
        "note": st.note,
        **worker_extra_json(st),
        "health": health_json(st.health),
        "error_line": st.error_line,
    }


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def render_status(rows: list[WorkerStatus]) -> str:
    """A human table of worker states."""
    if not rows:
        return "no workers in the profile file\n"
    now = time.time()
    out = [
        f"{'NAME':<16}{'STATE':<10}{'PID':>8}{'PORT':>7}  {'GPUS':<12}{'NUMA':>5}{'UP':>8}{'RST':>5}{'RUN':>5}{'WAIT':>5}{'KV%':>6}{'TOK/S':>8}"
    ]
    for st in rows:
        up = "-" if st.started_at is None else f"{int(now - st.started_at)}s"
        e = st.engine
        kv = None if e is None or e.kv_cache_usage is None else e.kv_cache_usage * 100
        out.append(
            f"{st.name[:15]:<16}{st.state.value:<10}{_num(st.pid):>8}{_num(st.port):>7}  "
            f"{','.join(map(str, st.gpus)) or '-':<12}{_num(st.numa_node):>5}{up:>8}{st.restarts:>5}"
            f"{_num(e.running if e else None):>5}{_num(e.waiting if e else None):>5}{_num(kv, '{:.1f}'):>6}"
            f"{_num(e.gen_tokens_per_s if e else None, '{:.1f}'):>8}"
        )
        if e is not None and len(e.engines) > 1:
            # One line per engine (DP replica): its own gauges, never summed (docs/vllm-metrics.md).
            for eng in e.engines:
                ekv = "-" if eng.kv_cache_usage is None else f"{eng.kv_cache_usage * 100:.1f}"
                out.append(
                    f"    engine {eng.engine}: run {_num(eng.running)} wait {_num(eng.waiting)} kv% {ekv} "
                    f"tok/s {_num(eng.gen_tokens_per_s, '{:.1f}')}"
                    + (f" asleep L{eng.sleep_level}" if eng.sleep_level else "")
                )
        if st.engine_kind != "vllm":
            out.append(f"    engine: {st.engine_kind}")  # vLLM is the default: only the other engine is named
        if st.note:
            out.append(f"    ! {st.note}")
        if st.health is not None and st.health.verdict != "ok":
            out.append(f"    ! {st.health.verdict}: {st.health.message}")
        elif st.error_line:
            out.append(f"    ! {st.error_line}")
        for line in st.last_log_lines[-3:]:
            out.append(f"    | {line}")
    return "\n".join(out) + "\n"


def run_status(args: argparse.Namespace) -> int:
    """Print every worker's state."""
    workers = Workers(args)
    try:
        rows = list(workers.control.status())
        topology = workers.topology() if args.json else None
        notes, config_error = workers.report()
    finally:
        workers.close()
    if topology is not None:
        print_json(with_locality([status_json(r) for r in rows], rows, topology))
    else:
        sys.stdout.write(render_status(rows))
    for note in notes:
        sys.stderr.write(f"amdtop: note: {note}\n")
    if config_error is not None:
        # The rows above come from the launch records; the file still needs fixing.
        raise config_error
    return 0


def _finish(workers: Workers, args: argparse.Namespace, st: WorkerStatus) -> int:
    forced = workers.forced(st.name)
    if forced:
        sys.stderr.write(f"{st.name}: launch gate overridden by --force (recorded): {'; '.join(forced)}\n")
    if getattr(args, "wait", False):
        st = workers.wait_ready(args.name, timeout=args.timeout)
    sys.stderr.write(f"{st.name}: {st.state.value} pid={st.pid} url={st.url} log={st.log}\n")
    return 0


def _report(rep: StopReport) -> None:
    sys.stderr.write(rep.message + "\n")
    for path in rep.swept_shm:
        sys.stderr.write(f"  removed {path}\n")
    if rep.swept_pids:
        sys.stderr.write(f"  swept pids {' '.join(map(str, rep.swept_pids))}\n")


def run_launch(args: argparse.Namespace) -> int:
    """Start one worker."""
    workers = Workers(args)
    try:
        return _finish(workers, args, workers.control.launch(args.name, force=args.force))
    finally:
        workers.close()


def run_stop(args: argparse.Namespace) -> int:
    """Stop one worker."""
    workers = Workers(args)
    try:
        rep = workers.control.stop(args.name, grace=args.grace)
        if isinstance(rep, str):  # a server amdtop did not start: TERM to its API server, one line
            sys.stderr.write(rep + "\n")
            return 0
        _report(rep)
    finally:
        workers.close()
    if rep.record_error:
        raise AmdtopError(rep.record_error)
    return 0


def run_restart(args: argparse.Namespace) -> int:
    """Restart one worker."""
    workers = Workers(args)
    try:
        return _finish(workers, args, workers.control.restart(args.name, grace=args.grace, force=args.force))
    finally:
        workers.close()


def run_retune(args: argparse.Namespace) -> int:
    """Show the diff, write the profile back and restart the worker."""
    try:
        changes = parse_changes(args.changes)
    except InputError as exc:
        raise InputError(f"retune: {exc}") from None
    workers = Workers(args)
    try:
        sys.stderr.write(workers.control.retune_diff(args.name, changes) + "\n")
        if args.dry_run:
            return 0
        st = workers.control.retune(args.name, changes, grace=args.grace, force=args.force)
        return _finish(workers, args, st)
    finally:
        workers.close()


def run_sleep(args: argparse.Namespace) -> int:
    """``workers sleep|wake NAME``: the server's answer on stderr."""
    workers = Workers(args)
    wake = args.workers_command == "wake"
    try:
        answer = workers.control.sleep(args.name, wake=wake, level=getattr(args, "level", 1))
    finally:
        workers.close()
    sys.stderr.write(f"{args.name}: {'wake_up' if wake else 'sleep'}: {answer}\n")
    return 0


def run_stacks(args: argparse.Namespace) -> int:
    """Dump each rank's Python stacks with py-spy; exit 1 when any rank could not be dumped (its line says why)."""
    from amdtop.supervisor.stacks import dump_stacks, render_stacks, require_py_spy, worker_targets

    exe = require_py_spy()  # before anything else: a missing tool is one line, whatever the worker does
    workers = Workers(args)
    try:
        st = workers.status_one(args.name)
    finally:
        workers.close()
    targets = worker_targets(st)
    if not targets:
        raise AmdtopError(f"worker[{args.name}]: {st.state.value}, no process to dump")
    stacks = dump_stacks(targets, py_spy=exe)
    if args.json:
        print_json([{"rank": s.rank, "pid": s.pid, "stacks": s.text, "error": s.error} for s in stacks])
    else:
        sys.stdout.write(render_stacks(args.name, stacks))
    failed = [s for s in stacks if s.error is not None]
    for s in failed:
        sys.stderr.write(f"amdtop: error: worker[{args.name}] {s.label()}: {s.error}\n")
    return 1 if failed else 0
