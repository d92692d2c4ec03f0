"""Worker environment rules on stand-in workers: real processes started with bad environments (their
``/proc/PID/environ`` is what the audit reads), on the simulated XGMI node and a PCIe node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.model import Finding
from amdtop.audit.registry import all_rules, run_audit
from amdtop.supervisor.profiles import Profile
from amdtop.telemetry.sim import SimBackend

XGMI = SimBackend().topology()
PCIE = SimBackend(scenario="pcie-4").topology()
GOOD = {"NCCL_DEBUG": "INFO", "NCCL_MIN_NCHANNELS": "112", "HIP_VISIBLE_DEVICES": "0,1", "PATH": "/usr/bin:/bin"}


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    for name in ("lo", "eth0", "ens7f0np0"):
        (tmp_path / "class" / "net" / name).mkdir(parents=True)
    (tmp_path / "class" / "infiniband" / "mlx5_0").mkdir(parents=True)
    return tmp_path


@pytest.fixture
def spawn() -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str]) -> int:
        proc = subprocess.Popen(["sleep", "60"], env=env)
        procs.append(proc)
        # Until the exec, /proc/PID/environ is pytest's own (the fork's copy): read it only once sleep runs.
        deadline = time.monotonic() + 10
        while Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            assert time.monotonic() < deadline, "the stand-in worker never exec'd"
            time.sleep(0.005)
        return proc.pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


def audit(pid: int, sysroot: Path, *, topology=XGMI, env: dict[str, str] | None = None, rule: str | None = None):  # type: ignore[no-untyped-def]
    profile = Profile("llama", "/m", (0, 1), "auto", 8000, env=tuple((env or {}).items()))
    target = AuditTarget("llama", (0, 1), 8000, pid=pid, pids=(pid,), profile=profile)
    ctx = AuditContext(topology=topology, targets=[target], sys_root=sysroot)
    rules = [r for r in all_rules() if rule is None or r.id == rule]
    return run_audit(ctx, rules=rules)


def only(report, rule_id: str) -> Finding:  # type: ignore[no-untyped-def]
    found = [f for f in report.findings if f.id == rule_id]
    assert len(found) == 1, [f.id for f in report.findings]
    return found[0]


ENV_RULES = (
    "nccl_socket_ifname_missing",
    "nccl_ib_hca_missing",
    "nccl_p2p_forced_off",
    "visible_devices_mismatch",
    "nccl_debug_not_info",
    "rccl_env_topology",
)


def test_a_good_environment_passes_every_env_rule(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "NCCL_SOCKET_IFNAME": "ens7", "NCCL_IB_HCA": "=mlx5_0:1"})
    report = audit(pid, sysroot)
    assert [f.id for f in report.findings if f.id in ENV_RULES] == []
    assert set(ENV_RULES) <= set(report.checked)


@pytest.mark.parametrize("spec", ["ib9", "=eth", "bond0,docker"])
def test_socket_ifname_naming_no_interface(spawn, sysroot: Path, spec: str) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "NCCL_SOCKET_IFNAME": spec})
    f = only(audit(pid, sysroot), "nccl_socket_ifname_missing")
    assert f.severity == "error" and f.evidence[0] == f"/proc/{pid}/environ: NCCL_SOCKET_IFNAME={spec}"
    assert "eth0" in f.evidence[1] and f.set_by == "environment"


def test_socket_ifname_exclusion_list_is_never_missing(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "NCCL_SOCKET_IFNAME": "^docker,lo"})
    assert not [f for f in audit(pid, sysroot).findings if f.id == "nccl_socket_ifname_missing"]


def test_ib_hca_naming_a_missing_device(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "NCCL_IB_HCA": "mlx5_3:1,mlx5_4:1"})
    f = only(audit(pid, sysroot), "nccl_ib_hca_missing")
    assert "mlx5_0" in f.evidence[1]


def test_p2p_disabled_on_xgmi_offers_removing_it_through_the_profile(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    env = {**GOOD, "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    pid = spawn(env)
    f = only(audit(pid, sysroot, env={"NCCL_P2P_DISABLE": "1"}), "nccl_p2p_forced_off")
    assert f.set_by == "profile"
    assert f.fix.to_json() == {
        "kind": "profile_env",
        "changes": {"env.NCCL_P2P_DISABLE": "", "env.NCCL_SHM_DISABLE": ""},
    }


def test_p2p_switches_on_a_pcie_node_are_not_judged(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "LOC"})
    assert not [f for f in audit(pid, sysroot, topology=PCIE).findings if f.id == "nccl_p2p_forced_off"]


def test_visible_devices_disagreeing_with_the_profile(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "HIP_VISIBLE_DEVICES": "2,3", "ROCR_VISIBLE_DEVICES": "0,1,2,3"})
    f = only(audit(pid, sysroot), "visible_devices_mismatch")
    assert "HIP_VISIBLE_DEVICES=2,3 (profile gpus 0,1)" in f.title and "ROCR_VISIBLE_DEVICES" in f.title


def test_nccl_debug_warn_hides_the_transports(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "NCCL_DEBUG": "WARN"})
    f = only(audit(pid, sysroot, env={"NCCL_DEBUG": "WARN"}), "nccl_debug_not_info")
    assert f.severity == "info" and f.fix.changes == (("env.NCCL_DEBUG", "INFO"),)


def test_rccl_settings_judged_against_the_topology(spawn, sysroot: Path) -> None:  # type: ignore[no-untyped-def]
    pid = spawn({**GOOD, "RCCL_ENABLE_XGMI": "1"})
    titles = [f.title for f in audit(pid, sysroot).findings if f.id == "rccl_env_topology"]
    assert titles == ["RCCL_ENABLE_XGMI is not an RCCL variable (ignored)"]
    # The MI300X channel advice is wrong on a PCIe node, where fine-grained PCIe memory matters instead.
    titles = [f.title for f in audit(pid, sysroot, topology=PCIE).findings if f.id == "rccl_env_topology"]
    assert "NCCL_MIN_NCHANNELS=112 on a PCIe node (the 112 advice is for XGMI-connected MI300X)" in titles
    assert "HSA_FORCE_FINE_GRAIN_PCIE unset on a PCIe node" in titles


def test_gone_process_is_skipped_with_the_reason(sysroot: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    report = audit(proc.pid, sysroot, rule="nccl_debug_not_info")
    assert report.checked == ()
    (skip,) = report.skipped
    assert skip.worker == "llama" and "the process is gone" in skip.why


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the reader as another user (setpriv)")
def test_unreadable_environ_of_another_users_process(spawn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # The worker runs as root; the audit runs as nobody, so the kernel denies it the environ and the numa_maps.
    pid = spawn(GOOD)
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]);"
        "from amdtop.audit.context import AuditContext, AuditTarget;"
        "from amdtop.audit.registry import run_audit; from amdtop.telemetry.sim import SimBackend;"
        "t = AuditTarget('llama', (0, 1), pid=int(sys.argv[1]), pids=(int(sys.argv[1]),));"
        "r = run_audit(AuditContext(SimBackend().topology(), targets=[t]));"
        "print(json.dumps(r.to_json()))"
    )
    root = str(Path(__file__).resolve().parents[2])
    out = subprocess.run(
        [
            "setpriv",
            "--reuid",
            "nobody",
            "--regid",
            "nogroup",
            "--clear-groups",
            sys.executable,
            "-c",
            code,
            str(pid),
            root,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    doc = json.loads(out.stdout)
    why = {s["id"]: s["why"] for s in doc["skipped"] if s.get("worker") == "llama"}
    assert "permission denied: another user's process" in why["nccl_p2p_forced_off"]
    assert "permission denied" in why["aiter_off"]
    assert "numa_maps of pid" in why["numa_locality"] and "permission denied" in why["numa_locality"]
    assert doc["findings"] == [] or all(f["worker"] != "llama" for f in doc["findings"] if f["scope"] == "worker")
