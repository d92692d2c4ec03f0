"""The amdsmi backend against the fake amdsmi 7.0.2 package (tests/fakes/amdsmi) reading the same fixture trees."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from amdtop.errors import BackendUnavailable
from amdtop.report import snapshot_json
from amdtop.telemetry.amdsmi_backend import AmdsmiBackend, load_amdsmi
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import SysfsTree, build_mi300x_8, build_pcie_4


def _point(monkeypatch: pytest.MonkeyPatch, tree: SysfsTree) -> None:
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(tree.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(tree.proc_root))


def _both(smi: ModuleType, tree: SysfsTree) -> tuple[SysfsBackend, AmdsmiBackend]:
    kw: dict[str, Any] = {"clock": lambda: 1.0, "hostname": "fixture"}
    return SysfsBackend(tree.root, tree.proc_root, **kw), AmdsmiBackend(smi, tree.root, **kw)


def _doc(backend: SysfsBackend | AmdsmiBackend) -> dict[str, Any]:
    doc = snapshot_json(backend.sample())
    doc.pop("backend")
    return doc


SCENARIOS: dict[str, Callable[[Path], SysfsTree]] = {
    "mi300x-8": build_mi300x_8,
    "pcie-4": build_pcie_4,
    "pcie-4-numa-unknown": lambda p: build_pcie_4(p, numa_override={3: -1}),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_same_snapshot_as_sysfs(
    scenario: str, tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = SCENARIOS[scenario](tmp_path)
    _point(monkeypatch, tree)
    sysfs, amd = _both(smi, tree)
    a, s = _doc(amd), _doc(sysfs)
    assert a == s
    assert amd.sample().backend == "amdsmi"
    assert len(a["gpus"]) == len(tree.gpus) and a["gpus"][0]["power_w"] is not None


def test_vanishing_gpu_same_as_sysfs(tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = build_mi300x_8(tmp_path)
    _point(monkeypatch, tree)
    sysfs, amd = _both(smi, tree)
    tree.vanish(6)
    a, s = _doc(amd), _doc(sysfs)
    assert a == s
    assert [g["lost"] for g in a["gpus"]] == [i == 6 for i in range(8)]
    assert [f["kind"] for f in a["flags"]] == ["gpu_lost"] and a["flags"][0]["gpus"] == [6]
    err = amd.sample().gpus[6].error
    assert err is not None and "NOT_SUPPORTED" in err  # rocm_smi maps a vanished file (ENOENT) to NOT_SUPPORTED


def test_index_order_is_kfd_order_not_handle_order(
    tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_pcie_4(tmp_path)  # DRM card numbers run opposite to KFD node order
    _point(monkeypatch, tree)
    smi.amdsmi_init()
    handle_bdfs = [smi.amdsmi_get_gpu_device_bdf(h) for h in smi.amdsmi_get_processor_handles()]
    smi.amdsmi_shut_down()
    amd = AmdsmiBackend(smi, tree.root)
    assert handle_bdfs == list(reversed([g.bdf for g in amd.topology().gpus]))


def test_mi300x_quirks(tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = build_mi300x_8(tmp_path)
    _point(monkeypatch, tree)
    amd = AmdsmiBackend(smi, tree.root)
    h = smi.amdsmi_get_processor_handles()[2]
    with pytest.raises(smi.AmdSmiLibraryException) as info:
        smi.amdsmi_get_temp_metric(h, smi.AmdSmiTemperatureType.EDGE, smi.AmdSmiTemperatureMetric.CURRENT)
    assert info.value.get_error_code() == 2
    assert str(info.value) == "Error code:\n\t2 | AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"
    power = smi.amdsmi_get_power_info(h)
    assert power["current_socket_power"] == 190 and power["average_socket_power"] == "N/A"
    assert smi.amdsmi_get_gpu_vram_usage(h)["vram_total"] == 206_141_652_992 // 1024**2  # MB here, bytes elsewhere
    s = amd.sample().gpus[2]
    assert (s.temp_c, s.mem_temp_c, s.power_w) == (42.0, 38.0, 190.0)


def test_field_errors_and_na_are_none(tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = build_mi300x_8(tmp_path)
    (tree.device_dir(5) / "mem_busy_percent").unlink()  # umc_activity comes back "N/A"
    _point(monkeypatch, tree)
    amd = AmdsmiBackend(smi, tree.root)
    fail = smi.amdsmi_interface._FAKE_FAIL
    fail[("amdsmi_get_power_info", tree.gpus[1].bdf)] = 10  # NO_PERM
    fail[("amdsmi_get_gpu_process_list", tree.gpus[0].bdf)] = 2
    fail[("amdsmi_get_gpu_activity", tree.gpus[4].bdf)] = 9  # RETRY: transient, not lost
    snap = amd.sample()
    assert snap.flags == ()
    assert snap.gpus[1].power_w is None and snap.gpus[1].util_pct == 15.0
    assert snap.gpus[0].processes == () and snap.gpus[0].power_w == 150.0
    assert snap.gpus[4].util_pct is None and not snap.gpus[4].lost and snap.gpus[4].vram_used_bytes is not None
    assert snap.gpus[5].mem_util_pct is None and snap.gpus[5].util_pct == 55.0
    assert snap.gpus[3].processes[0].name == "python3"


def test_init_without_driver_is_unavailable(smi: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMDTOP_FAKE_AMDSMI_SYSFS", raising=False)
    with pytest.raises(
        BackendUnavailable, match=r"^amdsmi: init failed \(AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded\)$"
    ):
        AmdsmiBackend(smi)


def test_handles_are_new_objects_with_equal_value(
    tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    _point(monkeypatch, build_pcie_4(tmp_path))
    smi.amdsmi_init()
    a, b = smi.amdsmi_get_processor_handles()[0], smi.amdsmi_get_processor_handles()[0]
    assert a != b and a.value == b.value
    with pytest.raises(smi.AmdSmiParameterException):
        smi.amdsmi_get_gpu_activity(0)
    smi.amdsmi_shut_down()


def test_loader_swallows_prints_and_keyerror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    pkg = tmp_path / "amdsmi"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import os\nprint('/opt/rocm/lib/libamd_smi.so: cannot open shared object file')\n"
        "os.write(1, b'from C\\n')\nraise KeyError('libamd_smi.so')\n"
    )
    for name in [m for m in sys.modules if m == "amdsmi" or m.startswith("amdsmi.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BackendUnavailable, match=r"^amdsmi: libamd_smi.so not found$"):
        load_amdsmi()
    out, err = capfd.readouterr()
    assert out == "" and err == ""
