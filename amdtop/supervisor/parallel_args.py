"""Range checks of the parallel flags (DP, TP, PP, expert parallel, API servers) against a profile's GPUs.

One ``vllm serve`` drives ``data-parallel-size x pipeline-parallel-size x tensor-parallel-size`` devices; a profile
that lists a different number of GPUs would start and fail minutes later inside vLLM (``Error computing device
indices``), so the sizes are checked where the profile is read, retuned or edited in the launch dialog.
"""

from __future__ import annotations

from collections.abc import Mapping

from amdtop.errors import InputError
from amdtop.layout import layout_from_args

PARALLEL_INT_KEYS = ("data-parallel-size", "api-server-count", "pipeline-parallel-size")
"""Parallel flags with an integer value (TP has its own check in profiles.py)."""
BOOL_KEYS = ("enable-expert-parallel",)
MAX_API_SERVERS = 256
"""vLLM takes any count >= 1; far beyond the host's cores is a typo, not a setting."""


def _positive(name: str, key: str, value: object, hi: int | None, example: str) -> int:
    field = f"worker[{name}].args.{key}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{field}: {value!r} is not an integer; e.g. {key}={example}")
    if value < 1 or (hi is not None and value > hi):
        span = f"1..{hi}" if hi is not None else ">= 1"
        raise InputError(f"{field}: {value} is outside {span}; e.g. {key}={example}")
    return value


def check_parallel_args(name: str, args: Mapping[str, object], n_gpus: int) -> None:
    """InputError naming the first bad parallel flag of worker ``name`` (``args`` without dashes)."""
    dp = args.get("data-parallel-size")
    if dp is not None:
        _positive(name, "data-parallel-size", dp, n_gpus or None, "2")
    pp = args.get("pipeline-parallel-size")
    if pp is not None:
        _positive(name, "pipeline-parallel-size", pp, n_gpus or None, "1")
    api = args.get("api-server-count")
    if api is not None:
        _positive(name, "api-server-count", api, MAX_API_SERVERS, "1")
    ep = args.get("enable-expert-parallel")
    if ep is not None and not isinstance(ep, bool):
        raise InputError(
            f"worker[{name}].args.enable-expert-parallel: {ep!r} is not true or false; e.g. enable-expert-parallel=true"
        )
    if not n_gpus or (dp is None and pp is None):
        return  # a plain TP size is checked against the GPUs by validate_profiles
    layout = layout_from_args(args, n_gpus)
    if layout.gpus_needed != n_gpus:
        key = "tensor-parallel-size" if "tensor-parallel-size" in args else "data-parallel-size"
        if key not in args:
            key = "pipeline-parallel-size"
        per = max(1, n_gpus // max(1, layout.dp * layout.pp))
        raise InputError(
            f"worker[{name}].args.{key}: {layout.summary()} needs {layout.gpus_needed} GPUs (dp x pp x tp) but the "
            f"profile lists {n_gpus}; use data-parallel-size x tensor-parallel-size = {n_gpus} "
            f"(e.g. tensor-parallel-size={per})"
        )
