"""Choosing a backend: auto order, the real (broken) amdsmi wheel, bad input, and sysfs end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from amdtop import telemetry
from amdtop.cli.main import main
from amdtop.errors import NoGpuFound
from amdtop.telemetry.base import BackendOptions
from tests.fixtures.sysfs_tree import MI300X_BDFS, build_mi300x_8

REPO = Path(__file__).resolve().parents[2]
WHEELS = REPO / ".cache" / "wheels"


def amdtop(*args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMDTOP_FAKE")}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run([sys.executable, "-m", "amdtop", *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build_mi300x_8(tmp_path_factory.mktemp("mi300x"))


@pytest.fixture(scope="module")
def real_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The PyPI amdsmi 7.0.2 wheel unpacked (run-tests downloads it to .cache/wheels)."""
    wheels = sorted(WHEELS.glob("amdsmi-7.0.2-*.whl"))
    if not wheels:
        pytest.skip("amdsmi 7.0.2 wheel not in .cache/wheels (run-tests downloads it)")
    dest = tmp_path_factory.mktemp("amdsmi-wheel")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extractall(dest)
    return dest


def test_snapshot_json_sysfs_end_to_end(tree) -> None:  # type: ignore[no-untyped-def]
    out = amdtop("snapshot", "--json", "--backend", "sysfs", "--sysfs-root", str(tree.root))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["backend"] == "sysfs"
    assert [g["bdf"] for g in doc["gpus"]] == list(MI300X_BDFS)
    assert [g["numa_node"] for g in doc["gpus"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g["power_w"] for g in doc["gpus"]] == [150.0 + 20 * i for i in range(8)]
    assert {(lk["type"], lk["hops"], lk["weight"]) for lk in doc["links"]} == {("XGMI", 1, 15)}
    assert [n["cpulist"] for n in doc["numa_nodes"]] == ["0-31,64-95", "32-63,96-127"]


def test_topo_text_sysfs(tree) -> None:  # type: ignore[no-untyped-def]
    out = amdtop("topo", "--backend", "sysfs", "--sysfs-root", str(tree.root))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:8] == [f"GPU{i}" for i in range(8)]
    assert "XGMI" in lines[1]


def test_real_wheel_is_broken_here(real_wheel: Path) -> None:
    """Ground truth for the next tests: without libamd_smi.so the wheel prints and raises KeyError."""
    env = {**os.environ, "PYTHONPATH": str(real_wheel)}
    out = subprocess.run([sys.executable, "-c", "import amdsmi"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 1 and "KeyError: 'libamd_smi.so'" in out.stderr
    assert "Unable to find libamd_smi.so" in out.stdout


def test_auto_with_broken_amdsmi_falls_back_silently(tree, real_wheel: Path) -> None:  # type: ignore[no-untyped-def]
    out = amdtop("snapshot", "--json", "--backend", "auto", "--sysfs-root", str(tree.root), pythonpath=real_wheel)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["backend"] == "sysfs"  # the whole stdout is one JSON document
    assert "libamd_smi" not in out.stdout + out.stderr


def test_explicit_amdsmi_with_broken_wheel_is_one_line_exit_1(tree, real_wheel: Path) -> None:  # type: ignore[no-untyped-def]
    out = amdtop("snapshot", "--json", "--backend", "amdsmi", "--sysfs-root", str(tree.root), pythonpath=real_wheel)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == "amdtop: error: amdsmi: libamd_smi.so not found\n"


def test_auto_with_nothing_points_to_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "AUTO_ORDER", ("amdsmi", "sysfs"))
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi -> ImportError, as on a box without it
    with pytest.raises(NoGpuFound) as info:
        telemetry.open_backend("auto", BackendOptions(sysfs_root=tmp_path))
    text = str(info.value)
    assert "amdsmi: " in text and "sysfs: no amdgpu card" in text and "--demo" in text and "\n" not in text


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--backend", "bogus"], "--backend"),
        (["--backend", "sysfs", "--sysfs-root", "{missing}"], "--sysfs-root"),
        (["--backend", "sysfs", "--sysfs-root", "{file}"], "--sysfs-root"),
        (["--backend", "auto", "--sysfs-root", "{file}"], "--sysfs-root"),
    ],
)
def test_bad_input_one_line_exit_2(
    args: list[str], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("not a tree\n")
    argv = ["snapshot", "--json"] + [a.format(missing=tmp_path / "nope", file=tmp_path / "file") for a in args]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse rejects --backend itself
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("amdtop: error:") and field in err


def test_unreadable_sysfs_root_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Tests may run as root, which reads through any mode bits, so the permission check is made to fail.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if Path(p) == tmp_path else real_access(p, m))
    assert main(["snapshot", "--backend", "sysfs", "--sysfs-root", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("amdtop: error: --sysfs-root:") and "not readable" in err


def test_amd_extra_installs_amdsmi() -> None:
    """``pip install amdtop[amd]`` brings the amdsmi bindings (pyproject's ``amd`` extra, as installed)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in requires("amdtop") or []]
    amd = [r for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "amd"})]
    assert [r.name for r in amd] == ["amdsmi"], reqs
    assert not any(r.name == "amdsmi" and r.marker is None for r in reqs)  # the base install does not need it
