"""``adopt``: a profile written from a running server amdtop did not start, so that its next restart is amdtop's.

The server's own argv (``/proc/PID/cmdline`` of its API server) and environment (``/proc/PID/environ``) become one
``[[worker]]`` table whose launch (:func:`amdtop.supervisor.launchspec.serve_args`) gives the same command, model and
flags with the same values. Secrets never reach the file: a secret flag's value (``--api-key``) and a secret
variable (``HF_TOKEN``) are left out, each named in a comment with where to set it instead. Of the environment only
what the server's libraries read is kept (vLLM, SGLang, RCCL/NCCL, HIP/ROCm, PyTorch, OpenMP, Hugging Face
prefixes, and the search paths where they differ from amdtop's own); the shell's (``SSH_*``, ``TERM``...) is not.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import tomlkit

from amdtop import sglang_procs
from amdtop.errors import InputError
from amdtop.model import WorkerStatus
from amdtop.secrets import is_secret_name, mask_url
from amdtop.supervisor.launchspec import LOAD_TRACKING

ENV_PREFIXES = (
    "VLLM_", "SGLANG_", "SGL_", "NCCL_", "RCCL_", "HIP_", "HSA_", "ROCR_", "ROCM_", "AMD_", "MIOPEN_", "CUDA_", "TORCH",
    "PYTORCH_", "OMP_", "KMP_", "MKL_", "GLOO_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "UCX_",
    "MASTER_", "TRITON_",
)  # fmt: skip
"""Variables a serving stack reads: kept in the profile."""
PATH_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "VIRTUAL_ENV", "PYTHONFAULTHANDLER")
"""Kept where the server's value differs from amdtop's own (it runs with another venv or library path)."""
DROPPED_VARS = frozenset({"HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})
"""Set by amdtop from the profile's ``gpus``."""
SHORT_FLAGS = {
    "-tp": "tensor-parallel-size",
    "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size",
    "-dpl": "data-parallel-size-local",
    "-asc": "api-server-count",
    "-O": "optimization-level",
    "-q": "quantization",
    "-ep": "enable-expert-parallel",
}
"""vLLM's short spellings (``vllm serve --help=all``) -> the long flag a profile names."""
_NUMBER = re.compile(r"-?\d+(\.\d+)?(e-?\d+)?")

ArgValue = str | int | float | bool | tuple[str | int | float, ...]


@dataclass(frozen=True, slots=True)
class Adopted:
    """The profile written for a found server and what was left out of it."""

    name: str
    toml: str
    """The ``[[worker]]`` table, comments included."""
    left_out: tuple[str, ...] = field(default_factory=tuple)
    """One line per secret left out of the file (``args.api-key``, ``env.HF_TOKEN``), saying where to set it."""


def _value(word: str) -> str | int | float:
    if _NUMBER.fullmatch(word):
        return int(word) if word.lstrip("-").isdigit() else float(word)
    return word


def _is_value(word: str) -> bool:
    return not word.startswith("-") or bool(_NUMBER.fullmatch(word))


def parse_flags(words: Sequence[str], name: str) -> list[tuple[str, ArgValue]]:
    """``--key value``, ``--key=value``, ``--key v1 v2`` (a list), ``--flag`` (true) into ``(key, value)`` pairs in
    order; InputError naming a word that is no flag."""
    out: list[tuple[str, ArgValue]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word in ("-", "--"):
            raise InputError(f"{name}: argv word {word!r} is neither a flag nor a flag's value; adopt it by hand")
        flag, eq, glued = word.partition("=")
        key = SHORT_FLAGS.get(flag, flag.lstrip("-"))
        if not flag.startswith("--") and flag not in SHORT_FLAGS:
            raise InputError(f"{name}: short flag {flag!r} is not one amdtop knows; write its long form by hand")
        i += 1
        if eq:
            out.append((key, _value(glued)))
            continue
        values: list[str | int | float] = []
        while i < len(words) and _is_value(words[i]):
            values.append(_value(words[i]))
            i += 1
        out.append((key, True if not values else values[0] if len(values) == 1 else tuple(values)))
    return out


def split_argv(argv: Sequence[str], engine: str, name: str) -> tuple[list[str], str, list[tuple[str, ArgValue]]]:
    """``(command, model, flags)`` of a server's argv: vLLM's ``... vllm serve MODEL FLAGS`` (or ``--model M``), SGLang's
    ``... -m sglang.launch_server FLAGS`` (``--model-path M``)."""
    words = list(argv)
    if engine == "sglang":
        cut = next((i for i, w in enumerate(words) if w == sglang_procs.MODULE or w.endswith("launch_server.py")), None)
        if cut is None:
            raise InputError(f"{name}: {' '.join(words[:3])!r} is not SGLang's launch_server command line")
        command, flags = words[: cut + 1], parse_flags(words[cut + 1 :], name)
        model = next((str(v) for k, v in flags if k in ("model-path", "model")), None)
        flags = [(k, v) for k, v in flags if k not in ("model-path", "model")]
    else:
        cut = next((i for i, w in enumerate(words) if w == "serve"), None)
        if cut is None:
            raise InputError(
                f"{name}: {' '.join(words[:3])!r} is not a 'vllm serve' command line; only those are adopted"
            )
        command, rest = words[: cut + 1], words[cut + 1 :]
        model = rest.pop(0) if rest and not rest[0].startswith("-") else None
        flags = parse_flags(rest, name)
        model = model or next((str(v) for k, v in flags if k == "model"), None)
        flags = [(k, v) for k, v in flags if k != "model"]
    if not model:
        raise InputError(f"{name}: its command line names no model; adopt it by hand")
    return command, model, flags


def _env(env: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    keep: dict[str, str] = {}
    for key, value in sorted(env.items()):
        if key in DROPPED_VARS or key.startswith("AMDTOP_"):
            continue
        if key.startswith(ENV_PREFIXES) or (key in PATH_VARS and own.get(key) != value):
            keep[key] = value
    return keep


def adopt_profile(
    worker: WorkerStatus,
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    profile_name: str | None = None,
    own_env: Mapping[str, str] | None = None,
    cpus: int | None = None,
    node_gpus: Sequence[int] | None = None,
) -> Adopted:
    """The profile of found server ``worker`` from its API server's ``argv`` and ``env``. ``node_gpus``: the node's
    GPU indices, where known: a server on a node without GPUs (vLLM on the CPU) gets ``gpus = []``, not the devices
    discovery assumed for its ranks."""
    if not argv:
        raise InputError(f"{worker.name}: its command line cannot be read (it ended, or is another user's)")
    command, model, flags = split_argv(argv, worker.engine_kind, worker.name)
    left: list[str] = []
    args: dict[str, ArgValue] = {}
    port = worker.port or (30000 if worker.engine_kind == "sglang" else 8000)
    for key, value in flags:
        if key == "port":
            port = int(value) if isinstance(value, int) else port
            continue
        if is_secret_name(key) or _holds_url_secret(value):
            left.append(f"args.{key}: a secret, kept out of the file" + (
                "; set VLLM_API_KEY in amdtop's environment: the relaunched server reads it there"
                if key == "api-key" and worker.engine_kind == "vllm" else "; give it to the worker by hand"
            ))  # fmt: skip
            continue
        args[key] = value
    if worker.engine_kind == "vllm" and LOAD_TRACKING not in args:
        args[LOAD_TRACKING] = False  # amdtop turns it on by default: off keeps the server's own argv
    # Not the found name (vllm-<pid>): the profile and the running server would share it until the server is
    # stopped, and a pid names one run only. The engine and port name the server as its clients know it.
    name = profile_name or f"{worker.engine_kind}-{port}"
    kept = _env(env, os.environ if own_env is None else own_env)
    for key in [k for k, v in kept.items() if is_secret_name(k) or _holds_url_secret(v)]:
        del kept[key]
        left.append(f"env.{key}: a secret, kept out of the file; set it in amdtop's environment (it is inherited)")
    doc = tomlkit.document()
    table = tomlkit.table()
    table.add(tomlkit.comment(f"adopted from {worker.name} (pid {worker.pid}): its argv and environment"))
    table["name"] = name
    table["engine"] = worker.engine_kind
    table["model"] = model
    table["gpus"] = [g for g in worker.gpus if node_gpus is None or g in node_gpus]
    table["numa_node"] = _numa(worker, cpus)
    table["port"] = port
    if worker.engine_kind == "vllm" and "host" not in args:
        table["host"] = "0.0.0.0"
        table["host"].comment("vllm serve's default (every interface), as the running server")
    table["command"] = command
    for line in left:
        table.add(tomlkit.comment(line))
    argt = tomlkit.table()
    for key, value in args.items():
        argt[key] = list(value) if isinstance(value, tuple) else value
    table["args"] = argt
    envt = tomlkit.table()
    for key, value in kept.items():
        envt[key] = value
    table["env"] = envt
    aot = tomlkit.aot()
    aot.append(table)
    doc["worker"] = aot
    return Adopted(name, tomlkit.dumps(doc), tuple(left))


def _holds_url_secret(value: object) -> bool:
    """A value with a URL's password or token in it (``https://user:pw@host``): a secret too."""
    words = value if isinstance(value, tuple) else (value,)
    return any(isinstance(w, str) and mask_url(w) != w for w in words)


def _numa(worker: WorkerStatus, cpus: int | None) -> int | str:
    """The node the server was pinned to (one memory node and fewer CPUs than the host has), else ``"none"``."""
    total = cpus if cpus is not None else (os.cpu_count() or 0)
    if len(worker.mems_allowed) == 1 and worker.cpu_affinity and len(worker.cpu_affinity) < total:
        return worker.mems_allowed[0]
    return "none"
