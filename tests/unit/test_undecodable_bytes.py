"""Issue 23 item 8: a non-UTF-8 byte in a system file (sysfs, /proc) costs that character, never the command.

The trees are built (tests/fixtures/sysfs_tree.py) and then poisoned with bytes no UTF-8 decoder accepts, in the
files real drivers and processes fill: ``product_name`` (a firmware string), KFD ``properties``, hwmon labels, NUMA
``meminfo``, a process's ``comm`` and ``status``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from amdtop.procinfo import read_binding
from amdtop.report import snapshot_json
from amdtop.sysread import read_text, read_text_or_none
from amdtop.telemetry.amdsmi_backend import AmdsmiBackend
from amdtop.telemetry.sysfs import SysfsBackend
from tests.fixtures.sysfs_tree import SysfsTree, build_mi300x_8

BAD = b"\xff\xfe\xc3"
"""Never valid UTF-8 (0xff/0xfe start nothing, 0xc3 is a lead byte with no continuation)."""


def poison(tree: SysfsTree) -> SysfsTree:
    """Bad bytes in every kind of file the backends read as text."""
    for i in range(len(tree.gpus)):
        (tree.device_dir(i) / "product_name").write_bytes(b"AMD Instinct MI300X " + BAD + b"\n")
    nodes = tree.root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    for props in nodes.glob("*/properties"):
        props.write_bytes(props.read_bytes() + b"vendor_name\xff 1\n")
    for link in nodes.glob("*/io_links/*/properties"):
        link.write_bytes(b"comment " + BAD + b"\n" + link.read_bytes())
    numa = tree.root / "devices" / "system" / "node"
    for meminfo in numa.glob("node*/meminfo"):
        meminfo.write_bytes(BAD + b"\n" + meminfo.read_bytes())
    for label in tree.root.glob("devices/pci0000:00/*/hwmon/*/temp2_label"):
        label.write_bytes(b"junction" + BAD + b"\n")
    (tree.proc_root / "4242" / "comm").write_bytes(b"python" + BAD + b"\n")
    return tree


def test_reader_replaces_undecodable_bytes(tmp_path: Path) -> None:
    path = tmp_path / "product_name"
    path.write_bytes(b"MI300X " + BAD + b"\n")
    with pytest.raises(UnicodeDecodeError):  # what every command died of before
        path.read_text(encoding="utf-8")
    assert read_text(path) == "MI300X \ufffd\ufffd\ufffd\n"
    assert read_text_or_none(path) == "MI300X \ufffd\ufffd\ufffd"
    assert read_text_or_none(tmp_path / "absent") is None


def test_sysfs_backend_reads_a_poisoned_tree(tmp_path: Path) -> None:
    tree = poison(build_mi300x_8(tmp_path))
    backend = SysfsBackend(tree.root, tree.proc_root, clock=lambda: 1.0, hostname="fixture")
    topo = backend.topology()
    assert len(topo.gpus) == 8
    assert topo.gpus[0].name == "AMD Instinct MI300X \ufffd\ufffd\ufffd"
    assert topo.gpus[0].cpu_affinity  # KFD and NUMA still read through their bad lines
    assert topo.numa_nodes[0].mem_total_bytes == 792_000_000 * 1024
    doc = snapshot_json(backend.sample())
    assert doc["gpus"][0]["name"].startswith("AMD Instinct MI300X")
    json.dumps(doc)  # U+FFFD serialises; no surrogates left behind


def test_amdsmi_backend_survives_a_bad_market_name(
    tmp_path: Path, smi: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = build_mi300x_8(tmp_path)
    for i in range(len(tree.gpus)):
        (tree.device_dir(i) / "product_name").write_bytes(b"AMD Instinct MI300X " + BAD + b"\n")
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_SYSFS", str(tree.root))
    monkeypatch.setenv("AMDTOP_FAKE_AMDSMI_PROC", str(tree.proc_root))
    backend = AmdsmiBackend(smi, tree.root, clock=lambda: 1.0, hostname="fixture")
    try:
        # amdsmi decodes market_name as strict UTF-8 (amdsmi_interface.py: ``market_name.decode("utf-8")``).
        with pytest.raises(UnicodeDecodeError):
            smi.amdsmi_get_gpu_asic_info(smi.amdsmi_get_processor_handles()[0])
        topo = backend.topology()
        assert len(topo.gpus) == 8 and topo.gpus[0].name.startswith("AMD GPU")
        assert backend.sample().gpus[0].vram_used_bytes is not None
    finally:
        backend.close()


def test_proc_status_with_a_bad_byte(tmp_path: Path) -> None:
    pid = tmp_path / "77"
    pid.mkdir()
    (pid / "status").write_bytes(b"Name:\tpy" + BAD + b"\nCpus_allowed_list:\t0-3\nMems_allowed_list:\t0\n")
    binding = read_binding(77, tmp_path)
    assert binding is not None and binding.cpus == (0, 1, 2, 3)


@pytest.mark.parametrize("command", [["snapshot", "--json"], ["topo", "--json"], ["topo"]])
def test_cli_on_a_poisoned_tree(tmp_path: Path, command: list[str]) -> None:
    tree = poison(build_mi300x_8(tmp_path))
    cmd = [sys.executable, "-m", "amdtop", *command, "--backend", "sysfs", "--sysfs-root", str(tree.root)]
    out = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in out.stderr
    text = out.stdout.decode("utf-8")
    if "--json" in command:
        doc = json.loads(text)
        assert doc["gpus"][0]["name"] == "AMD Instinct MI300X \ufffd\ufffd\ufffd"


def test_profile_with_a_bad_byte_is_one_line(tmp_path: Path) -> None:
    from amdtop.errors import InputError
    from amdtop.supervisor.profiles import load_profiles

    path = tmp_path / "workers.toml"
    path.write_bytes(b'[[worker]]\nname = "w1"\nmodel = "/m' + BAD + b'"\n')
    with pytest.raises(InputError, match=r"byte 34 is not UTF-8"):
        load_profiles(path)


def test_state_file_with_a_bad_byte_reads(tmp_path: Path) -> None:
    from amdtop.supervisor.state import StateStore

    store = StateStore(tmp_path)
    store.dir.mkdir()
    store.path("w1").write_bytes(b'{"name": "w1", "model": "\xff"')
    rec, why = store.load_checked("w1")
    assert rec is None and why is not None and "corrupt" in why  # judged on its content, not a UnicodeDecodeError


def test_cli_text_on_a_terminal_that_cannot_encode_the_replacement(tmp_path: Path) -> None:
    import os

    tree = poison(build_mi300x_8(tmp_path))
    cmd = [sys.executable, "-m", "amdtop", "snapshot", "--backend", "sysfs", "--sysfs-root", str(tree.root)]
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}  # as a latin-1 or ASCII locale's terminal
    out = subprocess.run(cmd, capture_output=True, timeout=120, check=False, env=env)
    assert out.returncode == 0 and b"Traceback" not in out.stderr, out.stderr.decode(errors="replace")[-2000:]
    assert b"AMD Instinct MI300X ??" in out.stdout
