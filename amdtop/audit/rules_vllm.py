"""vLLM rules: the paths vLLM chose (start-up log), its argv and its environment, against the table of what each GPU
architecture should run (:mod:`amdtop.audit.vllm_table`). Each finding says who set what it found: the profile or
environment (a fix is offered) or vLLM itself for this version and GPU (the advice is the version)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from amdtop.audit import sources
from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding, Fix, RuleSkipped, Skipped
from amdtop.audit.registry import Outcome, rule
from amdtop.audit.rules_env import env_fix, rank_envs, set_by
from amdtop.audit.startup_log import StartupFacts
from amdtop.audit.vllm_table import ArchRules, Version, arch_of, parse_version, rules_for
from amdtop.errors import os_reason

_TRUE = ("1", "true")


@dataclass(frozen=True, slots=True)
class VllmView:
    """One worker as the vLLM rules read it."""

    target: AuditTarget
    arch: ArchRules
    argv: tuple[str, ...]
    env: dict[str, str]
    env_pid: int
    facts: StartupFacts | None
    log_problem: str | None

    @property
    def version(self) -> Version | None:
        """vLLM version from the start-up log."""
        return parse_version(self.facts.version if self.facts else None)

    def flag(self, name: str) -> str | None:
        """The value of ``--name`` in argv (``""`` for a bare switch), ``None`` when absent."""
        for i, tok in enumerate(self.argv):
            if tok == f"--{name}":
                nxt = self.argv[i + 1] if i + 1 < len(self.argv) else ""
                return "" if nxt.startswith("--") else nxt
            if tok.startswith(f"--{name}="):
                return tok.split("=", 1)[1]
        return None

    def profile_arg(self, name: str) -> bool:
        """True when the worker's profile sets ``name`` in ``[worker.args]``."""
        prof = self.target.profile
        return prof is not None and prof.arg(name) not in (None, False)


def _arch(ctx: AuditContext, target: AuditTarget) -> ArchRules:
    gpus = ctx.physical(target)
    if not gpus:
        raise RuleSkipped("no GPU: the rules table covers gfx942, gfx950 and sm_90")
    info = ctx.gpu(gpus[0])
    arch = arch_of(info.name) if info is not None else None
    table = rules_for(arch)
    if table is None:
        name = info.name if info is not None else f"GPU {gpus[0]}"
        raise RuleSkipped(f"{name}: no row in the rules table (gfx942, gfx950, sm_90)")
    return table


def _view(ctx: AuditContext, target: AuditTarget) -> VllmView | str:
    """The worker as every vLLM rule reads it, built once per run (or why it cannot be)."""
    key = ("vllm_view", target.name)
    found = ctx.memo.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    view: VllmView | str
    try:
        arch = _arch(ctx, target)
    except RuleSkipped as why:
        view = str(why)
    else:
        envs = rank_envs(ctx, target, "vllm")
        if isinstance(envs, Skipped):
            view = envs.why
        else:
            facts, problem = None, None
            if target.log:
                try:
                    facts = ctx.startup_logs.facts(target.log)
                except OSError as exc:
                    problem = f"start-up log {target.log} unreadable ({os_reason(exc)})"
            else:
                note = target.status.log_note if target.status is not None else None
                problem = f"no log file known for this worker ({note or 'a discovered server'})"
            argv = ctx.cmdline(target.pid) if target.pid else ()
            view = VllmView(target, arch, argv, envs[0][1], envs[0][0], facts, problem)
    ctx.memo[key] = view
    return view


def _views(ctx: AuditContext, rule_id: str, *, need_log: bool = False) -> Iterator[VllmView | Skipped]:
    live = [t for t in ctx.targets if t.running and t.engine == "vllm"]  # SGLang's: amdtop.audit.rules_sglang
    if not live:
        raise RuleSkipped("no running vLLM worker" if any(t.running for t in ctx.targets) else "no running worker")
    for target in live:
        view = _view(ctx, target)
        if isinstance(view, str):
            yield Skipped(rule_id, view, target.name)
        elif need_log and view.facts is None:
            yield Skipped(rule_id, view.log_problem or "no start-up log", target.name)
        else:
            yield view


def _version_text(view: VllmView) -> str:
    return view.facts.version if view.facts and view.facts.version else "unknown version"


@rule("aiter_off", "worker")
def aiter_off(ctx: AuditContext) -> Iterator[Outcome]:
    """AITER kernels off on an AMD GPU that has them."""
    for view in _views(ctx, "aiter_off"):
        if isinstance(view, Skipped):
            yield view
            continue
        if not view.arch.aiter:
            continue
        value = view.env.get("VLLM_ROCM_USE_AITER")
        if value is not None and value.strip().lower() in _TRUE:
            continue
        t = view.target
        evidence = [
            f"/proc/{view.env_pid}/environ: VLLM_ROCM_USE_AITER={value}"
            if value is not None
            else f"/proc/{view.env_pid}/environ: VLLM_ROCM_USE_AITER not set (vLLM's default is off)"
        ]
        if view.facts and view.facts.attention_line:
            evidence.append(f"log: {view.facts.attention_line}")
        evidence += [f"log: {m}" for m in (view.facts.moe if view.facts else ())]
        since = view.arch.aiter_since
        old = view.version is not None and since is not None and view.version < since
        yield Finding(
            "aiter_off",
            "warn",
            "worker",
            f"AITER kernels off on {view.arch.arch} (vLLM {_version_text(view)})",
            tuple(evidence),
            "without AITER vLLM runs Triton MoE and ROCM_ATTN/TRITON_ATTN attention: 1.7x slower at short prompts "
            "and 3.7x at 12k tokens on MI300X/MI325X/MI355X in vllm-project/vllm#56945",
            view.arch.source,
            Fix(
                "none",
                advice=f"vLLM {_version_text(view)} predates AITER on {view.arch.arch}; upgrade to >= "
                f"{'.'.join(map(str, since or ()))}",
            )
            if old
            else env_fix(t, "VLLM_ROCM_USE_AITER", "1", "AITER is off by default in vLLM"),
            worker=t.name,
            gpus=t.gpus,
            set_by=set_by(t, "VLLM_ROCM_USE_AITER") if value is not None else "vllm",
        )


@rule("attention_backend_slow", "worker")
def attention_backend(ctx: AuditContext) -> Iterator[Outcome]:
    """The attention backend vLLM logged it chose, against the fast ones for the GPU."""
    for view in _views(ctx, "attention_backend_slow", need_log=True):
        if isinstance(view, Skipped):
            yield view
            continue
        facts = view.facts
        assert facts is not None
        t = view.target
        if facts.attention is None:
            yield Skipped("attention_backend_slow", f"{t.log}: no 'Using ... backend' line (yet)", t.name)
            continue
        if facts.attention not in view.arch.slow_attention:
            continue
        by_profile = facts.attention_by_flag or view.flag("attention-backend") is not None
        aiter = view.env.get("VLLM_ROCM_USE_AITER", "").lower() in _TRUE
        if by_profile:
            fix = Fix(
                "none",
                advice=f"drop --attention-backend {facts.attention} or pick one of "
                f"{', '.join(view.arch.preferred_attention)}",
            )
        elif view.arch.aiter and not aiter:
            fix = env_fix(t, "VLLM_ROCM_USE_AITER", "1", "vLLM picks an AITER backend when AITER is on")
        else:
            fix = Fix(
                "none",
                advice=f"vLLM {_version_text(view)} picked it for this model; "
                f"try --attention-backend {view.arch.preferred_attention[0]}",
            )
        yield Finding(
            "attention_backend_slow",
            "warn",
            "worker",
            f"attention runs on {facts.attention}, not a fast backend for {view.arch.arch}",
            (f"log: {facts.attention_line}",),
            f"the fast paths on {view.arch.arch} are {', '.join(view.arch.preferred_attention)}; "
            f"{facts.attention} loses up to 3.7x at long context (vllm-project/vllm#56945)",
            view.arch.source,
            fix,
            worker=t.name,
            gpus=t.gpus,
            set_by="profile" if by_profile else ("vllm" if aiter or not view.arch.aiter else "environment"),
        )


@rule("moe_path_slow", "worker")
def moe_path(ctx: AuditContext) -> Iterator[Outcome]:
    """The MoE kernels vLLM logged, against the slow paths of the GPU (dense models log none: nothing to judge)."""
    for view in _views(ctx, "moe_path_slow", need_log=True):
        if isinstance(view, Skipped):
            yield view
            continue
        assert view.facts is not None
        slow = [m for m in view.facts.moe if any(w in m.lower() for w in view.arch.slow_moe)]
        if not slow:
            continue
        t = view.target
        aiter = view.env.get("VLLM_ROCM_USE_AITER", "").lower() in _TRUE
        yield Finding(
            "moe_path_slow",
            "warn",
            "worker",
            f"MoE runs a slow kernel path on {view.arch.arch}",
            tuple(f"log: {m}" for m in slow),
            "Triton or emulated MoE GEMMs run far below the fused AITER/CUTLASS kernels (vllm-project/vllm#56945: "
            "Triton FP8 MoE + ROCM_ATTN 1.7-3.7x slower)",
            view.arch.source,
            env_fix(t, "VLLM_ROCM_USE_AITER", "1", "AITER MoE")
            if view.arch.aiter and not aiter
            else Fix("none", advice=f"vLLM {_version_text(view)} has no faster MoE kernel for this quantisation here"),
            worker=t.name,
            gpus=t.gpus,
            set_by="environment" if view.arch.aiter and not aiter else "vllm",
        )


@rule("custom_allreduce_disabled", "worker")
def custom_allreduce(ctx: AuditContext) -> Iterator[Outcome]:
    """Custom all-reduce off: by the profile's ``--disable-custom-all-reduce``, or by vLLM itself for this GPU."""
    for view in _views(ctx, "custom_allreduce_disabled"):
        if isinstance(view, Skipped):
            yield view
            continue
        t = view.target
        if len(t.gpus) < 2:
            continue
        flag = view.flag("disable-custom-all-reduce") is not None
        line = view.facts.custom_ar_disabled if view.facts else None
        if flag:
            evidence = [f"/proc/{t.pid}/cmdline: --disable-custom-all-reduce"] + ([f"log: {line}"] if line else [])
            yield Finding(
                "custom_allreduce_disabled",
                "warn",
                "worker",
                "custom all-reduce disabled by --disable-custom-all-reduce",
                tuple(evidence),
                "every TP all-reduce goes through RCCL/NCCL instead of the one-shot IPC kernel: slower for the small "
                "all-reduces of decode",
                sources.VLLM_ROCM_CUSTOM_AR,
                Fix("retune", changes=(("disable-custom-all-reduce", "false"),))
                if view.profile_arg("disable-custom-all-reduce")
                else Fix("none", advice="remove --disable-custom-all-reduce where this server is launched"),
                worker=t.name,
                gpus=t.gpus,
                set_by="profile" if t.profile is not None else "environment",
            )
        elif line:
            since = view.arch.custom_ar_since
            yield Finding(
                "custom_allreduce_disabled",
                "warn",
                "worker",
                f"vLLM {_version_text(view)} disabled custom all-reduce itself on {view.arch.arch}",
                (f"log: {line}",),
                "every TP all-reduce goes through RCCL/NCCL instead of the one-shot IPC kernel",
                sources.VLLM_ROCM_CUSTOM_AR,
                Fix(
                    "none",
                    advice=f"no profile setting changes this: vLLM >= {'.'.join(map(str, since or ()))} "
                    f"runs custom all-reduce on {view.arch.arch}; upgrade vLLM",
                ),
                worker=t.name,
                gpus=t.gpus,
                set_by="vllm",
            )


@rule("enforce_eager", "worker")
def enforce_eager(ctx: AuditContext) -> Iterator[Outcome]:
    """CUDA/HIP graphs off (``--enforce-eager``)."""
    for view in _views(ctx, "enforce_eager"):
        if isinstance(view, Skipped):
            yield view
            continue
        t = view.target
        if view.flag("enforce-eager") is None:
            continue
        yield Finding(
            "enforce_eager",
            "warn",
            "worker",
            "CUDA/HIP graphs off (--enforce-eager)",
            (f"/proc/{t.pid}/cmdline: --enforce-eager",),
            "every decode step launches each kernel from Python: small-batch decode loses most of its speed",
            "vllm serve --help=enforce-eager (vLLM 0.32)",
            Fix("retune", changes=(("enforce-eager", "false"),))
            if view.profile_arg("enforce-eager")
            else Fix("none", advice="remove --enforce-eager where this server is launched"),
            worker=t.name,
            gpus=t.gpus,
            set_by="profile" if t.profile is not None else "environment",
        )


@rule("tunableop_off", "worker")
def tunableop(ctx: AuditContext) -> Iterator[Outcome]:
    """PyTorch TunableOp off on a ROCm GPU."""
    for view in _views(ctx, "tunableop_off"):
        if isinstance(view, Skipped):
            yield view
            continue
        if not view.arch.tunableop:
            continue
        value = view.env.get("PYTORCH_TUNABLEOP_ENABLED")
        if value is not None and value.strip() == "1":
            continue
        t = view.target
        yield Finding(
            "tunableop_off",
            "info",
            "worker",
            "PyTorch TunableOp off",
            (f"/proc/{view.env_pid}/environ: PYTORCH_TUNABLEOP_ENABLED={value if value is not None else '(unset)'}",),
            "GEMMs run with the default hipBLASLt solution instead of the fastest one tuned for these shapes; "
            "tuning costs start-up time once (results are kept in a CSV)",
            sources.ROCM_WORKLOAD,
            env_fix(t, "PYTORCH_TUNABLEOP_ENABLED", "1", "AMD's MI300X inference guidance"),
            worker=t.name,
            gpus=t.gpus,
            set_by=set_by(t, "PYTORCH_TUNABLEOP_ENABLED") if value is not None else "vllm",
        )


@rule("kv_cache_dtype", "worker")
def kv_cache_dtype(ctx: AuditContext) -> Iterator[Outcome]:
    """The KV-cache dtype: ``auto`` keeps the model's dtype, where fp8 would hold twice the tokens."""
    for view in _views(ctx, "kv_cache_dtype"):
        if isinstance(view, Skipped):
            yield view
            continue
        t = view.target
        value = view.flag("kv-cache-dtype")
        if value is None and view.facts is not None:
            value = view.facts.config_value("kv_cache_dtype")
        if value is None:
            yield Skipped("kv_cache_dtype", "neither argv nor the start-up log says the KV-cache dtype", t.name)
            continue
        if value != "auto":
            continue
        yield Finding(
            "kv_cache_dtype",
            "info",
            "worker",
            "KV cache in the model's dtype (kv-cache-dtype auto)",
            (f"argv/log: kv_cache_dtype={value}",),
            "an fp8 KV cache holds twice the tokens, so more sequences fit before preemption (check accuracy for "
            "your model first)",
            sources.ROCM_WORKLOAD,
            Fix("none", advice='add kv-cache-dtype = "fp8" to the worker\'s [worker.args] after an accuracy check'),
            worker=t.name,
            gpus=t.gpus,
            set_by="vllm",
        )
