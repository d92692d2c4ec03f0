"""``amdtop ramp``: the load ramp, headless."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from amdtop.cli.common import state_dir
from amdtop.cli.ramp_verdict import cli_observer, gpu_list, render_verdict, sharing_warning
from amdtop.errors import AmdtopError, os_reason
from amdtop.private_files import make_private_dirs, private_opener, write_private
from amdtop.ramp import Ramp, RampConfig, RampResult
from amdtop.ramp.bound import run_fresh
from amdtop.ramp.goodput import parse_goodput
from amdtop.ramp.limits import check_writable_dir, check_writable_file, fallback_dir
from amdtop.ramp.target import check_base_url


def _number(kind: type, lo: float, hi: float, *, lo_open: bool = False, example: str = "") -> Callable[[str], Any]:
    """An argparse type: a finite ``kind`` in ``[lo, hi]`` (``(lo, hi]`` when ``lo_open``), one-line errors."""

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}; e.g. {example}"
            ) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number; e.g. {example}")
        if value < lo or value > hi or (lo_open and value == lo):
            span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
            raise argparse.ArgumentTypeError(f"{text} is outside {span}; e.g. {example}")
        return value

    return parse


def _conc_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,2,4,8") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("needs positive integers, e.g. 1,2,4,8")
    return tuple(sorted(set(values)))


def _base_url(text: str) -> str:
    try:
        return check_base_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add the ``ramp`` command."""
    p = sub.add_parser("ramp", parents=[parent], help="ramp load against an OpenAI endpoint and find the knee")
    p.add_argument("--url", required=True, type=_base_url, help="server base URL, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default=None, help="served model name (default: the first of /v1/models)")
    p.add_argument(
        "--concurrency", type=_conc_list, default=None, help="steps, e.g. 1,2,4,8 (default 1,2,4,... to --max-num-seqs)"
    )
    hour, tokens = 3600.0, 1_000_000
    p.add_argument(
        "--max-num-seqs",
        type=_number(int, 1, 1 << 20, example="256"),
        default=256,
        help="top of the default concurrency list (default 256)",
    )
    p.add_argument(
        "--step-seconds",
        type=_number(float, 0, hour, lo_open=True, example="10"),
        default=10.0,
        help="measurement window per step (default 10)",
    )
    p.add_argument(
        "--warmup-seconds",
        type=_number(float, 0, hour, example="2"),
        default=None,
        help="warm-up per step (default step/4, at most 5)",
    )
    p.add_argument(
        "--input-len", type=_number(int, 1, tokens, example="128"), default=128, help="prompt tokens (default 128)"
    )
    p.add_argument(
        "--output-len",
        type=_number(int, 1, tokens, example="128"),
        default=128,
        help="output tokens, fixed with ignore_eos (default 128)",
    )
    p.add_argument("--chat", action="store_true", help="use /v1/chat/completions instead of /v1/completions")
    p.add_argument(
        "--knee-fraction",
        type=_number(float, 0, 1, lo_open=True, example="0.9"),
        default=0.9,
        help="knee: smallest step within this fraction of the best",
    )
    p.add_argument(
        "--slo-ttft-ms",
        type=_number(float, 0, 1e7, lo_open=True, example="500"),
        default=None,
        help="p99 TTFT SLO (ms)",
    )
    p.add_argument(
        "--slo-tpot-ms", type=_number(float, 0, 1e7, lo_open=True, example="50"), default=None, help="p99 TPOT SLO (ms)"
    )
    p.add_argument("--no-refine", action="store_true", help="skip the refinement steps around the knee")
    p.add_argument(
        "--max-error-rate",
        type=_number(float, 0, 1, example="0.5"),
        default=0.5,
        help="abort above this failed fraction (default 0.5)",
    )
    p.add_argument("--request-timeout", type=_number(float, 0, hour, lo_open=True, example="60"), default=60.0,
                   help="longest silence inside a response (s)")  # fmt: skip
    p.add_argument(
        "--goodput", nargs="+", metavar="KEY:MS", default=None,
        help="SLOs for goodput per step as vllm bench serve: ttft:MS tpot:MS e2el:MS (a request counts when it meets all)",
    )  # fmt: skip
    p.add_argument("--gpus", type=gpu_list, default=None, help="the worker's GPUs for per-step GPU data (default: "
                   "the GPUs running the worker's processes, else all)")  # fmt: skip
    p.add_argument("--no-record", action="store_true", help="skip per-step /metrics and GPU recording (no knee cause)")
    p.add_argument("--json", metavar="FILE", default=None, help="write the result as JSON to FILE ('-' for stdout)")
    p.set_defaults(func=run_ramp)


def _progress(result: RampResult, printed: list[int]) -> None:
    if len(result.steps) <= len(printed):
        return
    printed.append(1)
    s = result.steps[-1]
    ttft = s.get("mean_ttft_ms")
    if s.get("note"):
        sys.stderr.write(f"concurrency {s['concurrency']:>4}: {s['note']} (failed {s['failed']})\n")
        return
    sys.stderr.write(
        f"concurrency {s['concurrency']:>4}: {s['output_throughput']:9.1f} out tok/s  {s['request_throughput']:7.2f} req/s  "
        f"TTFT {'-' if ttft is None else f'{ttft:.1f}'} ms  ok {s['completed']} failed {s['failed']}  "
        f"client CPU {s['client_cpu_pct']:.0f}%\n"
    )
    sharing_warning(s, printed)


def render_table(doc: dict[str, Any]) -> str:
    """The steps as a text table, the knee row marked with ``*``."""
    knee = (doc.get("knee") or {}).get("concurrency")
    cols = (("concurrency", "conc", "{:d}"), ("request_throughput", "req/s", "{:.2f}"),
            ("output_throughput", "out tok/s", "{:.1f}"), ("mean_ttft_ms", "TTFT ms", "{:.1f}"),
            ("p99_ttft_ms", "p99 TTFT", "{:.1f}"), ("mean_tpot_ms", "TPOT ms", "{:.2f}"),
            ("p99_tpot_ms", "p99 TPOT", "{:.2f}"), ("mean_e2el_ms", "E2EL ms", "{:.1f}"), ("completed", "ok", "{:d}"),
            ("failed", "failed", "{:d}"), ("client_cpu_pct", "client CPU%", "{:.0f}"))  # fmt: skip
    lines = ["  " + "".join(f"{h:>12}" for _, h, _ in cols)]
    for s in doc["steps"]:
        cells = ("-" if s.get(k) is None else f.format(s[k]) for k, _, f in cols)
        lines.append(("* " if s["concurrency"] == knee else "  ") + "".join(f"{c:>12}" for c in cells))
    return "\n".join(lines) + "\n"


def _write_json(path: Path, text: str) -> str | None:
    """Write the --json file; on failure keep the document in the fallback folder and return the error line."""
    try:
        with open(path, "w", encoding="utf-8", opener=private_opener) as fh:
            fh.write(text)
        return None
    except OSError as exc:
        spare = fallback_dir() / path.name
        try:
            make_private_dirs(spare.parent)
            write_private(spare, text)
            kept = f"written to {spare} instead"
        except OSError:
            kept = "not written anywhere else either"
        return f"--json: cannot write {path} ({os_reason(exc)}); the result was {kept}"


async def _run_until_signalled(ramp: Ramp) -> RampResult:
    """Run ``ramp``; SIGINT or SIGTERM aborts it as the TUI's abort does: the step in flight ends within ~50 ms, the
    steps measured are kept, and the caller writes them (``aborted`` names the signal) and exits 1.

    asyncio's own SIGINT handler cancels the main task, and the step's gather swallowed that cancel: every step ran
    and the run exited 0; SIGTERM killed it before the --json file was written. The loop's handlers run as callbacks
    on the loop, not inside the signal, so they may take the abort's lock."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, ramp.abort, f"stopped by {sig.name}")
    try:
        return await ramp.run()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def run_ramp(args: argparse.Namespace) -> int:
    """Run the ramp and print or write the result."""
    # Every place a result goes is checked first: a run must never end in losing what it measured.
    if args.json not in (None, "-"):
        check_writable_file("--json", Path(args.json))
    check_writable_dir("--state-dir", state_dir(args) / "ramp")
    slos = parse_goodput(args.goodput) if args.goodput else ()
    cfg = RampConfig(
        url=args.url, model=args.model, concurrencies=args.concurrency, max_num_seqs=args.max_num_seqs,
        step_seconds=args.step_seconds, warmup_seconds=args.warmup_seconds, input_len=args.input_len,
        output_len=args.output_len, chat=args.chat, knee_fraction=args.knee_fraction, slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms, refine_points=0 if args.no_refine else 3, max_error_rate=args.max_error_rate,
        request_timeout_s=args.request_timeout,
    )  # fmt: skip
    # The key comes from the environment as vLLM's own does (an argv word would be readable by every user).
    key = os.environ.get("VLLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or None
    cfg = replace(cfg, goodput=slos, record=not args.no_record, api_key=key)
    printed: list[int] = []
    observer, close, node = (None, None, "off") if args.no_record else cli_observer(args, args.url, args.gpus)
    ramp = Ramp(cfg, state_dir(args), on_update=lambda r: _progress(r, printed), observer=observer)
    ramp.result.settings["node_data"] = node
    try:
        result = run_fresh(_run_until_signalled(ramp))  # its clean-up bounded too (ramp/bound.py)
    finally:
        if close is not None:
            close()
    doc = result.to_json()
    failures: list[str] = []
    if args.json == "-":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif args.json:
        problem = _write_json(Path(args.json), json.dumps(doc, indent=2) + "\n")
        failures += [problem] if problem else []
    if args.json != "-":
        sys.stdout.write(render_table(doc))
    knee = doc["knee"]
    if ramp.save_error:
        where = f"saved to {ramp.paths[0]} instead" if ramp.paths else "not saved"
        failures.append(f"--state-dir: {ramp.save_error}; results {where}")
    elif ramp.paths:
        sys.stderr.write(f"results: {ramp.paths[0]} {ramp.paths[1]}\n")
    if knee:
        sys.stderr.write(f"knee: concurrency {knee['concurrency']} ({knee['reason']})\n")
        sys.stderr.write(render_verdict(doc))
    if result.aborted:
        failures.append(f"ramp: stopped early: {result.aborted}; partial results saved")
    if not any(s.get("completed") for s in doc["steps"]):
        failures.append(
            "ramp: no request completed in any step, nothing was measured; lengthen --step-seconds "
            "(a first token may take longer than the window) or check the server"
        )
    if failures:
        for line in failures[:-1]:
            sys.stderr.write(f"amdtop: error: {line}\n")
        raise AmdtopError(failures[-1])
    return 0
