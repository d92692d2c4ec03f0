"""Node and gate rules of the audit on built sysfs/proc trees (tests/fixtures/audit_tree.py): one tree per rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.audit.context import AuditTarget
from amdtop.audit.registry import all_rules, run_audit
from tests.fixtures.audit_tree import GIB, context, healthy_node, set_vram_used, write
from tests.fixtures.sysfs_tree import SysfsTree, build_mi300x_8, build_mi300x_8_partitioned, build_pcie_4

NODE_RULES = {
    "iommu_pt_missing",
    "cpu_governor",
    "power_cap_below_default",
    "pcie_link_degraded",
    "xgmi_link_down",
    "numa_balancing_on",
    "vram_orphaned",
    "ecc_uncorrectable",
    "gpu_hot_idle",
}


@pytest.fixture
def tree(tmp_path: Path) -> SysfsTree:
    return healthy_node(build_mi300x_8(tmp_path))


def ids(tree: SysfsTree, targets: list[AuditTarget] | None = None) -> dict[str, list[str]]:
    report = run_audit(context(tree, targets))
    out: dict[str, list[str]] = {}
    for f in report.findings:
        out.setdefault(f.id, []).append(f.title)
    return out


def test_healthy_node_passes_every_node_rule_and_says_it_ran_them(tree: SysfsTree) -> None:
    report = run_audit(context(tree))
    assert report.findings == ()
    assert set(report.checked) >= NODE_RULES
    # Worker rules could not run (no worker): each says so instead of passing silently.
    assert {s.id for s in report.skipped} >= {"aiter_off", "numa_locality", "nccl_p2p_forced_off"}
    assert not set(report.checked) & {s.id for s in report.skipped}


def test_iommu_pt_missing(tree: SysfsTree) -> None:
    write(tree, "cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/sda1 amd_iommu=on\n", proc=True)
    found = run_audit(context(tree)).findings
    (f,) = [f for f in found if f.id == "iommu_pt_missing"]
    assert f.fix.kind == "command" and "iommu=pt" in (f.fix.command or "")
    assert "amd_iommu=on" in f.evidence[0]


def test_numa_balancing_on_offers_the_sysctl(tree: SysfsTree) -> None:
    write(tree, "sys/kernel/numa_balancing", "1\n", proc=True)
    (f,) = [f for f in run_audit(context(tree)).findings if f.id == "numa_balancing_on"]
    assert f.fix.to_json() == {"kind": "command", "command": "sudo sysctl kernel.numa_balancing=0", "root": True}


def test_cpu_governor_powersave(tree: SysfsTree) -> None:
    write(tree, "devices/system/cpu/cpu2/cpufreq/scaling_governor", "powersave\n")
    assert ids(tree)["cpu_governor"] == ["CPU governor powersave (not performance)"]


def test_power_cap_below_default(tree: SysfsTree) -> None:
    hw = next((tree.device_dir(3) / "hwmon").glob("hwmon*"))
    (hw / "power1_cap").write_text("500000000\n")
    assert ids(tree)["power_cap_below_default"] == ["GPU 3 power cap 500 W below its default 750 W"]


def test_pcie_width_below_max_even_at_idle(tree: SysfsTree) -> None:
    (tree.device_dir(5) / "current_link_width").write_text("8\n")
    for gpu, busy in ((6, 0), (7, 75)):
        (tree.device_dir(gpu) / "current_link_speed").write_text("16.0 GT/s PCIe\n")
        tree.set_busy(gpu, busy)
    titles = ids(tree)["pcie_link_degraded"]
    # GPU 6's lower speed while idle is power saving; GPU 5's lost lanes and busy GPU 7's lower speed are not.
    assert titles == ["GPU 5 PCIe link at width x8 of x16", "GPU 7 PCIe link at speed 16.0 GT/s PCIe of 32.0 GT/s PCIe"]


def test_xgmi_link_down_inside_the_fabric(tmp_path: Path) -> None:
    tree = healthy_node(build_mi300x_8(tmp_path))
    # GPU 2's XGMI io_link to GPU 5 (KFD node 7) turns into a PCIe path: that link is down.
    links = tree.root / "class/kfd/kfd/topology/nodes/4/io_links"
    for link in links.iterdir():
        text = (link / "properties").read_text()
        if "node_to 7\n" in text:
            (link / "properties").write_text(text.replace("type 11", "type 2").replace("weight 15", "weight 40"))
    titles = ids(tree).get("xgmi_link_down")
    assert titles and "2" in titles[0] and "5" in titles[0]


def test_ecc_uncorrectable_and_retired_pages(tree: SysfsTree) -> None:
    write(tree, "devices/pci0000:00/0000:46:00.0/ras/umc_err_count", "ue: 2\nce: 11\n")
    write(tree, "devices/pci0000:00/0000:85:00.0/ras/gpu_vram_bad_pages", "0x00000001d2a4 : 0x00001000 : R\n")
    titles = sorted(ids(tree)["ecc_uncorrectable"])
    assert titles == [
        "GPU 2: uncorrectable ECC errors or retired VRAM pages",
        "GPU 4: uncorrectable ECC errors or retired VRAM pages",
    ]


def test_vram_held_by_no_live_process(tree: SysfsTree) -> None:
    set_vram_used(tree, 6, 40 * GIB)
    (f,) = [f for f in run_audit(context(tree)).findings if f.id == "vram_orphaned"]
    assert f.gpus == (6,) and "GPU 6: 40.0 GiB in use, 0.0 GiB held by live processes" in f.evidence


def test_gpu_hot_at_idle(tree: SysfsTree) -> None:
    hw = next((tree.device_dir(7) / "hwmon").glob("hwmon*"))
    (hw / "temp2_input").write_text("83000\n")
    (tree.device_dir(7) / "gpu_busy_percent").write_text("0\n")
    assert ids(tree)["gpu_hot_idle"] == ["GPU 7 83 °C at idle (>= 70)"]


def test_partition_modes_mixed_in_a_tp_group(tmp_path: Path) -> None:
    tree = healthy_node(build_mi300x_8_partitioned(tmp_path, "SPX", "NPS1"))
    (tree.device_dir(1) / "current_compute_partition").write_text("DPX\n")
    group = AuditTarget("llama", (0, 1))
    (f,) = [f for f in run_audit(context(tree, [group])).findings if f.id == "partition_mixed"]
    assert f.evidence == ("GPU 0: SPX / NPS1", "GPU 1: DPX / NPS1")


def test_pcie_node_skips_fabric_rule_with_the_reason(tmp_path: Path) -> None:
    tree = healthy_node(build_pcie_4(tmp_path))
    report = run_audit(context(tree))
    assert ("xgmi_link_down", "no XGMI/NVLink fabric on this node") in [(s.id, s.why) for s in report.skipped]


def test_missing_inputs_are_skipped_not_passed(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)  # no cmdline, no cpufreq, no cap defaults, no max_link files in /proc or /sys
    report = run_audit(context(tree))
    why = {s.id: s.why for s in report.skipped}
    assert why["iommu_pt_missing"].endswith("cmdline unreadable")
    assert "cpufreq absent" in why["cpu_governor"]
    assert why["power_cap_below_default"] == "no GPU exposes hwmon power1_cap and power1_cap_default"
    assert "numa_balancing" in why["numa_balancing_on"]
    for rule_id in ("iommu_pt_missing", "cpu_governor", "power_cap_below_default", "pcie_link_degraded"):
        assert rule_id not in report.checked


def test_every_rule_has_a_unique_id() -> None:
    rules = [r.id for r in all_rules()]
    assert len(rules) == len(set(rules)) and {r.id for r in all_rules() if r.gate} == {
        "vram_orphaned",
        "leftover_vllm",
        "free_vram_spread",
        "ecc_uncorrectable",
        "partition_mixed",
        "gpu_hot_idle",
    }


def test_gpus_failed_init_from_the_pci_bus(tree: SysfsTree) -> None:
    from tests.fixtures.sysfs_tree import MI300X_BDFS

    # the node's own 8 GPUs are on its bus with amdgpu bound, and a ninth accelerator sits there with no driver
    bus = tree.root / "bus" / "pci" / "devices"
    bus.mkdir(parents=True)
    for i, bdf in enumerate((*MI300X_BDFS, "0000:f5:00.0")):
        dev = tree.root / "devices" / "pci0000:00" / bdf
        dev.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", "0x1002"), ("device", "0x74a1"), ("class", "0x120000")):
            (dev / name).write_text(value + "\n")
        if i < 8:
            (tree.root / "bus" / "pci" / "drivers" / "amdgpu").mkdir(parents=True, exist_ok=True)
            (dev / "driver").symlink_to(tree.root / "bus" / "pci" / "drivers" / "amdgpu")
        (bus / bdf).symlink_to(dev)
    (f,) = [f for f in run_audit(context(tree)).findings if f.id == "gpus_failed_init"]
    assert f.severity == "error" and f.title == "1 AMD GPU on the PCI bus failed driver init"
    assert f.evidence == ("0000:f5:00.0: AMD 0x74a1 class 0x120000, driver none bound",)
    assert "power cycle" not in (f.fix.advice or "") and "modprobe amdgpu" in (f.fix.advice or "")
