"""Why throughput stops growing at the knee, and what to change: ``knee.cause``, ``knee.evidence``, the recommendation.

The step just above the knee is where the limit shows (the knee itself is the last step that still grew). The rules
run from the most specific server-side signal to the most general, each leaving its numbers as evidence:

``kv_cache``   preemptions, or the KV cache (nearly) full with requests waiting, or more sequences than the cache holds
               (``kv_cache_size_tokens`` / tokens per sequence) with requests queueing. vLLM's CPU build reports its
               gauges as 0 under load (reference vllm.md section 8), so the capacity rule works from counters alone.
``client``     the load generator's own thread busy (>= 85 % of a core): more concurrency cannot be offered.
``power``      GPUs throttled, or at their power cap while busy.
``tp_imbalance`` one TP rank's utilization well below the others'.
``communication`` TP ranks mostly idle while XGMI/NVLink traffic flows: waiting on collectives.
``admission``  (SGLang) requests queue while token usage is mostly free and fewer run than are offered: SGLang's cap
               on running requests (max-running-requests) holds them back, not the memory. A vLLM batch capped the
               same way stays ``compute`` with a "batch capped" line.
``compute``    the server is saturated with the KV cache not full (nothing preempted).
``unknown``    neither server metrics nor node data were seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

CAUSES = ("kv_cache", "admission", "compute", "tp_imbalance", "communication", "power", "client", "unknown")
CLIENT_BUSY_PCT = 85.0
KV_FULL = 0.90
IMBALANCE_POINTS = 20.0
IDLE_PCT = 10.0
THROTTLED_FRAC = 0.2
POWER_AT_CAP = 0.97
QUEUE_MS = 5.0
"""Mean queue time above which requests count as queueing (vLLM's own admission takes well under a millisecond)."""
KV_LOW = 0.5
"""KV (token) usage below which queueing is not the memory's doing."""
SGLANG_FLAGS = {
    "max-num-seqs": "max-running-requests",
    "gpu-memory-utilization": "mem-fraction-static",
    "max-num-batched-tokens": "chunked-prefill-size",
}
"""vLLM's flag -> SGLang's for the same limit (``--max-running-requests``, ``--mem-fraction-static``,
``--chunked-prefill-size``: sglang 0.5.23 ``srt/arg_groups/fields/schedule.py``)."""
GMU_RANGE = (0.90, 0.92)
"""gpu-memory-utilization the seeds recommend: room for the KV cache without starving activations."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The knee's cause, the numbers behind it, and what to change."""

    cause: str
    evidence: tuple[str, ...]
    changes: dict[str, str] = field(default_factory=dict)
    """Retune ``key -> value`` (vllm serve flags) the one-key apply sends."""
    advice: tuple[str, ...] = ()
    pane: str | None = None
    """Dashboard pane that explains it (``gpus``, ``topo``, ``groups``, ``numa``, ``workers``, ``logs``)."""
    flag: str | None = None
    """amdtop flag kind to look for, or the vllm flag to change."""

    def recommendation(self) -> dict[str, Any]:
        """The JSON ``recommendation`` object."""
        return {"cause": self.cause, "changes": dict(self.changes), "advice": list(self.advice), "pane": self.pane,
                "flag": self.flag}  # fmt: skip


def _f(step: dict[str, Any], key: str) -> float | None:
    v = step.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def seq_tokens(input_len: int, output_len: int, block_size: int | None) -> int:
    """KV tokens one sequence of the ramp holds at its end (prompt incl. BOS + output, whole blocks)."""
    tokens = input_len + output_len + 1
    if block_size:
        tokens = -(-tokens // block_size) * block_size
    return tokens


def explain(
    steps: Sequence[dict[str, Any]], knee_c: int, *, input_len: int, output_len: int, current_gmu: float | None = None
) -> Verdict:
    """The verdict for a knee at concurrency ``knee_c`` over the ramp's step dicts."""
    usable = sorted((s for s in steps if s.get("completed", 0) > 0), key=lambda s: s["concurrency"])
    knee = next((s for s in usable if s["concurrency"] == knee_c), None)
    if knee is None:
        return Verdict("unknown", ("no completed step at the knee",))
    above = [s for s in usable if s["concurrency"] > knee_c]
    sat = above[0] if above else knee
    ev: list[str] = [
        f"throughput {knee['output_throughput']:.0f} tok/s at concurrency {knee_c}; "
        + (f"{sat['output_throughput']:.0f} tok/s at {sat['concurrency']}" if above else "no step above the knee")
    ]
    gmu = current_gmu if current_gmu is not None else _f(sat, "gpu_memory_utilization")
    engine = next((str(s["engine_kind"]) for s in usable if s.get("engine_kind")), "vllm")
    cause = (
        _kv(sat, knee, ev, input_len, output_len)
        or _admission(sat, ev, engine)
        or _client(sat, ev)
        or _power(sat, ev)
        or _imbalance(sat, ev)
        or _communication(sat, ev)
        or _compute(sat, ev)
        or "unknown"
    )
    if cause == "unknown":
        ev.append("no server /metrics and no GPU samples during the ramp")
    _sharing_note(sat, ev)
    verdict = _recommend(cause, tuple(ev), knee_c, sat, gmu)
    return _for_sglang(verdict) if engine == "sglang" else verdict


def _for_sglang(v: Verdict) -> Verdict:
    """The verdict with SGLang's flags for vLLM's (the limits are the same, the names differ)."""

    def text(t: str) -> str:
        for old, new in SGLANG_FLAGS.items():
            t = t.replace(old, new)
        return t

    changes = {SGLANG_FLAGS.get(k, k): val for k, val in v.changes.items()}
    flag = SGLANG_FLAGS.get(v.flag, v.flag) if v.flag is not None else None
    return Verdict(v.cause, v.evidence, changes, tuple(text(a) for a in v.advice), v.pane, flag)


def _admission(sat: dict[str, Any], ev: list[str], engine: str) -> str | None:
    c = sat["concurrency"]
    kv_max, run, waiting = _f(sat, "kv_cache_usage_max"), _f(sat, "running_max"), _f(sat, "waiting_max")
    queue = _f(sat, "mean_queue_time_ms")
    if engine != "sglang":
        return None  # vLLM's capped batch stays ``compute`` with its "batch capped" line (the tests of issue 16)
    if kv_max is None or kv_max >= KV_LOW or run is None or not 0 < run < c:
        return None
    if not ((waiting or 0) > 0 or (queue is not None and queue >= QUEUE_MS)):
        return None
    ev.append(f"at most {run:.0f} of {c} requests running while token usage peaked at {100 * kv_max:.0f}%: "
              "admission (max-running-requests) holds them, not the memory")  # fmt: skip
    ev.append(_queue_text(sat))
    return "admission"


def _kv(sat: dict[str, Any], knee: dict[str, Any], ev: list[str], input_len: int, output_len: int) -> str | None:
    c = sat["concurrency"]
    pre = _f(sat, "num_preemptions")
    kv_max = _f(sat, "kv_cache_usage_max")
    waiting = _f(sat, "waiting_max")
    queue = _f(sat, "mean_queue_time_ms")
    cap = _f(sat, "kv_cache_tokens")
    block = sat.get("block_size") if isinstance(sat.get("block_size"), int) else None
    queueing = (waiting or 0) > 0 or (queue is not None and queue >= QUEUE_MS)
    found: list[str] = []
    if pre:
        found.append(f"{pre:.0f} preemptions at concurrency {c} (KV cache ran out of blocks)")
    if kv_max is not None and kv_max >= KV_FULL and queueing:
        found.append(f"KV cache {100 * kv_max:.0f}% full at concurrency {c}")
    fits = None
    if cap:
        per = seq_tokens(input_len, output_len, block)
        fits = int(cap // per)
        if fits < c and queueing and fits <= 1.5 * knee["concurrency"]:
            blocks = f" in {block}-token blocks" if block else ""
            found.append(
                f"KV cache holds {cap:.0f} tokens: {fits} whole sequences of {per} tokens{blocks}; "
                f"{c} in flight need {c * per}"
            )
    if not found:
        return None
    ev.extend(found)
    if queueing:
        ev.append(_queue_text(sat))
    return "kv_cache"


def _queue_text(sat: dict[str, Any]) -> str:
    parts = []
    if (w := _f(sat, "waiting_max")) is not None:
        parts.append(f"up to {w:.0f} waiting")
    if (q := _f(sat, "mean_queue_time_ms")) is not None:
        parts.append(f"mean queue time {q:.1f} ms")
    return f"at concurrency {sat['concurrency']}: " + ", ".join(parts) if parts else "requests queued"


def _client(sat: dict[str, Any], ev: list[str]) -> str | None:
    cpu = _f(sat, "client_cpu_pct")
    if cpu is None or cpu < CLIENT_BUSY_PCT:
        return None
    ev.append(f"load generator used {cpu:.0f}% of its core at concurrency {sat['concurrency']} (one event loop)")
    if (w := _f(sat, "worker_cpu_pct")) is not None:
        ev.append(f"worker processes used {w:.0f}% CPU")
    return "client"


def _power(sat: dict[str, Any], ev: list[str]) -> str | None:
    thr = _f(sat, "throttled_frac")
    pf = _f(sat, "power_frac_max")
    util = _f(sat, "gpu_util_mean")
    if thr is not None and thr >= THROTTLED_FRAC:
        why = sat.get("throttle_reasons")
        ev.append(f"GPUs throttled in {100 * thr:.0f}% of samples at concurrency {sat['concurrency']}"
                  + (f" ({why})" if why else ""))  # fmt: skip
        return "power"
    if pf is not None and pf >= POWER_AT_CAP and (util or 0) >= 80:
        ev.append(f"GPU power at {100 * pf:.0f}% of its cap with utilization {util:.0f}%")
        return "power"
    return None


def _imbalance(sat: dict[str, Any], ev: list[str]) -> str | None:
    spread = _f(sat, "gpu_util_spread")
    util = sat.get("gpu_util_pct") or {}
    if spread is None or spread < IMBALANCE_POINTS or not util:
        return None
    lo = sat.get("gpu_util_min_gpu")
    hi = max(util.values())
    if float(util.get(str(lo), 0)) < IDLE_PCT:
        return None  # an idle GPU is not one of a loaded worker's TP ranks (every step runs on all of them)
    ev.append(f"TP ranks' utilization spread {spread:.0f} points: GPU {lo} at {util.get(str(lo), 0):.0f}% vs {hi:.0f}%")
    return "tp_imbalance"


def _communication(sat: dict[str, Any], ev: list[str]) -> str | None:
    xgmi = _f(sat, "xgmi_gbps")
    util = _f(sat, "gpu_util_mean")
    n = len(sat.get("gpu_util_pct") or {})
    if xgmi is None or util is None or n < 2 or util >= 60 or xgmi <= 0:
        return None
    ev.append(f"{n} TP ranks at {util:.0f}% utilization while XGMI carries {xgmi:.1f} GB/s: waiting on collectives")
    return "communication"


def _compute(sat: dict[str, Any], ev: list[str]) -> str | None:
    if not sat.get("server_metrics") and _f(sat, "gpu_util_mean") is None:
        return None
    c = sat["concurrency"]
    kv_max = _f(sat, "kv_cache_usage_max")
    parts = [f"no preemptions at concurrency {c}" if not _f(sat, "num_preemptions") else ""]
    if kv_max is not None:
        parts.append(f"KV cache at most {100 * kv_max:.0f}% used")
    if (cap := _f(sat, "kv_cache_tokens")) is not None:
        parts.append(f"KV cache holds {cap:.0f} tokens")
    ev.append(", ".join(p for p in parts if p))
    run = _f(sat, "running_max")
    if run is not None and 0 < run < c and ((_f(sat, "waiting_max") or 0) > 0):
        ev.append(f"batch capped at {run:.0f} running sequences (max-num-seqs) while {c} are offered")
    elif (q := _f(sat, "mean_queue_time_ms")) is not None and q >= QUEUE_MS:
        ev.append(f"mean queue time {q:.1f} ms at concurrency {c}: the engine is saturated")
    if (u := _f(sat, "gpu_util_mean")) is not None:
        ev.append(f"GPU utilization {u:.0f}%")
    if (w := _f(sat, "worker_cpu_pct")) is not None:
        ev.append(f"worker processes used {w:.0f}% CPU")
    return "compute"


def _sharing_note(sat: dict[str, Any], ev: list[str]) -> None:
    if sat.get("client_shares_cores"):
        cpus = sat.get("client_shared_cpus")
        ev.append(
            "warning: the load generator may run on the worker's cores"
            + (f" ({cpus})" if cpus else "")
            + ": a busy-polling engine there bunches every stream; pin the client elsewhere (taskset -c)"
        )


def _recommend(cause: str, ev: tuple[str, ...], knee_c: int, sat: dict[str, Any], gmu: float | None) -> Verdict:
    changes = {"max-num-seqs": str(knee_c)}
    if cause == "kv_cache":
        advice = [f"max-num-seqs={knee_c}: no more sequences than the KV cache holds, so none are preempted"]
        if gmu is None or gmu < GMU_RANGE[1]:
            new = GMU_RANGE[1] if gmu is None or gmu >= GMU_RANGE[0] else GMU_RANGE[0]
            changes["gpu-memory-utilization"] = f"{new:.2f}"
            advice.append(
                f"gpu-memory-utilization {'?' if gmu is None else f'{gmu:g}'} -> {new:.2f}: more memory for KV blocks"
            )
        advice.append("or lower max-model-len (fewer reserved tokens per sequence), or block-size 16 (less waste)")
        return Verdict(cause, ev, changes, tuple(advice), "workers", "gpu-memory-utilization")
    if cause == "client":
        return Verdict(
            cause, ev, {},
            ("the knee is the load generator's, not the server's: run the ramp on cores away from the worker "
             "(taskset -c) or from another host, then ramp again",),
            None, None,
        )  # fmt: skip
    if cause == "tp_imbalance":
        return Verdict(cause, ev, changes,
                       (f"max-num-seqs={knee_c}", "see the GPUs and TP groups panes: the slow rank holds every step "
                        "back (flag tp_imbalance); check its clocks, NUMA placement and neighbours"),
                       "groups", "tp_imbalance")  # fmt: skip
    if cause == "communication":
        return Verdict(cause, ev, changes,
                       (f"max-num-seqs={knee_c}", "see the Topology pane and the RCCL log lines (flags link_degraded, "
                        "transport_fallback): collectives over a slow path; a smaller tensor-parallel-size on "
                        "XGMI-direct GPUs may serve more"),
                       "topo", "transport_fallback")  # fmt: skip
    if cause == "power":
        return Verdict(cause, ev, changes,
                       (f"max-num-seqs={knee_c}", "see the GPUs pane: power/clocks; raise the power cap or cool the "
                        "node before tuning vLLM"),
                       "gpus", None)  # fmt: skip
    if cause == "admission":
        run = _f(sat, "running_max") or float(knee_c)
        kv = _f(sat, "kv_cache_usage_max") or KV_FULL
        # As many as the KV cache held the running ones in, up to nine tenths full, and no more than were offered.
        room = max(int(run) + 1, min(int(sat["concurrency"]), int(run * KV_FULL / max(kv, 1e-3))))
        return Verdict(cause, ev, {"max-num-seqs": str(room)},
                       (f"max-num-seqs={room}: the KV cache has room for more running sequences than the cap admits",
                        "then ramp again: the next knee shows whether compute or the KV cache limits next"),
                       "workers", "max-num-seqs")  # fmt: skip
    if cause == "compute":
        return Verdict(cause, ev, changes,
                       (f"max-num-seqs={knee_c}: more sequences only add latency once the engine is saturated",
                        "max-num-batched-tokens trades TTFT (larger) against ITL (smaller) at the same throughput"),
                       "workers", "max-num-seqs")  # fmt: skip
    return Verdict(cause, ev, changes, (f"max-num-seqs={knee_c}",), None, None)
