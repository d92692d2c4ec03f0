"""Find running SGLang servers among the host's processes (started by hand, not by amdtop).

Every GPU of an SGLang server is driven by a scheduler process titled ``sglang::scheduler[_DP<d>][_PP<p>][_TP<t>]``
(:mod:`amdtop.sglang_procs`); schedulers hang under the API server that keeps its ``python -m sglang.launch_server``
command line, directly or through ``sglang::data_parallel_controller``. GPUs come from the schedulers'
``HIP_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` (rank r on the r-th visible device, shifted by ``--base-gpu-id``),
then from the GPU process lists, then SGLang's default (rank r on device r).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from amdtop import sglang_procs
from amdtop.model import WorkerState, WorkerStatus
from amdtop.procinfo import (
    PROC,
    ancestors,
    list_pids,
    read_cmdline,
    read_environ,
    read_ppid_pgid,
    start_time,
    union_binding,
)

DEFAULT_PORT = 30000
"""``sglang.launch_server``'s port when ``--port`` is not given (``ServerArgs.port``)."""
_VISIBLE_VARS = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def _visible(env: Mapping[str, str]) -> tuple[int, ...] | None:
    for var in _VISIBLE_VARS:
        text = env.get(var, "").strip()
        if text:
            try:
                return tuple(int(part) for part in text.split(",") if part.strip())
            except ValueError:
                return None
    return None


def _lead(pid: int, proc_root: Path) -> int:
    """The first ancestor of a scheduler that is not an ``sglang::`` process: the API server (or the launcher)."""
    top = pid
    for parent in ancestors(pid, proc_root):
        top = parent
        argv = read_cmdline(parent, proc_root)
        if not argv or not argv[0].startswith(sglang_procs.TITLE):
            break
    return top


def discover_sglang(
    proc_root: Path = PROC,
    gpu_pids: Mapping[int, tuple[int, ...]] | None = None,
    among: Iterable[int] | None = None,
) -> list[WorkerStatus]:
    """Running SGLang servers, one :class:`WorkerStatus` per API server (named ``sglang-<pid>``), sorted by name."""
    schedulers: dict[int, dict[str, int]] = {}
    helpers: list[int] = []
    for pid in list_pids(proc_root) if among is None else sorted(among):
        argv = read_cmdline(pid, proc_root)
        if not argv or not argv[0].startswith(sglang_procs.TITLE):
            continue
        ranks = sglang_procs.scheduler_ranks(argv[0])
        if ranks is None:
            helpers.append(pid)
        else:
            schedulers[pid] = ranks
    servers: dict[int, dict[int, dict[str, int]]] = {}
    for pid, ranks in schedulers.items():
        servers.setdefault(_lead(pid, proc_root), {})[pid] = ranks
    out = [
        _server(lead, titled, [h for h in helpers if _lead(h, proc_root) == lead], proc_root, gpu_pids or {})
        for lead, titled in servers.items()
    ]
    return sorted(out, key=lambda w: w.name)


def _server(
    lead: int,
    titled: dict[int, dict[str, int]],
    helpers: list[int],
    proc_root: Path,
    gpu_pids: Mapping[int, tuple[int, ...]],
) -> WorkerStatus:
    api_cmd = read_cmdline(lead, proc_root)
    is_api = sglang_procs.is_sglang_argv(api_cmd)
    args = sglang_procs.args_from_argv(api_cmd) if is_api else {}
    layout = sglang_procs.layout_from_args(args, len(titled))
    ranks = sglang_procs.global_ranks(titled, layout)
    base = args.get("base-gpu-id")
    shift = int(base) if isinstance(base, str) and base.isdigit() else 0
    gpus: list[int] = []
    for rank, pid in ranks:
        visible = _visible(read_environ(pid, proc_root)) or (
            _visible(read_environ(lead, proc_root)) if is_api else None
        )
        held = gpu_pids.get(pid, ())
        if visible is not None and shift + rank < len(visible):
            gpus.append(visible[shift + rank])
        elif len(held) == 1:
            gpus.append(held[0])
        else:
            gpus.append(shift + rank)
    pids = tuple(dict.fromkeys([*([lead] if is_api else []), *helpers, *(pid for _, pid in ranks)]))
    cpus, mems = union_binding(pids, proc_root)
    port_arg = args.get("port")
    port = int(port_arg) if isinstance(port_arg, str) and port_arg.isdigit() else (DEFAULT_PORT if is_api else None)
    host = args.get("host")
    addr = "127.0.0.1" if not isinstance(host, str) or host in ("0.0.0.0", "::", "") else host
    first = ranks[0][1] if ranks else lead
    pgid = (read_ppid_pgid(first, proc_root) or (0, 0))[1]
    return WorkerStatus(
        name=f"sglang-{lead}",
        state=WorkerState.READY,
        gpus=tuple(gpus),
        port=port,
        pid=lead,
        pgid=pgid or None,
        url=None if port is None else f"http://{addr}:{port}",
        pids=pids,
        rank_pids=tuple(ranks),
        cpu_affinity=cpus,
        mems_allowed=mems,
        started_at=start_time(lead, proc_root),
        source="discovered",
        layout=layout if not layout.is_plain or layout.expert_parallel else None,
        engine_kind="sglang",
    )
