"""SGLang rules for MI300-class GPUs (gfx942, gfx950): its AITER switch and its attention backend, read from the
worker's environment and command line. vLLM's rules (:mod:`amdtop.audit.rules_vllm`) judge vLLM workers only.

Sources, both sglang 0.5.23 (the release ``pip install sglang`` gave, read in its installed package):

- ``python/sglang/srt/environ.py``: ``SGLANG_USE_AITER = EnvBool(False)``; the layers read it as
  ``get_bool_env_var("SGLANG_USE_AITER") and is_hip()`` (``model_runner_components/moe_ep_setup.py``,
  ``layers/attention/dsa/...``): off unless the environment turns it on, on ROCm too.
- ``python/sglang/srt/arg_groups/model_override_base.py`` ``get_default_attn_backend``: on HIP SGLang picks ``aiter``
  for MHA models, and for MLA models whose KV head count is 16 or 128 (``triton`` otherwise).
"""

from __future__ import annotations

from collections.abc import Iterator

from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding, Fix, RuleSkipped, Skipped
from amdtop.audit.registry import Outcome, rule
from amdtop.audit.rules_env import env_fix, rank_envs, set_by
from amdtop.audit.vllm_table import arch_of

SGLANG_ENVIRON = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/environ.py (SGLANG_USE_AITER)"
SGLANG_ATTN_DEFAULT = (
    "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/arg_groups/model_override_base.py "
    "(get_default_attn_backend: aiter on HIP)"
)
AITER_ARCHS = ("gfx942", "gfx950")
_TRUE = ("1", "true", "yes", "on")


def _sglang_targets(ctx: AuditContext) -> list[AuditTarget]:
    live = [t for t in ctx.targets if t.running and t.engine == "sglang"]
    if not live:
        raise RuleSkipped("no running SGLang worker")
    return live


def _arch(ctx: AuditContext, target: AuditTarget) -> str | None:
    gpus = ctx.physical(target)
    info = ctx.gpu(gpus[0]) if gpus else None
    arch = arch_of(info.name) if info is not None else None
    return arch if arch in AITER_ARCHS else None


def _flag(argv: tuple[str, ...], name: str) -> str | None:
    for i, tok in enumerate(argv):
        if tok == f"--{name}":
            return argv[i + 1] if i + 1 < len(argv) else ""
        if tok.startswith(f"--{name}="):
            return tok.split("=", 1)[1]
    return None


@rule("sglang_aiter_off", "worker")
def sglang_aiter_off(ctx: AuditContext) -> Iterator[Outcome]:
    """SGLANG_USE_AITER not on for an SGLang worker on an MI300-class GPU."""
    for t in _sglang_targets(ctx):
        arch = _arch(ctx, t)
        if arch is None:
            yield Skipped("sglang_aiter_off", "not an MI300-class GPU (gfx942, gfx950)", t.name)
            continue
        envs = rank_envs(ctx, t, "sglang_aiter_off")
        if isinstance(envs, Skipped):
            yield envs
            continue
        pid, env = envs[0]
        value = env.get("SGLANG_USE_AITER")
        if value is not None and value.strip().lower() in _TRUE:
            continue
        yield Finding(
            "sglang_aiter_off",
            "warn",
            "worker",
            f"SGLang's AITER kernels off on {arch}",
            (
                f"/proc/{pid}/environ: SGLANG_USE_AITER={value}"
                if value is not None
                else f"/proc/{pid}/environ: SGLANG_USE_AITER not set (SGLang's default is off)",
            ),
            "SGLang's MoE, GEMM and normalization layers take their non-AITER (Triton/torch) paths on ROCm unless "
            "SGLANG_USE_AITER is on",
            SGLANG_ENVIRON,
            env_fix(t, "SGLANG_USE_AITER", "1", "SGLang reads it at start"),
            worker=t.name,
            gpus=t.gpus,
            set_by=set_by(t, "SGLANG_USE_AITER") if value is not None else "sglang",
        )


@rule("sglang_attention_backend", "worker")
def sglang_attention_backend(ctx: AuditContext) -> Iterator[Outcome]:
    """An attention backend forced on the command line other than ``aiter``, the one SGLang picks on ROCm."""
    for t in _sglang_targets(ctx):
        arch = _arch(ctx, t)
        if arch is None:
            yield Skipped("sglang_attention_backend", "not an MI300-class GPU (gfx942, gfx950)", t.name)
            continue
        argv = ctx.cmdline(t.pid) if t.pid else ()
        backend = _flag(argv, "attention-backend")
        if backend is None or backend == "aiter":
            continue
        by_profile = t.profile is not None and t.profile.arg("attention-backend") is not None
        yield Finding(
            "sglang_attention_backend",
            "info",
            "worker",
            f"attention forced to {backend!r} on {arch}, not SGLang's ROCm default aiter",
            (f"/proc/{t.pid}/cmdline: --attention-backend {backend}",),
            "SGLang picks the AITER attention kernels on ROCm for MHA models (and MLA models of 16 or 128 KV "
            "heads); a forced backend keeps a slower path unless this model needs it",
            SGLANG_ATTN_DEFAULT,
            Fix(
                "none",
                advice=f"drop --attention-backend {backend} "
                + ("from [worker.args] " if by_profile else "where this server is launched ")
                + "unless this model needs it (SGLang then picks aiter)",
            ),
            worker=t.name,
            gpus=t.gpus,
            set_by="profile" if by_profile else "environment",
        )
