"""Node rules: kernel command line, CPU governor, GPU power caps, PCIe links and the XGMI fabric."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterator

from amdtop import pcibus
from amdtop.audit import sources
from amdtop.audit.context import AuditContext
from amdtop.audit.model import Finding, Fix, RuleSkipped
from amdtop.audit.registry import Outcome, rule
from amdtop.model import FlagKind, LinkType


@rule("iommu_pt_missing", "node")
def iommu_pt(ctx: AuditContext) -> Iterator[Outcome]:
    """``iommu=pt`` missing from the kernel command line of an AMD GPU node."""
    # A node none of whose GPUs came up shows none: its bus still says whose they are (the node to fix first).
    amd = any(g.vendor == "AMD" for g in ctx.topology.gpus) or (
        not ctx.topology.gpus and any(a.vendor == "AMD" for a in pcibus.scan(ctx.sys_root))
    )
    if not amd:
        raise RuleSkipped("no AMD GPU: iommu=pt is AMD's advice")
    cmdline = ctx.read_proc("cmdline")
    if cmdline is None:
        raise RuleSkipped(f"{ctx.proc_root}/cmdline unreadable")
    if "iommu=pt" in cmdline.split():
        return
    yield Finding(
        "iommu_pt_missing",
        "warn",
        "node",
        'kernel command line lacks "iommu=pt"',
        (f"{ctx.proc_root}/cmdline: {cmdline[:300]}",),
        "with the IOMMU translating every peer access RCCL warns of instability or hangs and P2P bandwidth drops",
        sources.ROCM_MI300X_SYSTEM,
        Fix(
            "command",
            command="sudo sed -i 's/GRUB_CMDLINE_LINUX=\"/GRUB_CMDLINE_LINUX=\"iommu=pt /' "
            "/etc/default/grub && sudo update-grub && sudo reboot",
        ),
        set_by="node",
    )


@rule("cpu_governor", "node")
def cpu_governor(ctx: AuditContext) -> Iterator[Outcome]:
    """CPU frequency governor other than ``performance``."""
    files = sorted(
        glob.glob(os.path.join(ctx.sys_root, "devices", "system", "cpu", "cpu[0-9]*", "cpufreq", "scaling_governor"))
    )
    if not files:
        raise RuleSkipped(f"{ctx.sys_root}/devices/system/cpu/cpu*/cpufreq absent (no cpufreq driver: a VM?)")
    found: dict[str, list[str]] = {}
    for path in files:
        try:
            with open(path) as fh:
                gov = fh.read().strip()
        except OSError:
            continue
        cpu = path.split(os.sep)[-3]
        found.setdefault(gov, []).append(cpu)
    slow = {g: cpus for g, cpus in found.items() if g != "performance"}
    if not slow:
        return
    yield Finding(
        "cpu_governor",
        "warn",
        "node",
        f"CPU governor {', '.join(sorted(slow))} (not performance)",
        tuple(
            f"scaling_governor {g}: {len(c)} CPUs ({', '.join(c[:4])}{'...' if len(c) > 4 else ''})"
            for g, c in sorted(slow.items())
        ),
        "the scheduler and tokenizer threads that feed the GPUs run at lower clocks: longer gaps between steps",
        sources.CPUFREQ,
        Fix("command", command="sudo cpupower frequency-set -g performance"),
        set_by="node",
    )


def _hwmon(ctx: AuditContext, bdf: str) -> str | None:
    dev = ctx.pci_dir(bdf)
    if dev is None:
        return None
    found = sorted(glob.glob(os.path.join(dev, "hwmon", "hwmon*")))
    return found[0] if found else None


def _int_file(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


@rule("power_cap_below_default", "gpu")
def power_cap(ctx: AuditContext) -> Iterator[Outcome]:
    """A GPU's power cap set below its default (hwmon ``power1_cap`` < ``power1_cap_default``)."""
    read = 0
    for info in ctx.topology.gpus:
        hw = _hwmon(ctx, info.bdf)
        if hw is None:
            continue
        cap, default = _int_file(os.path.join(hw, "power1_cap")), _int_file(os.path.join(hw, "power1_cap_default"))
        if cap is None or default is None:
            continue
        read += 1
        if cap >= default:
            continue
        cmd = (
            f"sudo rocm-smi -d {info.index} --resetpoweroverdrive"
            if info.vendor == "AMD"
            else f"sudo nvidia-smi -i {info.index} -pl {default // 1_000_000}"
        )
        yield Finding(
            "power_cap_below_default",
            "warn",
            "gpu",
            f"GPU {info.index} power cap {cap / 1e6:.0f} W below its default {default / 1e6:.0f} W",
            (f"{hw}/power1_cap: {cap}", f"{hw}/power1_cap_default: {default}"),
            "a lower cap throttles clocks under load; one capped GPU slows its whole TP group to its pace",
            sources.ROCM_MI300X_SYSTEM,
            Fix("command", command=cmd),
            gpus=(info.index,),
            set_by="node",
        )
    if not read:
        raise RuleSkipped("no GPU exposes hwmon power1_cap and power1_cap_default")


_SPEED = re.compile(r"([\d.]+)\s*GT/s")


@rule("pcie_link_degraded", "gpu")
def pcie_link(ctx: AuditContext) -> Iterator[Outcome]:
    """PCIe link trained below its maximum (``current_link_*`` vs ``max_link_*``)."""
    read = 0
    util = {s.index: s.util_pct for s in ctx.snapshot.gpus} if ctx.snapshot else {}
    for info in ctx.topology.gpus:
        dev = ctx.pci_dir(info.bdf)
        if dev is None:
            continue
        vals = {f"{k}_{w}": ctx.read_sys(dev, f"{k}_link_{w}") for k in ("current", "max") for w in ("speed", "width")}
        if None in vals.values():
            continue
        read += 1
        problems = []
        cur_w, max_w = vals["current_width"], vals["max_width"]
        cur_s, max_s = vals["current_speed"] or "", vals["max_speed"] or ""
        if cur_w and max_w and cur_w.isdigit() and max_w.isdigit() and int(cur_w) < int(max_w):
            problems.append(f"width x{cur_w} of x{max_w}")
        cs, ms = _SPEED.search(cur_s), _SPEED.search(max_s)
        idle = (util.get(info.index) or 0.0) < 5.0
        if cs and ms and float(cs.group(1)) < float(ms.group(1)) and not idle:
            problems.append(f"speed {cur_s} of {max_s}")
        if not problems:
            continue
        yield Finding(
            "pcie_link_degraded",
            "warn",
            "gpu",
            f"GPU {info.index} PCIe link at {' and '.join(problems)}",
            tuple(f"{dev}/{k}_link_{w}: {vals[f'{k}_{w}']}" for k in ("current", "max") for w in ("speed", "width")),
            "host-device copies (weights, KV offload, inputs) and PCIe peer traffic run at the reduced rate",
            sources.KERNEL_PCI_SYSFS,
            Fix(
                "command",
                command=f"sudo lspci -vv -s {info.bdf} | grep -i lnk  # reseat the card or check the "
                "riser/retimer; a link at lower speed only while idle is power saving",
            ),
            gpus=(info.index,),
            set_by="node",
        )
    if not read:
        raise RuleSkipped("no GPU exposes current_link_*/max_link_* in sysfs")


@rule("xgmi_link_down", "node")
def xgmi_down(ctx: AuditContext) -> Iterator[Outcome]:
    """XGMI/NVLink links down or degraded: a pair of one fabric that talks over PCIe, or a ``link_degraded`` flag."""
    fabric = {i.index for link in ctx.topology.links if link.direct for i in (ctx.gpu(link.a), ctx.gpu(link.b)) if i}
    if not fabric:
        raise RuleSkipped("no XGMI/NVLink fabric on this node")
    down = []
    for link in ctx.topology.links:
        if link.a in fabric and link.b in fabric and link.type is LinkType.PCIE:
            down.append(f"GPU {link.a} - GPU {link.b}: {link.type.value} (hops {link.hops}) inside an XGMI fabric")
    degraded = [f.message for f in ctx.flags or () if f.kind is FlagKind.LINK_DEGRADED]
    if not down and not degraded:
        return
    pairs = sorted({g for text in down for g in re.findall(r"GPU (\d+)", text)}, key=int)
    yield Finding(
        "xgmi_link_down",
        "error",
        "node",
        f"fabric links down or degraded between GPUs {', '.join(pairs) or 'of the node'}",
        tuple(down + degraded)[:16],
        "collectives between these GPUs fall back to PCIe through the host: every TP all-reduce slows to the "
        "weakest pair",
        sources.ROCM_MI300X_SYSTEM,
        Fix("command", command="sudo amd-smi xgmi -l  # then reset the GPUs (amd-smi reset -G) or power-cycle"),
        gpus=tuple(int(p) for p in pairs),
        set_by="node",
    )


@rule("gpus_failed_init", "node")
def gpus_failed_init(ctx: AuditContext) -> Iterator[Outcome]:
    """Accelerators on the PCI bus with no driver bound, or that the backend does not show."""
    on_bus = pcibus.scan(ctx.sys_root)
    if not on_bus:
        raise RuleSkipped(f"{ctx.sys_root}/bus/pci/devices lists no AMD/NVIDIA accelerator")
    missing = pcibus.failed(on_bus, [g.bdf for g in ctx.topology.gpus])
    incident = pcibus.verdict(missing, ctx.init_failures)
    if incident is None:
        return
    evidence = tuple(
        f"{a.bdf}: {a.vendor} {a.device_id or '?'} class 0x{a.pci_class:06x}, driver {a.driver or 'none bound'}"
        for a in missing
    ) + tuple(f"kernel: {line}" for line in incident.evidence)
    yield Finding(
        "gpus_failed_init",
        "error",
        "node",
        incident.summary.split(" (")[0],
        evidence,
        "these GPUs serve nothing: every TP group that should use them cannot start (the kernel log says why: "
        "amdtop snapshot --json, incidents)",
        sources.GPU_INIT_POWER_CYCLE,
        Fix("none", advice=incident.fix),
        set_by="node",
    )
