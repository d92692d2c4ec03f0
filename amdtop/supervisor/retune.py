"""Retune: apply ``KEY=VALUE`` changes to one worker's table in the tomlkit document (comments and order kept)."""

from __future__ import annotations

import math
import os
import stat
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amdtop.errors import AmdtopError, InputError, os_reason
from amdtop.secrets import mask_env

if TYPE_CHECKING:
    import tomlkit

    from amdtop.supervisor.profiles import Profile

from amdtop.supervisor.parallel_args import MAX_API_SERVERS, check_parallel_args

ARG_KEYS: dict[str, type] = {
    "max-num-seqs": int,
    "gpu-memory-utilization": float,
    "block-size": int,
    "max-model-len": int,
    "max-num-batched-tokens": int,
    "data-parallel-size": int,
    "api-server-count": int,
    "enable-expert-parallel": bool,
    # Switches the audit offers to turn off (false drops the flag from the argv).
    "enforce-eager": bool,
    "disable-custom-all-reduce": bool,
}
"""Retunable ``vllm serve`` flags and their value types."""
SGLANG_ARG_KEYS: dict[str, type] = {
    "mem-fraction-static": float,
    "max-running-requests": int,
    "chunked-prefill-size": int,
    "cuda-graph-max-bs": int,
}
"""Retunable ``sglang.launch_server`` flags (sglang 0.5.23 ``srt/arg_groups/fields/schedule.py``, ``exec_.py``)."""
ENGINE_ARG_KEYS: dict[str, frozenset[str]] = {"vllm": frozenset(ARG_KEYS), "sglang": frozenset(SGLANG_ARG_KEYS)}
"""Which flags each engine takes: a retune of the other engine's flag would start a server that refuses it."""
ARG_KEYS = {**ARG_KEYS, **SGLANG_ARG_KEYS}
RETUNE_KEYS = (*ARG_KEYS, "numa_node", "env.NAME")
FOREIGN_FLAGS: dict[str, dict[str, str]] = {
    "sglang": {
        "max-num-seqs": "max-running-requests",
        "gpu-memory-utilization": "mem-fraction-static",
        "max-model-len": "context-length",
        "block-size": "page-size",
        "max-num-batched-tokens": "chunked-prefill-size",
        "enforce-eager": "disable-cuda-graph",
        "api-server-count": "",
        "enable-expert-parallel": "expert-parallel-size",
    },
    "vllm": {
        "mem-fraction-static": "gpu-memory-utilization",
        "max-running-requests": "max-num-seqs",
        "chunked-prefill-size": "max-num-batched-tokens",
        "cuda-graph-max-bs": "",
    },
}
"""Per engine, the other engine's flags its own server refuses, each with this engine's nearest flag ("" where it has
none): SGLang's parser (sglang ``docs/advanced_features/server_arguments.md``: ``--mem-fraction-static``,
``--max-running-requests``, ``--context-length``, ``--page-size``, ``--chunked-prefill-size``, ``--disable-cuda-graph``,
``--expert-parallel-size``) has none of vLLM's names here, and ``vllm serve`` none of SGLang's. Flags both take
(``data-parallel-size``, ``disable-custom-all-reduce``) are not listed."""


def retune_keys(engine: str | None = None) -> tuple[str, ...]:
    """The retune keys of a worker running ``engine`` (every engine's when ``None``)."""
    if engine is None:
        return RETUNE_KEYS
    own = ENGINE_ARG_KEYS.get(engine, ENGINE_ARG_KEYS["vllm"])
    return (*(k for k in ARG_KEYS if k in own), "numa_node", "env.NAME")


def check_foreign_flag(name: str, engine: str, key: str) -> None:
    """InputError when ``[worker.args]`` flag ``key`` belongs to the other engine only (``max-num-seqs`` on an SGLang
    worker): its server would refuse it at start, after amdtop had launched it."""
    canon = key.replace("_", "-")
    foreign = FOREIGN_FLAGS.get(engine, {})
    if canon not in foreign:
        return
    other = "an SGLang" if engine == "vllm" else "a vLLM"
    nearest = foreign[canon]
    fix = f"use {nearest}" if nearest else "remove it"
    raise InputError(
        f'worker[{name}].args.{key}: {other} flag, but this worker runs engine = "{engine}", whose server refuses '
        f"it; {fix}"
    )
INT_LIMITS: dict[str, tuple[int, int]] = {
    "max-running-requests": (1, 65536),
    "chunked-prefill-size": (-1, 2**31 - 1),
    "cuda-graph-max-bs": (1, 4096),
    "max-num-seqs": (1, 65536),
    "max-model-len": (1, 2**31 - 1),
    "block-size": (1, 4096),
    "max-num-batched-tokens": (1, 2**31 - 1),
    "data-parallel-size": (1, 4096),
    "api-server-count": (1, MAX_API_SERVERS),
}
"""Sane ranges: vLLM keeps these in int32 tensors and sizes; far beyond them is a typo, not a setting (and a value
past int64 is not even a TOML integer)."""


def parse_changes(words: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` words (``--max-num-seqs=64`` too: leading dashes are dropped) to a mapping, for the CLI, the
    retune dialog and command mode alike.

    An empty value is kept only for ``env.NAME=`` (it removes the variable); InputError names the word otherwise,
    and when there is nothing to change.
    """
    out: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        key, value = key.strip().lstrip("-"), value.strip()
        if not sep or not key:
            raise InputError(f"{word!r} is not KEY=VALUE")
        if not value and not key.startswith("env."):
            raise InputError(f"{word!r} has no value; e.g. {key}=64 (only env.NAME= may be empty: it unsets NAME)")
        out[key] = value
    if not out:
        raise InputError("nothing to change; e.g. max-num-seqs=64")
    return out


def retune_words(profile: Profile) -> tuple[str, ...]:
    """The retunable part of ``profile`` as ``KEY=VALUE`` words (what the retune dialog starts from): its vLLM flags
    among :data:`ARG_KEYS`, its NUMA node and its environment, secret values masked."""
    words = [f"{key}={value}" for key, value in profile.args if key in ARG_KEYS]
    words.append(f"numa_node={profile.numa_node}")
    words += [f"env.{name}={value}" for name, value in mask_env(dict(profile.env)).items()]
    return tuple(words)


def changed_words(current: Iterable[str], typed: Mapping[str, str]) -> dict[str, str]:
    """What the user changed in a dialog that started from ``current`` words: keys whose value differs (a masked
    secret left as it was is never written back), and ``env.NAME=`` for an env word the user deleted."""
    before = parse_changes(current) if current else {}
    out = {k: v for k, v in typed.items() if before.get(k) != v}
    out.update({k: "" for k in before if k.startswith("env.") and k not in typed})
    return out


def check_arg_value(name: str, key: str, value: object, text: str | None = None) -> None:
    """InputError unless ``value`` of retunable flag ``key`` is finite and in its range (other keys pass): the same
    rule for a retune and for a profile file as it loads."""
    if key not in ARG_KEYS or isinstance(value, (bool, str)) or not isinstance(value, (int, float)):
        return
    field = f"worker[{name}].args.{key}"
    shown = text if text is not None else repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{field}: {shown!r} is not a finite number; e.g. {key}=0.9")
    if key in ("gpu-memory-utilization", "mem-fraction-static"):
        if not 0.0 < value <= 1.0:
            raise InputError(f"{field}: {shown} is outside (0, 1]; e.g. {key}=0.9")
        return
    if key == "chunked-prefill-size" and value == 0:
        # SGLang: "Setting this to -1 means disabling chunked prefill"; 0 is neither a chunk nor that
        raise InputError(f"{field}: 0 is not a chunk size; give a token count (e.g. 8192) or -1 to disable it")
    lo, hi = INT_LIMITS[key]
    if not lo <= value <= hi:
        raise InputError(f"{field}: {shown} is outside {lo}..{hi}; e.g. {key}={16 if key == 'block-size' else 64}")
    # vLLM 0.33 takes any block_size > 0 (CacheConfig), but its attention backends need powers of two.
    if key == "block-size" and int(value) & (int(value) - 1):
        raise InputError(f"{field}: {shown} is not a power of two; e.g. block-size=16")


def check_engine_key(name: str, engine: str, key: str) -> None:
    """InputError when flag ``key`` is the other engine's (``mem-fraction-static`` on a vLLM worker...)."""
    if key in ARG_KEYS and key not in ENGINE_ARG_KEYS.get(engine, ENGINE_ARG_KEYS["vllm"]):
        nearest = FOREIGN_FLAGS.get(engine, {}).get(key)
        hint = f" (its nearest: {nearest})" if nearest and nearest in ARG_KEYS else ""
        own = ", ".join(retune_keys(engine))
        raise InputError(f"worker[{name}].{key}: not a flag of {engine}, which this worker runs{hint}; use one of {own}")


def _worker_table(doc: tomlkit.TOMLDocument, name: str) -> Any:
    for tbl in doc.get("worker", []):
        if tbl.get("name") == name:
            return tbl
    raise InputError(f"worker[{name}]: no such worker in the config; check the name with 'amdtop workers status'")


def _parse_value(name: str, key: str, text: str) -> int | float | str:
    field = f"worker[{name}].{'args.' if key in ARG_KEYS else ''}{key}"
    if key in ARG_KEYS and ARG_KEYS[key] is bool:
        if text.strip().lower() in ("true", "1", "yes", "on"):
            return True
        if text.strip().lower() in ("false", "0", "no", "off"):
            return False
        raise InputError(f"{field}: {text!r} is not true or false; e.g. {key}=false")
    if key in ARG_KEYS:
        kind = ARG_KEYS[key]
        if kind is bool:
            if text.lower() not in ("true", "false"):
                raise InputError(f"{field}: {text!r} is not true or false; e.g. {key}=true")
            return text.lower() == "true"
        try:
            value: int | float = kind(text)
        except ValueError:
            raise InputError(
                f"{field}: {text!r} is not {'an integer' if kind is int else 'a number'}; e.g. {key}=64"
            ) from None
        check_arg_value(name, key, value, text)
        return value
    if key == "numa_node":
        if text in ("auto", "none"):
            return text
        try:
            node = int(text)
        except ValueError:
            raise InputError(f'{field}: {text!r} is not a node; use an integer, "auto" or "none"') from None
        if not 0 <= node < 4096:
            raise InputError(f'{field}: {text} is not a NUMA node number; use 0..4095, "auto" or "none"')
        return node
    return text


def normalise_key(name: str, key: str, engine: str | None = None) -> str:
    """Canonical spelling of a retune key (``max_num_seqs`` -> ``max-num-seqs``); InputError for unknown keys, listing
    the keys of ``engine`` (the worker's) where given."""
    if key.startswith("env."):
        if len(key) <= 4:
            raise InputError(f"worker[{name}].env: empty variable name; write env.NAME=VALUE")
        return key
    canon = key.replace("_", "-") if key.replace("_", "-") in ARG_KEYS else key.replace("-", "_")
    if canon not in ARG_KEYS and canon != "numa_node":
        raise InputError(f"worker[{name}].{key}: cannot be retuned; use one of {', '.join(retune_keys(engine))}")
    return canon


def _current(tbl: Any, key: str) -> Any:
    if key in ARG_KEYS:
        return tbl.get("args", {}).get(key)
    if key.startswith("env."):
        return tbl.get("env", {}).get(key[4:])
    return tbl.get(key, "auto")


def apply_changes(doc: tomlkit.TOMLDocument, name: str, changes: Mapping[str, str]) -> list[tuple[str, Any, Any]]:
    """Change worker ``name`` in ``doc`` in place; returns ``(key, old, new)`` for each key that really changed.

    An empty value for ``env.X`` removes the variable.
    """
    # tomlkit loads when a profile file is edited: the dashboard and the CLI import this module for its word lists
    # and parsers, which need none of it (~0.6 MiB RSS in the attached viewer).
    import tomlkit
    from tomlkit.items import Item, Table

    tbl = _worker_table(doc, name)
    out: list[tuple[str, Any, Any]] = []
    for raw_key, text in changes.items():
        engine = str(tbl.get("engine", "vllm"))
        key = normalise_key(name, raw_key, engine)
        check_engine_key(name, engine, key)
        old = _current(tbl, key)
        old = old.unwrap() if isinstance(old, Item) else old
        if key.startswith("env."):
            var = key[4:]
            if "env" not in tbl:
                tbl.append("env", tomlkit.table())
            env: Table = tbl["env"]
            if text == "":
                if var in env:
                    del env[var]
                new: Any = None
            else:
                env[var] = text
                new = text
        elif key in ARG_KEYS:
            new = _parse_value(name, key, text)
            if "args" not in tbl:
                tbl.append("args", tomlkit.table())
            tbl["args"][key] = new
        else:
            new = _parse_value(name, key, text)
            tbl["numa_node"] = new
        if old != new:
            out.append((key, old, new))
    _check_batched_tokens(name, tbl)
    gpus = tbl.get("gpus", [])
    check_parallel_args(name, dict(tbl.get("args", {}).unwrap() if "args" in tbl else {}), len(gpus))
    return out


def _check_batched_tokens(name: str, tbl: Any) -> None:
    # vLLM refuses a token budget per step smaller than the batch it must schedule (max_num_batched_tokens >=
    # max_num_seqs, vllm/config/scheduler.py); say so here rather than in the restarted worker's log.
    args = tbl.get("args", {})
    tokens, seqs = args.get("max-num-batched-tokens"), args.get("max-num-seqs")
    if isinstance(tokens, int) and isinstance(seqs, int) and tokens < seqs:
        raise InputError(
            f"worker[{name}].args.max-num-batched-tokens: {tokens} is below max-num-seqs {seqs}; give at least {seqs}"
        )


def render_diff(name: str, changed: list[tuple[str, Any, Any]]) -> str:
    """Human diff: one ``key: old -> new`` line per change (env secrets masked)."""
    if not changed:
        return f"worker {name}: no change"
    lines = [f"worker {name}:"]
    for key, old, new in changed:
        if key.startswith("env."):
            var = key[4:]
            old = None if old is None else mask_env({var: str(old)})[var]
            new = None if new is None else mask_env({var: str(new)})[var]
        shown_key = f"args.{key}" if key in ARG_KEYS else key
        lines.append(f"  {shown_key}: {'(unset)' if old is None else old} -> {'(unset)' if new is None else new}")
    return "\n".join(lines)


def write_profile_file(path: Path, text: str) -> None:
    """Replace the profile file's contents atomically, keeping what the operator set on it: a symlink is written
    through to its target, and the target keeps its mode and owner (a 0600 file holding HF_TOKEN stays 0600).

    Any failure (a full disk) is one line and leaves neither a temporary file nor a changed profile.
    """
    target = Path(os.path.realpath(path))
    try:
        old = target.stat()
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise AmdtopError(f"{path}: cannot read ({os_reason(exc)}); fix its permissions") from None
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            if (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.chown(tmp, old.st_uid, old.st_gid)
                except PermissionError:
                    pass
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise AmdtopError(
            f"{path}: cannot write ({os_reason(exc)}); the profile is unchanged, free space or fix permissions"
        ) from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
