"""Per-process GPU engine time from DRM fdinfo (amdgpu), on a built sysfs + /proc tree.

The fdinfo texts are BUILT, not captured: they follow the key names and units of the kernel's DRM client usage
stats (Documentation/gpu/drm-usage-stats.rst: ``drm-pdev``, ``drm-client-id``, ``drm-engine-<name>: <ns> ns``)
and amdgpu's engine names (gfx, compute, dma, dec, enc); no AMD machine was at hand to capture them.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

from amdtop.gpuprocs.fdinfo import FdinfoEngines, parse_fdinfo, process_util
from amdtop.telemetry.amdsmi_backend import AmdsmiBackend
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import MI300X_BDFS, build_mi300x_8


def fdinfo(pdev: str, client: int, gfx_ns: int, compute_ns: int = 0) -> str:
    return (
        "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t1063\n"
        f"drm-driver:\tamdgpu\ndrm-client-id:\t{client}\ndrm-pdev:\t{pdev}\npasid:\t32790\n"
        "drm-memory-vram:\t102400 KiB\ndrm-memory-gtt:\t2048 KiB\ndrm-memory-cpu:\t0 KiB\n"
        f"drm-engine-gfx:\t{gfx_ns} ns\ndrm-engine-compute:\t{compute_ns} ns\ndrm-engine-dma:\t0 ns\n"
    )


def open_render(proc: Path, pid: int, fd: int, minor: int, text: str) -> None:
    (proc / str(pid) / "fd").mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "fdinfo").mkdir(parents=True, exist_ok=True)
    link = proc / str(pid) / "fd" / str(fd)
    if not link.is_symlink():
        os.symlink(f"/dev/dri/renderD{minor}", link)
    (proc / str(pid) / "fdinfo" / str(fd)).write_text(text)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_parse_adds_gfx_and_compute_engine_time() -> None:
    assert parse_fdinfo(fdinfo("0000:05:00.0", 7, 1500, 500).encode()) == ("0000:05:00.0", "7", 2000)
    assert parse_fdinfo(b"pos:\t0\nflags:\t02\n") == (None, None, None)  # not a DRM file


def test_engine_share_between_reads_one_client_counted_once(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    bdf = MI300X_BDFS[0]
    open_render(proc, 4242, 11, 128, fdinfo(bdf, 7, 0))
    open_render(proc, 4242, 12, 128, fdinfo(bdf, 7, 0))  # a dup of the same client
    (proc / "4242" / "fd").joinpath("3").symlink_to("/dev/null")  # not a render node
    clock = Clock()
    engines = FdinfoEngines(str(proc), clock)
    first = engines.read([4242])
    assert [c.util_pct for c in first[4242]] == [None]
    clock.now += 2.0
    for fd in (11, 12):
        open_render(proc, 4242, fd, 128, fdinfo(bdf, 7, 1_200_000_000, 300_000_000))
    (client,) = engines.read([4242])[4242]
    assert (client.pdev, client.minor, client.util_pct) == (bdf, 128, 75.0)  # 1.5 s busy of 2 s
    assert process_util([client], bdf, None) == 75.0
    assert process_util([client], MI300X_BDFS[1], None) is None  # another GPU
    assert process_util([client], bdf, 129) is None  # another partition's render node
    assert engines.read([]) == {}  # left the GPUs: forgotten


def test_sysfs_backend_reports_the_share_on_the_kfd_process(tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    proc = tree.proc_root
    open_render(proc, 4242, 20, 128, fdinfo(MI300X_BDFS[0], 3, 0))
    backend = SysfsBackend(tree.root, proc)
    clock = Clock()
    backend._engines = FdinfoEngines(str(proc), clock)  # the test's clock instead of time.monotonic
    snap = backend.sample()
    assert snap.gpus[0].processes[0].gpu_util_pct is None  # first read: nothing to compare with
    clock.now += 1.0
    open_render(proc, 4242, 20, 128, fdinfo(MI300X_BDFS[0], 3, 400_000_000))
    snap = backend.sample()
    (p0,) = snap.gpus[0].processes
    assert (p0.pid, p0.gpu_util_pct) == (4242, 40.0)
    assert snap.gpus[1].processes[0].gpu_util_pct is None  # the same process on GPU 1: no render client there
    assert snap.gpus[4].processes[0].gpu_util_pct is None  # pid 5151: no fdinfo at all (another user's, hidden)


def test_amdsmi_engine_usage_delta_is_the_process_share(tmp_path: Path, smi: ModuleType, monkeypatch: Any) -> None:
    tree = build_mi300x_8(tmp_path)
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(tree.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(tree.proc_root))
    clock = Clock()
    backend = AmdsmiBackend(smi, tree.root, clock=clock, hostname="fixture")
    listed = smi.amdsmi_get_gpu_process_list
    busy = {"ns": 0}

    def with_engine_time(handle: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = listed(handle)
        for p in out:
            p["engine_usage"] = {"gfx": busy["ns"], "enc": 0}  # cumulative GFX engine time, ns
        return out

    monkeypatch.setattr(smi, "amdsmi_get_gpu_process_list", with_engine_time)
    assert backend.sample().gpus[0].processes[0].gpu_util_pct is None
    clock.now += 2.0
    busy["ns"] = 500_000_000
    assert backend.sample().gpus[0].processes[0].gpu_util_pct == 25.0
