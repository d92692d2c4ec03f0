"""Issue 13 item 9: implausible telemetry (1e29 % or -5 % busy, negative memory, absurd power/temperature) is shown and
exported as unknown, never as it was read (sysfs fixture tree with the values written into its files)."""

from __future__ import annotations

from pathlib import Path

from amdtop.model import GpuProcess, GpuSample
from amdtop.telemetry.plausible import plausible
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import build_mi300x_8


def test_sysfs_absurd_values_become_unknown(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")
    dev = tree.device_dir(1)
    (dev / "gpu_busy_percent").write_text("100000000000000000000000000000\n")  # 1e29 %
    (tree.device_dir(2) / "gpu_busy_percent").write_text("-5\n")
    (dev / "mem_info_vram_used").write_text("-4096\n")
    snap = backend.sample()
    one, two, three = snap.gpus[1], snap.gpus[2], snap.gpus[3]
    assert one.util_pct is None and one.vram_used_bytes is None and not one.lost
    assert two.util_pct is None
    assert three.util_pct is not None and 0 <= three.util_pct <= 100 and three.vram_used_bytes is not None
    assert one.power_w is not None and one.temp_c is not None  # the plausible rest of the GPU stays


def test_plausible_bounds() -> None:
    s = GpuSample(0, util_pct=101.0, mem_util_pct=float("nan"), vram_used_bytes=300, vram_total_bytes=200,
                  power_w=1e9, temp_c=511.0, mem_temp_c=-273.0, sclk_mhz=-1.0, mclk_mhz=1300.0,
                  processes=(GpuProcess(1, "a", -1), GpuProcess(2, "b", 100)))  # fmt: skip
    p = plausible(s)
    assert (p.util_pct, p.mem_util_pct, p.vram_used_bytes, p.power_w, p.temp_c, p.mem_temp_c, p.sclk_mhz) == (None,) * 7
    assert p.vram_total_bytes == 200 and p.mclk_mhz == 1300.0
    assert p.processes == (GpuProcess(1, "a", None), GpuProcess(2, "b", 100))
    good = GpuSample(0, util_pct=100.0, vram_used_bytes=0, vram_total_bytes=200, power_w=750.0, temp_c=90.0)
    assert plausible(good) is good
