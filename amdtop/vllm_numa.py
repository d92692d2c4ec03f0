"""vLLM's own NUMA binding (``--numa-bind``): amdtop neither pins on top of it nor flags the API server it leaves free.

vLLM added ``--numa-bind`` / ``--numa-bind-nodes N...`` / ``--numa-bind-cpus L...`` (``ParallelConfig.numa_bind`` in
``vllm/config/parallel.py``, PR #38635; ``--no-numa-bind`` turns it off; nodes and cpus require it). With it vLLM wraps
EngineCore and every GPU worker in ``numactl`` itself (``vllm/utils/numa_wrapper.sh``), one node per rank, and skips
its own binding when the process's affinity is already constrained, so an outer ``numactl`` from amdtop would silently
win. The API server stays unbound by design; only the ``VLLM::`` processes carry the binding worth checking.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from amdtop.model import WorkerStatus
from amdtop.procinfo import PROC, read_cmdline

_ON = "numa-bind"
_OFF = "no-numa-bind"
VLLM_TITLE = "VLLM::"
"""Process-title prefix of EngineCore and the GPU workers (``VLLM_PROCESS_NAME_PREFIX``, default ``VLLM``)."""


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("", "1", "true", "yes", "on")
    return bool(value)


def uses_vllm_numa_binding(args: Sequence[str] | Mapping[str, object] | Iterable[tuple[str, object]]) -> bool:
    """Whether vLLM's own NUMA binding is on in ``args``.

    ``args`` is an argv (``["vllm", "serve", m, "--numa-bind"]``), a profile's ``[worker.args]`` mapping or its
    ``(key, value)`` pairs (``("numa-bind", True)``). The last of ``--numa-bind`` / ``--no-numa-bind`` wins, as argparse's
    ``BooleanOptionalAction`` does.
    """
    on = False
    if isinstance(args, Mapping):
        pairs: Iterable[tuple[str, object]] = args.items()
    elif isinstance(args, Sequence) and all(isinstance(a, str) for a in args):
        for tok in args:
            assert isinstance(tok, str)
            name = tok.split("=", 1)[0]
            if name == f"--{_ON}":
                on = True
            elif name == f"--{_OFF}":
                on = False
        return on
    else:
        pairs = args  # type: ignore[assignment]
    for key, value in pairs:
        k = str(key).lstrip("-").replace("_", "-")
        if k == _ON:
            on = _truthy(value)
        elif k == _OFF:
            on = not _truthy(value)
    return on


def vllm_bound_view(worker: WorkerStatus, proc_root: Path = PROC) -> WorkerStatus:
    """``worker`` as the NUMA check should read it: when its API server runs with ``--numa-bind``, only the
    ``VLLM::`` processes (EngineCore, TP workers), whose binding vLLM set, are kept; otherwise ``worker`` unchanged.
    """
    if worker.simulated or worker.pid is None:
        return worker
    if not uses_vllm_numa_binding(list(read_cmdline(worker.pid, proc_root))):
        return worker
    candidates = dict.fromkeys([*worker.pids, *(pid for _, pid in worker.rank_pids)])
    bound = tuple(p for p in candidates if (cmd := read_cmdline(p, proc_root)) and cmd[0].startswith(VLLM_TITLE))
    if not bound:
        return worker  # the engine is not up yet: nothing better to read than the launcher
    return dataclasses.replace(worker, pid=None, pids=bound)
