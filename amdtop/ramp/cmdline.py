"""The knee's recommendation for a server amdtop did not start: the exact change to its command line.

amdtop restarts only what it started (a retune rewrites a profile and restarts it). For a server found running, the
recommendation's changes (``max-num-seqs=8``) are shown as its own command line before and after: each flag's value
replaced where the command line has it, the flag added at its end where not, secrets masked in both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from amdtop.procinfo import read_cmdline, read_environ
from amdtop.secrets import mask_command_line

MARKER_ENV = "AMDTOP_WORKER"
"""The variable every process amdtop launches carries (:mod:`amdtop.supervisor.launchspec`)."""
NOTE = "amdtop does not restart what it did not start: restart it with this command line, or adopt it"


def found_server_argv(pids: Iterable[int]) -> tuple[str, ...] | None:
    """The command line of the server behind ``pids`` (its API server: the process listening on the ramp's port)
    when amdtop did not start it; ``None`` for an own worker, a remote URL or nothing found."""
    from amdtop.analysis.discover import discover_vllm, vllm_family

    listeners = set(pids)
    if not listeners:
        return None
    for server in discover_vllm(among=vllm_family((), servers=listeners)):
        if server.pid not in listeners and not listeners.intersection(server.pids):
            continue
        if any(MARKER_ENV in read_environ(p) for p in (server.pid or 0, *server.pids)):
            return None  # amdtop's own worker: its recommendation is a retune
        argv = read_cmdline(server.pid or 0)
        return argv or None
    return None


def _flag_at(argv: Sequence[str], key: str) -> tuple[int, int] | None:
    """``(start, end)`` of ``--key`` and its values in ``argv`` (``--key=v`` is one word), ``None`` when absent."""
    flag = f"--{key}"
    for i, word in enumerate(argv):
        if word.startswith(flag + "="):
            return i, i + 1
        if word == flag:
            end = i + 1
            while end < len(argv) and not argv[end].startswith("--"):
                end += 1
            return i, end
    return None


def apply_changes(argv: Sequence[str], changes: Mapping[str, str]) -> list[str]:
    """``argv`` with each ``--key`` set to its new value (replaced in place; appended where absent)."""
    out = list(argv)
    for key, value in changes.items():
        at = _flag_at(out, key)
        words = [f"--{key}", str(value)]
        if at is None:
            out += words
        else:
            out[at[0] : at[1]] = words
    return out


def command_line_change(argv: Sequence[str], changes: Mapping[str, str]) -> dict[str, Any] | None:
    """``{"before", "after", "note"}``: the server's command line now and with ``changes``, masked; ``None`` when
    nothing changes."""
    if not changes:
        return None
    after = apply_changes(argv, changes)
    return {"before": mask_command_line(argv), "after": mask_command_line(after), "note": NOTE}
