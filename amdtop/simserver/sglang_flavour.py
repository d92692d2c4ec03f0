"""The simulated server as an SGLang server: its ``/metrics`` names and labels, its process titles, its routes.

Built, not captured: the names and label sets follow SGLang's collector (sglang 0.5.23
``srt/metrics/collector.py``; scheduler series carry ``engine_type``, ``model_name``, ``pp_rank``, ``tp_rank`` and,
with data parallelism, ``dp_rank``; the tokenizer manager's carry ``model_name`` only), the titles SGLang's
``setproctitle`` calls (``sglang::scheduler[_DP<d>][_TP<t>]``, ``sglang::detokenizer``). Real captured pages are
served verbatim with ``--metrics-page`` (the stand-in the tests hold amdtop against).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amdtop.simserver.engine import SimConfig, SimEngine

_CHILD = """
import contextlib, os, signal, sys, time, uuid
parent = os.getppid()
path = None
if sys.argv[1:] == ["shm"]:
    path = f"/dev/shm/sgl_shm_sim_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 4096)
def bye(*_):
    if path:
        with contextlib.suppress(OSError):
            os.unlink(path)
    os._exit(0)
signal.signal(signal.SIGTERM, bye)
while os.getppid() == parent:
    time.sleep(0.5)
bye()
"""
"""A rank's body: it lives while the server does (SGLang's ``kill_itself_when_parent_died``). A scheduler holds a
shared-memory segment named as SGLang names its own (``sgl_shm_<kind>_<pid>_<hex>``), removed on SIGTERM and left
behind by SIGKILL, as a crashed SGLang leaves its segments."""


def titles(tp: int, dp: int) -> list[str]:
    """The process titles of an SGLang server of ``dp`` replicas of ``tp`` ranks (SGLang's scheduler prefix: ``DP``
    only with data parallelism, ``TP`` only above one rank), then its detokenizer."""
    out = []
    for d in range(dp):
        for t in range(tp):
            out.append("sglang::scheduler" + (f"_DP{d}" if dp > 1 else "") + (f"_TP{t}" if tp > 1 else ""))
    return [*out, "sglang::detokenizer"]


def spawn_ranks(cfg: SimConfig) -> list[subprocess.Popen[bytes]]:
    """Start one titled process per rank and the detokenizer (argv[0] is the title, as setproctitle leaves it)."""
    return [
        subprocess.Popen(
            [title, "-c", _CHILD, *(["shm"] if title.startswith("sglang::scheduler") else [])],
            executable=sys.executable,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for title in titles(cfg.tp, cfg.dp)
    ]


def render(engines: Sequence[SimEngine]) -> str:
    """The whole ``/metrics`` page with SGLang's names: scheduler families per DP rank, tokenizer families summed."""
    cfg = engines[0].cfg
    dp = len(engines)
    sched = [
        f'engine_type="unified",model_name="{cfg.model}",pp_rank="0",tp_rank="{i * cfg.tp}"'
        + (f',dp_rank="{i}"' if dp > 1 else "")
        for i in range(dp)
    ]
    tok = f'model_name="{cfg.model}"'
    out: list[str] = []

    def gauge(name: str, help_: str, values: Sequence[float]) -> None:
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} gauge"])
        out.extend(f"{name}{{{lab}}} {float(v)}" for lab, v in zip(sched, values, strict=True))

    def counter(name: str, help_: str, value: float) -> None:
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name}{{{tok}}} {float(value)}"])

    gauge("sglang:num_running_reqs", "The number of running requests.", [len(e.running) for e in engines])
    gauge("sglang:num_used_tokens", "The number of used tokens.",
          [round(e.kv_usage() * cfg.kv_cache_tokens) for e in engines])  # fmt: skip
    gauge("sglang:token_usage", "The token usage.", [e.kv_usage() for e in engines])
    gauge("sglang:gen_throughput", "The generation throughput (token/s).",
          [len(e.running) * cfg.tokens_per_s for e in engines])  # fmt: skip
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", [len(e.waiting) for e in engines])
    gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", [0.0 for _ in engines])
    gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
          [cfg.kv_cache_tokens for _ in engines])  # fmt: skip
    out.extend(["# HELP sglang:queue_time_seconds Histogram of queueing time in seconds.",
                "# TYPE sglang:queue_time_seconds histogram"])  # fmt: skip
    for lab, e in zip(sched, engines, strict=True):
        out.extend(e.queue.lines("sglang:queue_time_seconds", lab, header=False))
    counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
            sum(e.prompt_tokens_total for e in engines))  # fmt: skip
    counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
            sum(e.generation_tokens_total for e in engines))  # fmt: skip
    counter("sglang:num_requests_total", "Number of requests processed.",
            sum(sum(e.success.values()) for e in engines))  # fmt: skip
    for attr, name, help_ in (
        ("ttft", "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
        ("itl", "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
        ("e2e", "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"),
    ):
        hists = [getattr(e, attr) for e in engines]
        n = sum(h.n for h in hists)
        total = sum(h.total for h in hists)
        out.extend([f"# HELP {name} {help_}", f"# TYPE {name} histogram"])
        out.append(f"{name}_sum{{{tok}}} {total}")
        for k, bound in enumerate(hists[0].bounds):
            value = sum(sum(h.counts[: k + 1]) for h in hists)
            out.append(f'{name}_bucket{{le="{float(bound)}",{tok}}} {float(value)}')
        out.append(f'{name}_bucket{{le="+Inf",{tok}}} {float(n)}')
        out.append(f"{name}_count{{{tok}}} {float(n)}")
    return "\n".join(out) + "\n"


def model_info(cfg: SimConfig) -> dict[str, object]:
    """``GET /get_model_info`` as SGLang answers it."""
    return {"model_path": cfg.model, "tokenizer_path": cfg.model, "is_generation": True}
