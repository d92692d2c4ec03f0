"""``amdtop audit``: the JSON contract, bad input, and ``--fix`` through the retune path on a real stand-in worker."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest
import tomlkit

from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.registry import all_rules, run_audit
from amdtop.cli.main import main
from amdtop.errors import InputError
from amdtop.model import Topology
from amdtop.supervisor.retune import apply_changes


def test_json_contract_on_the_demo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--demo", "--state-dir", str(tmp_path), "audit", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) >= {"findings", "checked", "skipped"}
    every = {r.id for r in all_rules()}
    # Every rule either ran or says why it did not.
    assert set(doc["checked"]) | {s["id"] for s in doc["skipped"]} == every
    for f in doc["findings"]:
        assert set(f) >= {"id", "severity", "scope", "worker", "gpus", "title", "evidence", "impact", "fix", "source"}
        assert f["fix"]["kind"] in ("retune", "profile_env", "command", "none")


def test_fix_of_an_unknown_finding_is_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--demo", "--state-dir", str(tmp_path), "audit", "--fix", "no_such_rule@x"]) == 2
    assert capsys.readouterr().err.startswith("amdtop: error: audit --fix: no finding 'no_such_rule@x' now;")


def test_fix_is_refused_under_readonly(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--demo", "--readonly", "--state-dir", str(tmp_path), "audit", "--fix", "aiter_off@x"]) == 2
    assert "--readonly: audit --fix is disabled" in capsys.readouterr().err


def test_retune_switch_values() -> None:
    doc = tomlkit.parse('[[worker]]\nname = "a"\n[worker.args]\nenforce-eager = true\n')
    assert apply_changes(doc, "a", {"enforce-eager": "false"}) == [("enforce-eager", True, False)]
    with pytest.raises(InputError, match=r"worker\[a\]\.args\.enforce-eager: 'maybe' is not true or false"):
        apply_changes(doc, "a", {"enforce-eager": "maybe"})


def test_garbage_numa_maps_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "numa_maps").write_text("this is not numa_maps\n\x00\x01garbage\n")
    (tmp_path / "77" / "environ").write_bytes(b"A=1\0")
    ctx = AuditContext(
        Topology((), (), ()), targets=[AuditTarget("w", (), pid=77, pids=(77,), numa_node=0)], proc_root=tmp_path
    )
    report = run_audit(ctx, rules=[r for r in all_rules() if r.id == "numa_locality"])
    assert report.skipped[0].why == "numa_maps of pid 77 is not numa_maps (no 'ADDRESS policy ...' line)"
    assert report.locality == (("w", None),)


def test_far_memory_from_numa_maps(tmp_path: Path) -> None:
    # Built numa_maps lines (format of the kernel's show_numa_map): 3/4 of the pages on node 1, the GPUs on node 0.
    (tmp_path / "78").mkdir()
    (tmp_path / "78" / "numa_maps").write_text(
        "55d0c0a00000 default file=/usr/bin/python3.11 mapped=100 N0=100 kernelpagesize_kB=4\n"
        "7f1c00000000 bind:1 anon=300 dirty=300 active=0 N1=300 kernelpagesize_kB=4\n"
    )
    from amdtop.telemetry.sim import SimBackend

    ctx = AuditContext(
        SimBackend().topology(), targets=[AuditTarget("w", (0,), pid=78, pids=(78,))], proc_root=tmp_path
    )
    report = run_audit(ctx, rules=[r for r in all_rules() if r.id == "numa_locality"])
    (f,) = report.findings
    assert f.title == "only 25.0 % of its memory is on node 0 (its GPUs' node)"
    assert f.evidence == ("/proc/78/numa_maps: N0=0MiB N1=1MiB (25.0 % local)",)
    assert report.locality == (("w", 25.0),)


def test_own_process_numa_maps_is_read() -> None:
    ctx = AuditContext(Topology((), (), ()))
    kib = ctx.numa_kib(os.getpid())
    assert sum(kib.values()) > 1024  # this interpreter has more than a MiB resident


SLEEPER = "import time\ntime.sleep(600)\n"


def test_fix_applies_profile_env_through_retune_and_restarts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "prog.py").write_text(SLEEPER)
    cfg = tmp_path / "workers.toml"
    cfg.write_text(
        textwrap.dedent(f"""\
        # operator's comment, kept by the retune
        [[worker]]
        name = "llama"
        model = "/m"
        gpus = [0, 1]
        numa_node = "none"
        port = 18741
        command = ["{sys.executable}", "{tmp_path / "prog.py"}"]
        [worker.env]
        NCCL_DEBUG = "WARN"
        """)
    )
    argv = ["--backend", "sim", "--config", str(cfg), "--state-dir", str(tmp_path / "state")]
    try:
        assert main([*argv, "workers", "launch", "llama"]) == 0
        capsys.readouterr()
        assert main([*argv, "audit", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        ids = {f["fix_id"]: f for f in doc["findings"]}
        f = ids["nccl_debug_not_info@llama"]
        assert f["set_by"] == "profile" and f["fix"] == {"kind": "profile_env", "changes": {"env.NCCL_DEBUG": "INFO"}}
        # No terminal to confirm on: --yes is required.
        assert main([*argv, "audit", "--fix", "nccl_debug_not_info@llama"]) == 2
        assert "confirm with --yes" in capsys.readouterr().err
        assert main([*argv, "audit", "--fix", "nccl_debug_not_info@llama", "--yes"]) == 0
        err = capsys.readouterr().err
        assert "env.NCCL_DEBUG: WARN -> INFO" in err and "applied nccl_debug_not_info@llama" in err
        assert 'NCCL_DEBUG = "INFO"' in cfg.read_text() and "operator's comment" in cfg.read_text()
        assert main([*argv, "workers", "status", "--json"]) == 0
        (st,) = json.loads(capsys.readouterr().out)
        assert st["restarts"] == 1 and st["state"] in ("starting", "ready")
        assert set(st["numa_locality"]) == {"local_pct"}
        assert main([*argv, "audit", "--json"]) == 0
        assert "nccl_debug_not_info@llama" not in {x["fix_id"] for x in json.loads(capsys.readouterr().out)["findings"]}
    finally:
        main([*argv, "workers", "stop", "llama", "--grace", "0.2"])


def test_rank_bound_off_its_gpus_node_offers_numa_retune() -> None:
    import subprocess

    from amdtop.model import GpuInfo, NumaNode, WorkerState, WorkerStatus
    from amdtop.supervisor.profiles import Profile

    # GPU 0 sits on node 1 (CPUs 40-47, none of which this host has); the stand-in rank runs on this host's CPUs.
    topo = Topology(
        (GpuInfo(0, "AMD Instinct MI300X", "0000:05:00.0", 1),),
        (),
        (NumaNode(0, tuple(range(40))), NumaNode(1, tuple(range(40, 48)))),
    )
    proc = subprocess.Popen(["sleep", "60"])
    try:
        st = WorkerStatus("w", WorkerState.READY, (0,), pid=proc.pid, pids=(proc.pid,), rank_pids=((0, proc.pid),))
        target = AuditTarget(
            "w",
            (0,),
            pid=proc.pid,
            pids=(proc.pid,),
            rank_pids=((0, proc.pid),),
            status=st,
            profile=Profile("w", "/m", (0,), "none", 8000),
        )
        report = run_audit(
            AuditContext(topo, targets=[target]), rules=[r for r in all_rules() if r.id == "numa_binding"]
        )
        (f,) = report.findings
        assert f.title.startswith(f"TP rank 0 (pid {proc.pid}) runs on CPUs") and "GPUs 0 on node 1" in f.title
        assert f.fix.to_json() == {"kind": "retune", "changes": {"numa_node": "auto"}}
    finally:
        proc.kill()
        proc.wait()


def test_numa_bind_given_but_vllm_processes_unbound() -> None:
    import subprocess

    from amdtop.model import GpuInfo, NumaNode

    # A two-node view of this host's two CPUs: an unpinned process may run on both nodes' CPUs.
    topo = Topology((GpuInfo(0, "AMD Instinct MI300X", "0000:05:00.0", 0),), (), (NumaNode(0, (0,)), NumaNode(1, (1,))))
    api = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "serve", "/m", "--numa-bind"])
    rank = subprocess.Popen(["VLLM::Worker_TP0", "60"], executable="/bin/sleep")
    try:
        for _ in range(200):  # until exec has put the title in place
            if Path(f"/proc/{rank.pid}/cmdline").read_bytes().startswith(b"VLLM::"):
                break
            time.sleep(0.01)
        target = AuditTarget("w", (0,), pid=api.pid, pids=(api.pid, rank.pid), rank_pids=((0, rank.pid),))
        report = run_audit(
            AuditContext(topo, targets=[target]), rules=[r for r in all_rules() if r.id == "numa_bind_no_effect"]
        )
        (f,) = report.findings
        assert f.severity == "error" and "vllm-project/vllm/issues/55416" in f.source
        assert f.evidence[1] == f"/proc/{rank.pid}/status: Cpus_allowed_list 0-1, Mems_allowed_list 0"
    finally:
        for p in (api, rank):
            p.kill()
            p.wait()


def test_dashboard_auditor_rereads_a_process_only_after_the_ttl(tmp_path: Path) -> None:
    from amdtop.audit.auditor import Auditor
    from amdtop.model import NumaNode, WorkerState, WorkerStatus

    (tmp_path / "79").mkdir()
    maps = tmp_path / "79" / "numa_maps"
    maps.write_text("7f1c00000000 default anon=10 N0=10 kernelpagesize_kB=4\n")
    (tmp_path / "79" / "environ").write_bytes(b"NCCL_DEBUG=INFO\0")
    now = [0.0]
    auditor = Auditor(proc_root=tmp_path, sys_root=tmp_path, clock=lambda: now[0], every_s=30.0)
    worker = WorkerStatus("w", WorkerState.READY, (), pid=79, pids=(79,), numa_node=0)
    from amdtop.model import NodeSnapshot

    snap = NodeSnapshot("sim", "h", 0.0, Topology((), (), (NumaNode(0, (0,)), NumaNode(1, (1,)))), ())
    assert auditor.maybe_run(snap, [worker], ()).locality == (("w", 100.0),)  # type: ignore[union-attr]
    maps.write_text("7f1c00000000 default anon=10 N1=10 kernelpagesize_kB=4\n")
    now[0] = 30.0
    assert auditor.maybe_run(snap, [worker], ()).locality == (("w", 100.0),)  # type: ignore[union-attr]
    now[0] = 120.0
    assert auditor.maybe_run(snap, [worker], ()).locality == (("w", 0.0),)  # type: ignore[union-attr]
