"""The fake amdsmi (tests/fakes/amdsmi) against the real 7.0.2 wheel: names, signatures, enum values, error texts.

The real wheel cannot call anything without ``libamd_smi.so``, but with ``ctypes.CDLL`` answering a stub for the
library it imports, so its Python surface can be compared with the fake's (amd.md §1.1).
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.sysfs_tree import build_mi300x_8, build_mi300x_8_partitioned

REPO = Path(__file__).resolve().parents[2]
FAKE = REPO / "tests" / "fakes" / "amdsmi"

COMPARE = r"""
import ctypes, enum, importlib.util, inspect, json, sys
_cdll = ctypes.CDLL
class _Fn:
    def __call__(self, *a, **k):
        return 0
class _Lib:
    def __getattr__(self, name):
        fn = _Fn()
        setattr(self, name, fn)
        return fn
ctypes.CDLL = lambda name, *a, **k: _Lib() if "amd_smi" in str(name) else _cdll(name, *a, **k)
import amdsmi as real
spec = importlib.util.spec_from_file_location("fake_amdsmi", sys.argv[1] + "/__init__.py",
                                              submodule_search_locations=[sys.argv[1]])
fake = importlib.util.module_from_spec(spec)
sys.modules["fake_amdsmi"] = fake
spec.loader.exec_module(fake)
problems = []
def norm(v):
    return int(v) if isinstance(v, enum.Enum) else v
for name in [n for n in dir(fake) if not n.startswith("_") and n[0].islower() or n.startswith("AmdSmi")]:
    f = getattr(fake, name)
    if inspect.ismodule(f):
        continue
    if not hasattr(real, name):
        problems.append(f"{name}: not in the real amdsmi")
        continue
    r = getattr(real, name)
    if inspect.isfunction(f):
        ps = lambda fn: [(p.name, p.kind, norm(p.default)) for p in inspect.signature(fn).parameters.values()]
        if ps(f) != ps(r):
            problems.append(f"{name}: signature {ps(f)} != real {ps(r)}")
    elif isinstance(f, type) and issubclass(f, enum.Enum):
        for m in f:
            if getattr(r, m.name, None) is None or int(getattr(r, m.name)) != int(m):
                problems.append(f"{name}.{m.name}: {int(m)} differs from the real enum")
    elif isinstance(f, type) and issubclass(f, Exception):
        bases = [b.__name__ for b in f.__mro__]
        if bases != [b.__name__ for b in r.__mro__]:
            problems.append(f"{name}: bases {bases} differ")
codes = list(range(0, 60)) + [4294967294, 4294967295, -2]
for c in codes:
    if str(fake.AmdSmiLibraryException(c)) != str(real.AmdSmiLibraryException(c)):
        problems.append(f"AmdSmiLibraryException({c}): {str(fake.AmdSmiLibraryException(c))!r}")
for exc in ("AmdSmiRetryException", "AmdSmiTimeoutException"):
    f, r = getattr(fake, exc)(), getattr(real, exc)()
    if (str(f), f.err_code) != (str(r), r.err_code):
        problems.append(exc)
f = fake.AmdSmiParameterException(3, ctypes.c_void_p)
r = real.AmdSmiParameterException(3, ctypes.c_void_p)
if str(f) != str(r):
    problems.append(f"AmdSmiParameterException: {str(f)!r} != {str(r)!r}")
if str(fake.AmdSmiKeyException("k")) != str(real.AmdSmiKeyException("k")):
    problems.append("AmdSmiKeyException")
# Return shapes: with the stub library every real call "succeeds" on zeroed structs, which still shows its keys.
import os
os.environ["AMDTOP_FAKE_AMDSMI_SYSFS"], os.environ["AMDTOP_FAKE_AMDSMI_PROC"] = sys.argv[2], sys.argv[3]
fake.amdsmi_init()
fh, fh2 = fake.amdsmi_get_processor_handles()[:2]
rh, rh2 = ctypes.c_void_p(1), ctypes.c_void_p(2)
def shape(v):
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    return "scalar"
calls = [
    ("amdsmi_get_gpu_asic_info", ()), ("amdsmi_get_gpu_kfd_info", ()), ("amdsmi_get_gpu_enumeration_info", ()),
    ("amdsmi_get_power_cap_info", ()), ("amdsmi_get_gpu_activity", ()), ("amdsmi_get_gpu_vram_usage", ()),
    ("amdsmi_get_power_info", ()), ("amdsmi_get_clock_info", ("AmdSmiClkType.GFX",)),
    ("amdsmi_get_gpu_process_list", ()), ("amdsmi_get_gpu_memory_total", ("AmdSmiMemoryType.VRAM",)),
    ("amdsmi_get_temp_metric", ("AmdSmiTemperatureType.HOTSPOT", "AmdSmiTemperatureMetric.CURRENT")),
    ("amdsmi_get_gpu_topo_numa_affinity", ()), ("amdsmi_get_gpu_device_bdf", ()),
    ("amdsmi_topo_get_link_type", ("peer",)), ("amdsmi_get_minmax_bandwidth_between_processors", ("peer",)),
]
calls += json.loads(sys.argv[4]) if len(sys.argv) > 4 else []
def args(mod, extra, peer):
    out = []
    for e in extra:
        if e == "peer":
            out.append(peer)
        else:
            cls, member = e.split(".")
            out.append(getattr(getattr(mod, cls), member))
    return out
for name, extra in calls:
    rs = json.dumps(shape(getattr(real, name)(rh, *args(real, extra, rh2))), sort_keys=True)
    fs = json.dumps(shape(getattr(fake, name)(fh, *args(fake, extra, fh2))), sort_keys=True)
    if rs != fs:
        problems.append(f"{name}: returns {fs}, real {rs}")
print(json.dumps(problems))
"""


@pytest.fixture(scope="module")
def real_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wheels = sorted((REPO / ".cache" / "wheels").glob("amdsmi-7.0.2-*.whl"))
    if not wheels:
        pytest.skip("amdsmi 7.0.2 wheel not in .cache/wheels (run-tests downloads it)")
    dest = tmp_path_factory.mktemp("amdsmi-real")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(dest)
    return dest


def test_fake_matches_real_surface(real_wheel: Path, tmp_path: Path) -> None:
    tree = build_mi300x_8(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", COMPARE, str(FAKE), str(tree.root), str(tree.proc_root)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(real_wheel), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    problems = json.loads(out.stdout.strip().splitlines()[-1])
    assert problems == []


PARTITION_CALLS = [
    ["amdsmi_get_gpu_compute_partition", []],
    ["amdsmi_get_gpu_memory_partition", []],
    ["amdsmi_get_gpu_memory_partition_config", []],
    ["amdsmi_get_gpu_accelerator_partition_profile", []],
    ["amdsmi_get_gpu_kfd_info", []],
    ["amdsmi_get_gpu_enumeration_info", []],
]


def test_fake_partition_calls_match_real_surface(real_wheel: Path, tmp_path: Path) -> None:
    tree = build_mi300x_8_partitioned(tmp_path, compute="CPX", memory="NPS4")
    out = subprocess.run(
        [sys.executable, "-c", COMPARE, str(FAKE), str(tree.root), str(tree.proc_root), json.dumps(PARTITION_CALLS)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(real_wheel), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
