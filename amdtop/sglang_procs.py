"""SGLang's processes and command line: the titles its processes take, the ranks they name, the layout its flags give.

``python -m sglang.launch_server`` (or ``sglang serve``) keeps its command line in the API server; every other process
retitles itself with setproctitle (sglang 0.5.23 ``srt/managers/scheduler.py``, ``detokenizer_manager.py``,
``data_parallel_controller.py``):

- ``sglang::scheduler`` + ``_DP<d>`` (a DP rank), ``_PP<p>`` (pp > 1), ``_ATTN_CP<c>``, ``_MOE_DP<m>``, ``_TP<t>``
  (tp > 1), ``_EP<e>`` (ep > 1): one per GPU, the rank that drives it;
- ``sglang::detokenizer``, ``sglang::data_parallel_controller``, ``sglang::tokenizer_worker:<pid>``.

Data parallelism comes in two kinds. ``--dp-size N`` alone runs N replicas of ``tp x pp`` GPUs each (N x tp x pp
GPUs, ``DP<d>_TP<t>`` with t local). ``--dp-size N --enable-dp-attention`` (``--attn-dp-size N`` from 0.5.2x) splits
the attention of one TP group into N schedulers: tp x pp GPUs in all, one TP group, ``DP<d>_TP<t>`` with t global.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence

from amdtop.layout import WorkerLayout

TITLE = "sglang::"
SCHEDULER = "sglang::scheduler"
HELPERS = ("sglang::detokenizer", "sglang::data_parallel_controller", "sglang::tokenizer_worker")
_PART = re.compile(r"_(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)")
MODULE = "sglang.launch_server"

_ALIASES = {
    "--tp-size": "tp-size", "--tensor-parallel-size": "tp-size", "--tp": "tp-size",
    "--dp-size": "dp-size", "--data-parallel-size": "dp-size", "--dp": "dp-size",
    "--pp-size": "pp-size", "--pipeline-parallel-size": "pp-size",
    "--ep-size": "ep-size", "--expert-parallel-size": "ep-size", "--ep": "ep-size",
    "--attn-dp-size": "attn-dp-size", "--attention-data-parallel-size": "attn-dp-size",
    "--model-path": "model-path", "--model": "model-path",
    "--port": "port", "--host": "host", "--base-gpu-id": "base-gpu-id",
}  # fmt: skip
"""SGLang's parallel and address flags under every spelling its parser takes (``fields/parallel.py``), to one key."""
_BARE = {"--enable-dp-attention": "enable-dp-attention", "--enable-metrics": "enable-metrics"}


def canonical_key(key: str) -> str:
    """A flag name without dashes (``tensor-parallel-size``, ``tp``) as :func:`args_from_argv` keys it (``tp-size``)."""
    dashed = "--" + key.replace("_", "-")
    return _ALIASES.get(dashed) or _BARE.get(dashed) or key


def scheduler_ranks(title: str) -> dict[str, int] | None:
    """``{"DP": 1, "TP": 3}`` from a scheduler's title (``sglang::scheduler_DP1_TP3``); ``{}`` for a plain
    ``sglang::scheduler`` (tp 1); ``None`` for any other process."""
    if not title.startswith(SCHEDULER):
        return None
    rest = title[len(SCHEDULER) :].split(" ", 1)[0]
    if rest and not rest.startswith("_"):
        return None  # sglang::scheduler_x... only: not some other sglang:: title sharing the prefix
    return {kind: int(num) for kind, num in _PART.findall(rest)}


def is_sglang_argv(argv: Sequence[str]) -> bool:
    """An SGLang server's command line: ``python -m sglang.launch_server ...`` or ``sglang serve ...``."""
    if not argv:
        return False
    if MODULE in argv[:4] or any(a.endswith("sglang/launch_server.py") for a in argv[:3]):
        return True
    return os.path.basename(argv[0]) == "sglang" and len(argv) > 1 and argv[1] == "serve"


def args_from_argv(argv: Sequence[str]) -> dict[str, object]:
    """The parallel, model and address flags of an SGLang command line (``--flag V``, ``--flag=V``), by one key each."""
    out: dict[str, object] = {}
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name in _BARE:
            out[_BARE[name]] = True
        elif name in _ALIASES:
            if eq:
                out[_ALIASES[name]] = value
            elif i + 1 < len(argv):
                out[_ALIASES[name]] = argv[i + 1]
                i += 1
        i += 1
    return out


def _int(args: Mapping[str, object], key: str) -> int | None:
    value = args.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def attention_dp(args: Mapping[str, object]) -> int:
    """Schedulers sharing one TP group (DP attention): ``attn-dp-size``, or ``dp-size`` with ``enable-dp-attention``;
    1 without."""
    attn = _int(args, "attn-dp-size")
    if attn:
        return attn
    if args.get("enable-dp-attention") in (True, "true"):
        return _int(args, "dp-size") or 1
    return 1


def layout_from_args(args: Mapping[str, object], n_gpus: int) -> WorkerLayout:
    """The layout SGLang's flags give (keys as :func:`args_from_argv` or a profile's ``[worker.args]`` name them).

    Replicas (``dp-size`` without DP attention) are TP groups of their own; DP attention is one TP group of ``tp-size``
    GPUs (its schedulers are engines of the metrics, not GPU groups). TP defaults to the GPUs per replica."""
    pp = _int(args, "pp-size") or 1
    dp = 1 if attention_dp(args) > 1 else (_int(args, "dp-size") or 1)
    tp = _int(args, "tp-size")
    if tp is None:
        tp = max(1, n_gpus // max(1, dp * pp)) if n_gpus else 1
    ep = _int(args, "ep-size") or 1
    return WorkerLayout(dp=dp, tp=tp, pp=pp, expert_parallel=ep > 1, api_servers=None)


def global_ranks(titled: Mapping[int, dict[str, int]], layout: WorkerLayout | None = None) -> list[tuple[int, int]]:
    """(global rank, pid) of schedulers from their title ranks: the position of the rank's GPU in the worker's list,
    ``(dp * pp + pp_rank) * tp + tp_rank`` for replicas, ``pp_rank * tp + tp_rank`` under DP attention, where the TP
    rank in the title is already global. DP attention shows in the titles themselves: every scheduler has its own TP
    rank across DP ranks (replicas repeat theirs). Sizes the ``layout`` does not give are the highest rank seen + 1."""
    tps = [r.get("TP", 0) for r in titled.values()]
    attn = len({r.get("DP", 0) for r in titled.values()}) > 1 and len(set(tps)) == len(tps)
    tp = layout.tp if layout is not None and not attn else max(tps, default=0) + 1
    pp = layout.pp if layout is not None else max((r.get("PP", 0) for r in titled.values()), default=0) + 1
    out = []
    for pid, r in titled.items():
        dp = 0 if attn else r.get("DP", 0)
        out.append(((dp * pp + r.get("PP", 0)) * tp + r.get("TP", 0), pid))
    return sorted(out)
