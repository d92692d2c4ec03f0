"""The PCI bus as ground truth: accelerators without a driver, or that the backend does not show, failed to come up;
a node whose MI300Xs failed driver init says so with the kernel's own lines (a real capture) and never opens the demo."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from amdtop.pcibus import GpusFailedInit, failed, scan, verdict
from amdtop.runtime.spec import NodeSpec
from tests.fixtures.sysfs_tree import MI300X_BDFS, build_pci_bus, mi300x_on_bus

KERNEL = Path(__file__).resolve().parents[1] / "fixtures" / "kernel" / "amdgpu_psp_init_failed_mi300x_rocm_4021.log"


def test_scan_finds_accelerators_and_their_drivers(tmp_path: Path) -> None:
    root = build_pci_bus(tmp_path, mi300x_on_bus())
    found = scan(root)
    assert [a.bdf for a in found] == list(MI300X_BDFS)  # the BMC's display function is not a GPU
    assert {(a.vendor, a.device_id, a.pci_class, a.driver) for a in found} == {("AMD", "0x74a1", 0x120000, None)}
    bound = scan(build_pci_bus(tmp_path / "ok", mi300x_on_bus("amdgpu")))
    assert {a.driver for a in bound} == {"amdgpu"}
    assert failed(bound, MI300X_BDFS) == ()
    assert [a.bdf for a in failed(bound, MI300X_BDFS[:7])] == [MI300X_BDFS[7]]  # bound but not in the backend
    assert scan(tmp_path / "nothing") == ()


def test_verdict_quotes_the_kernel_and_asks_for_a_power_cycle_rocm_4021(tmp_path: Path) -> None:
    from amdtop.logread.kernel.bus_check import init_failure_lines

    lines = init_failure_lines(KERNEL)
    assert any("early_init of IP block <psp> failed -22" in ln for ln in lines[""])
    assert any("Fatal error during GPU init" in ln for ln in lines["0000:1b:00.0"])
    inc = verdict(failed(scan(build_pci_bus(tmp_path, mi300x_on_bus())), ()), lines)
    assert inc is not None and inc.kind == "gpu_init_failed"
    assert inc.summary.startswith("8 AMD GPUs on the PCI bus failed driver init (kernel: ")
    assert "early_init of IP block <psp> failed -22" in inc.summary
    assert "full power cycle" in inc.fix and "not a warm reboot" in inc.fix


def _args(tmp_path: Path, root: Path, **kw: Any) -> NodeSpec:
    """The node the global options would name: auto backend over ``root``, the kernel log fixture."""
    from amdtop.cli.common import node_spec

    base = dict(
        backend="auto", sysfs_root=root, demo=False, config=tmp_path / "none.toml", state_dir=tmp_path,
        interval=1.0, readonly=False, seed=0, demo_partition=None, kernel_log=KERNEL,
    )  # fmt: skip
    base.update(kw)
    return node_spec(argparse.Namespace(**base))


def test_a_bus_of_failed_gpus_never_opens_the_demo(tmp_path: Path) -> None:
    from amdtop import runtime

    root = build_pci_bus(tmp_path, mi300x_on_bus())
    with pytest.raises(GpusFailedInit) as info:
        runtime.open(_args(tmp_path, root), ui=True)
    assert "8 AMD GPUs on the PCI bus failed driver init" in str(info.value)
    assert info.value.incident.evidence


def test_snapshot_on_a_bus_of_failed_gpus_lists_them_and_exits_0(tmp_path: Path) -> None:
    # cli-contract.md: snapshot lists accelerators the bus holds and no backend shows under missing_gpus, with the
    # kernel's lines about them; a node whose GPUs all failed init is a state to report, not a failed command.
    import json

    root = build_pci_bus(tmp_path, mi300x_on_bus(bdfs=("0000:1b:00.0", *MI300X_BDFS[1:])))
    argv = [sys.executable, "-m", "amdtop", "--sysfs-root", str(root), "--kernel-log", str(KERNEL), "snapshot"]
    out = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["gpus"] == [] and len(doc["missing_gpus"]) == 8
    first = doc["missing_gpus"][0]
    assert first["bdf"] == "0000:1b:00.0" and first["vendor"] == "AMD" and "no driver bound" in first["reason"]
    assert any("Fatal error during GPU init" in ln for ln in first["kernel"])  # its own lines (the psp one names none)
    (inc,) = doc["incidents"]
    assert inc["kind"] == "gpu_init_failed" and "full power cycle" in inc["fix"]
    text = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0
    head = text.stdout.splitlines()[0]
    assert "gpus=0  missing=8: 0000:1b:00.0, " in head  # the header names them


def test_audit_on_a_bus_of_failed_gpus_is_a_finding_with_the_kernel_lines(tmp_path: Path) -> None:
    # snapshot refuses in one line (no GPU to read); audit is the checklist for the sick node: the failed GPUs are
    # its first finding, with the kernel's lines and the power-cycle fix, and the node's other rules still run.
    import json

    root = build_pci_bus(tmp_path, mi300x_on_bus())
    argv = [sys.executable, "-m", "amdtop", "--sysfs-root", str(root), "--kernel-log", str(KERNEL), "audit"]
    out = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    first = doc["findings"][0]
    assert first["id"] == "gpus_failed_init" and first["severity"] == "error"
    assert first["title"] == "8 AMD GPUs on the PCI bus failed driver init"
    assert any(e.startswith("kernel: ") and "early_init of IP block <psp> failed" in e for e in first["evidence"])
    assert "full power cycle" in json.dumps(first["fix"])
    assert len(doc["checked"]) + len(doc["skipped"]) > 1  # the other node rules ran or said why not
    # The AMD rules know the node is AMD's from its bus, though no GPU came up (iommu=pt was skipped as "no AMD GPU").
    assert "iommu_pt_missing" not in str(doc["skipped"]), doc["skipped"]
    text = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert text.returncode == 0 and text.stdout.startswith("[error] gpus_failed_init: 8 AMD GPUs on the PCI bus")


def test_a_gpu_the_backend_does_not_show_is_an_incident_in_the_frame(tmp_path: Path) -> None:
    from dataclasses import replace

    from amdtop.logread.kernel.monitor import KernelFaultMonitor
    from amdtop.telemetry.base import BackendOptions
    from amdtop.telemetry.sysfs import open_backend
    from tests.fixtures.sysfs_tree import build_mi300x_8

    topology = open_backend(BackendOptions(sysfs_root=build_mi300x_8(tmp_path / "node").root)).topology()
    seven = replace(topology, gpus=topology.gpus[:7])
    root = build_pci_bus(tmp_path / "bus", mi300x_on_bus("amdgpu"))
    mon = KernelFaultMonitor(KERNEL, sysfs_root=root, worker_logs=False)
    try:
        assert not [i for i in mon.poll(topology).status.incidents if i.kind == "gpu_init_failed"]
        (inc,) = [i for i in mon.poll(seven).status.incidents if i.kind == "gpu_init_failed"]
    finally:
        mon.close()
    assert inc.summary.startswith("1 AMD GPU on the PCI bus is not shown by the backend")
    assert dict(inc.detail)["bdfs"] == (MI300X_BDFS[7],)
    # and the frame lists it under missing_gpus (snapshot --json), the reason saying it is bound but not shown
    mon = KernelFaultMonitor(KERNEL, sysfs_root=root, worker_logs=False)
    try:
        (missing,) = mon.poll(seven).status.missing_gpus
    finally:
        mon.close()
    assert missing.bdf == MI300X_BDFS[7] and "bound to amdgpu but not shown" in missing.json()["reason"]
