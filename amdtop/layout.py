"""A worker's parallel layout: data-parallel (DP) replicas, each a tensor-parallel (TP) group of GPUs.

One ``vllm serve`` with ``--data-parallel-size D --tensor-parallel-size T`` (and ``--pipeline-parallel-size P``) runs
D engines (``EngineCore_DP<d>``), each driving ``T * P`` GPU workers. What must move in lock-step is one TP group:
imbalance, NUMA locality, stall verdicts and the ramp's evidence are judged per :class:`TpGroupLayout`; DP replicas are
load-balanced independently, so a difference between them is informational, never a TP fault.

Rank-to-device order (vLLM 0.32.0 ``vllm/v1/engine/utils.py``, ``get_physical_gpu_ids_for_local_dp_rank``; earlier
V1 releases did the same in ``CoreEngineProcManager`` through ``get_device_indices``): local DP rank ``d`` takes the
visible devices ``[d * world_size, d * world_size + world_size)`` with ``world_size = T * P``, and inside one engine
rank ``r = pp_rank * T + tp_rank`` uses the ``r``-th of those (``parallel_state.initialize_model_parallel`` reshapes
the ranks ``(-1, D, P, PCP, T)``: TP is the innermost dimension). So the TP groups are consecutive runs of ``T`` devices of
the worker's device list, DP-major: DP=2 x TP=4 on GPUs 0-7 gives ``[0, 1, 2, 3]`` (DP 0) and ``[4, 5, 6, 7]`` (DP 1).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TpGroupLayout:
    """One tensor-parallel group of a worker: the GPUs that all-reduce together, in TP rank order."""

    worker: str
    """Worker (one ``vllm serve``) the group belongs to."""
    dp_rank: int
    """Data-parallel rank of the engine that drives the group (``engine`` label of its metrics)."""
    gpus: tuple[int, ...]
    """Devices of the group in TP rank order."""
    pp_rank: int = 0
    """Pipeline stage within the DP rank (0 without pipeline parallelism)."""
    first_rank: int = 0
    """Position of the group's first GPU in the worker's device list (its global rank)."""

    @property
    def label(self) -> str:
        """``worker`` alone for a plain TP worker, ``worker/dp1`` (``worker/dp1.pp1``) for a replica of a DP one."""
        return self.worker if (self.dp_rank, self.pp_rank, self.first_rank) == (0, 0, 0) else self.suffixed

    @property
    def suffixed(self) -> str:
        """Always the ``worker/dp<d>`` form (what a DP worker's groups are called, its first included)."""
        return f"{self.worker}/dp{self.dp_rank}" + (f".pp{self.pp_rank}" if self.pp_rank else "")


@dataclass(frozen=True, slots=True)
class WorkerLayout:
    """How one ``vllm serve`` spreads over its devices."""

    dp: int = 1
    """``--data-parallel-size``: engines (replicas)."""
    tp: int = 1
    """``--tensor-parallel-size``: GPUs per TP group."""
    pp: int = 1
    """``--pipeline-parallel-size``: pipeline stages per replica."""
    expert_parallel: bool = False
    """``--enable-expert-parallel``: MoE experts sharded over DP x TP (idle DP ranks then run dummy forward passes)."""
    api_servers: int | None = None
    """``--api-server-count`` (``None``: vLLM's default, equal to ``dp``); above 1 drops ``process_*`` metrics."""

    @property
    def world_size(self) -> int:
        """GPUs of one replica (``tp * pp``)."""
        return self.tp * self.pp

    @property
    def gpus_needed(self) -> int:
        """Devices the whole worker drives (``dp * tp * pp``)."""
        return self.dp * self.tp * self.pp

    @property
    def busy_when_idle(self) -> bool:
        """The DP ranks of a MoE model run dummy forward passes while any rank has requests, so the experts'
        collectives stay in step (vLLM 0.32.0 ``vllm/v1/engine/core.py``: ``DPEngineCoreProc``, used when
        ``data_parallel and model_config.is_moe``; its ``run_busy_loop`` calls ``execute_dummy_batch``): a busy GPU with
        no requests of its own is by design there, not a stall. amdtop cannot read ``is_moe`` from the command line;
        ``--enable-expert-parallel`` says the model is MoE."""
        return self.dp > 1 and self.expert_parallel

    @property
    def is_plain(self) -> bool:
        """One engine, one TP group: the layout amdtop always assumed."""
        return self.dp == 1 and self.pp == 1

    def groups(self, worker: str, gpus: tuple[int, ...]) -> tuple[TpGroupLayout, ...]:
        """The TP groups of ``worker`` on ``gpus`` (device list in global rank order); one group of every GPU when the
        list does not match the layout (a discovered server whose devices are only partly known)."""
        if not gpus:
            return ()
        if len(gpus) != self.gpus_needed or self.is_plain:
            return (TpGroupLayout(worker, 0, tuple(gpus)),)
        out: list[TpGroupLayout] = []
        for start in range(0, len(gpus), self.tp):
            stage = start // self.tp
            out.append(
                TpGroupLayout(worker, stage // self.pp, tuple(gpus[start : start + self.tp]), stage % self.pp, start)
            )
        return tuple(out)

    def summary(self) -> str:
        """``DP2 x TP4`` (``+EP`` with expert parallel), ``TP4`` for a plain worker."""
        text = f"TP{self.tp}" if self.dp == 1 else f"DP{self.dp}xTP{self.tp}"
        if self.pp > 1:
            text += f"xPP{self.pp}"
        return text + ("+EP" if self.expert_parallel else "")


def _int_arg(args: Mapping[str, object], *keys: str) -> int | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value)
    return None


def layout_from_args(args: Mapping[str, object], n_gpus: int) -> WorkerLayout:
    """The layout ``vllm serve`` flags (without dashes) give; TP defaults to the GPUs left per DP replica.

    ``args`` maps flag names (``data-parallel-size``) or their short forms (``dp``, ``tp``, ``pp``) to values; a bare
    ``enable-expert-parallel`` is ``True``.
    """
    dp = _int_arg(args, "data-parallel-size", "dp") or 1
    pp = _int_arg(args, "pipeline-parallel-size", "pp") or 1
    tp = _int_arg(args, "tensor-parallel-size", "tp")
    if tp is None:
        tp = max(1, n_gpus // max(1, dp * pp)) if n_gpus else 1
    ep = args.get("enable-expert-parallel", args.get("ep"))
    api = _int_arg(args, "api-server-count", "asc")
    return WorkerLayout(dp=dp, tp=tp, pp=pp, expert_parallel=ep is True or ep == "true", api_servers=api)


_SHORT = {"-dp": "data-parallel-size", "-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size",
          "-ep": "enable-expert-parallel", "-asc": "api-server-count"}  # fmt: skip
_BARE = {"enable-expert-parallel"}


def args_from_argv(argv: tuple[str, ...]) -> dict[str, object]:
    """The parallel flags of a ``vllm serve`` command line (``--flag V``, ``--flag=V``, ``-tp V``), dashes dropped."""
    out: dict[str, object] = {}
    wanted = {*_SHORT.values()}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        key = _SHORT.get(name) or (name[2:] if name.startswith("--") else None)
        if key is not None and key.replace("_", "-") in wanted:
            key = key.replace("_", "-")
            if key in _BARE:
                out[key] = True
            elif eq:
                out[key] = value
            elif i + 1 < len(argv):
                out[key] = argv[i + 1]
                i += 1
        elif name == "--no-enable-expert-parallel":
            out["enable-expert-parallel"] = False
        i += 1
    return out


_RANK_PART = re.compile(r"_(DP|PP|PCP|TP|DCP|EP)(\d+)")


def title_ranks(title: str, prefix: str = "VLLM") -> dict[str, int] | None:
    """``{"DP": 1, "TP": 3}`` from a GPU worker's process title (``VLLM::Worker_DP1_TP3``); ``{}`` for a plain
    ``VLLM::Worker``; ``None`` for any other process. vLLM adds ``_DP<r>`` (dp > 1), ``_PP<r>`` (pp > 1), ``_PCP``,
    ``_TP<r>`` (tp > 1), ``_DCP``, ``_EP`` in that order (``vllm/v1/executor/multiproc_executor.py``)."""
    head = f"{prefix}::Worker"
    if not title.startswith(head):
        return None
    return {kind: int(num) for kind, num in _RANK_PART.findall(title[len(head) :].split(" ", 1)[0])}


def global_ranks(titled: Mapping[int, dict[str, int]], layout: WorkerLayout | None = None) -> list[tuple[int, int]]:
    """(global rank, pid) of GPU workers from their title ranks: ``(dp * pp + pp_rank) * tp + tp_rank``, the position
    of the rank's device in the worker's device list. Sizes the ``layout`` does not give are the highest rank seen + 1."""

    def size(kind: str, given: int | None) -> int:
        return given or (max((r.get(kind, 0) for r in titled.values()), default=0) + 1)

    tp = size("TP", layout.tp if layout else None)
    pp = size("PP", layout.pp if layout else None)
    out = [((r.get("DP", 0) * pp + r.get("PP", 0)) * tp + r.get("TP", 0), pid) for pid, r in titled.items()]
    return sorted(out)
