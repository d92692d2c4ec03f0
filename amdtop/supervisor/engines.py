"""The serving engines a profile can launch (``engine = "vllm"`` or ``"sglang"``) and what differs between them.

vLLM's side lives where it always did (launchspec, parallel_args); this module holds SGLang's: its argv
(``python -m sglang.launch_server --model-path M --tp-size N --port P --host H --enable-metrics``), the range checks of
its parallel flags, and whether it pins its own processes to NUMA nodes (``--numa-node``, sglang 0.5.23
``srt/arg_groups/fields/device.py``: "Sets the numa node for the subprocesses").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from amdtop import sglang_procs
from amdtop.errors import InputError
from amdtop.vllm_numa import uses_vllm_numa_binding

if TYPE_CHECKING:
    from amdtop.supervisor.profiles import ArgValue, Profile

ENGINES = ("vllm", "sglang")
DEFAULT_COMMAND: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm", "serve"),
    "sglang": ("python3", "-m", sglang_procs.MODULE),
}
"""argv prefix per engine when the profile gives no ``command``."""

SGLANG_INT_KEYS = ("tp-size", "dp-size", "pp-size", "ep-size", "attn-dp-size")
SGLANG_RESERVED = ("model-path", "port")
"""Flags amdtop sets from the worker's own keys (``model``, ``port``): a profile that repeats them in args is refused."""
SGLANG_NUMA_FLAG = "numa-node"


def canonical_sglang_args(args: Mapping[str, object]) -> dict[str, object]:
    """A profile's SGLang args (without dashes) under the keys :mod:`amdtop.sglang_procs` reads (``tensor-parallel-size``
    and ``tp`` are ``tp-size``...)."""
    out: dict[str, object] = {}
    for key, value in args.items():
        canon = sglang_procs.canonical_key(key)
        out[canon] = value
    return out


def uses_own_numa_binding(engine: str, args: tuple[tuple[str, ArgValue], ...]) -> bool:
    """True where the engine pins its own processes (vLLM's ``--numa-bind``, SGLang's ``--numa-node``): amdtop then
    wraps no ``numactl`` around it, as two bindings would fight."""
    if engine == "sglang":
        return any(k == SGLANG_NUMA_FLAG for k, _ in args)
    return uses_vllm_numa_binding(args)


def check_sglang_args(name: str, args: Mapping[str, object], n_gpus: int) -> None:
    """InputError naming the first bad SGLang parallel flag of worker ``name`` (``args`` without dashes)."""
    canon = canonical_sglang_args(args)
    for key in SGLANG_RESERVED:
        if key in canon:
            raise InputError(
                f"worker[{name}].args.{key}: set by amdtop from the worker's "
                f"{'model' if key == 'model-path' else key}; drop it from [worker.args]"
            )
    for key in SGLANG_INT_KEYS:
        value = canon.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"worker[{name}].args.{key}: {value!r} is not a positive integer; e.g. {key}=2")
    if not n_gpus:
        return
    layout = sglang_procs.layout_from_args(canon, n_gpus)
    if layout.gpus_needed != n_gpus:
        raise InputError(
            f"worker[{name}].args.tp-size: {layout.summary()} needs {layout.gpus_needed} GPUs but the profile lists "
            f"{n_gpus}; use dp-size x pp-size x tp-size = {n_gpus} (with DP attention: tp-size = {n_gpus})"
        )
    attn = sglang_procs.attention_dp(canon)
    if attn > 1 and layout.tp % attn:
        raise InputError(
            f"worker[{name}].args.dp-size: DP attention of {attn} does not divide tp-size {layout.tp}; "
            f"use a dp-size that divides {layout.tp}"
        )


def sglang_serve_args(profile: Profile) -> list[str]:
    """``command`` + ``--model-path`` + TP size + port + host + metrics on + the profile's args (in file order).

    SGLang reads its API key only from ``--api-key`` (no environment variable), so a key stays in argv: every view of
    the argv masks it (:mod:`amdtop.secrets`)."""
    from amdtop.supervisor.launchspec import flag_args  # launchspec imports profiles, which imports this module

    argv = [
        *profile.command,
        "--model-path",
        profile.model,
        "--tp-size",
        str(profile.tp_size),
        "--port",
        str(profile.port),
    ]
    canon = canonical_sglang_args(dict(profile.args))
    if "host" not in canon:
        argv += ["--host", profile.host]
    if "enable-metrics" not in canon:
        argv.append("--enable-metrics")  # the engine-state model reads /metrics; SGLang serves it only with this flag
    for key, value in profile.args:
        if sglang_procs.canonical_key(key) == "tp-size":
            continue
        argv += flag_args(key, value)
    return argv
