"""The audit on real vLLM (CPU): each rank's environ, its numa_maps and the CPU build's start-up log, read from the
session's READY TP=1 worker (one vLLM start shared with the other e2e tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amdtop.audit.context import AuditContext, target_of
from amdtop.audit.model import Skipped
from amdtop.audit.registry import run_audit
from amdtop.audit.rules_env import rank_envs
from amdtop.audit.rules_numa import worker_locality
from amdtop.cli.main import main
from amdtop.model import Topology
from amdtop.telemetry.numa import read_numa_nodes
from tests.e2e.conftest import VllmWorker


def test_audit_reads_environ_numa_maps_and_startup_log(vllm_tp1: VllmWorker) -> None:
    sup = vllm_tp1.supervisor
    st = sup.status_one(vllm_tp1.name)
    target = target_of(st, sup.profile(vllm_tp1.name))
    ctx = AuditContext(topology=Topology((), (), read_numa_nodes(Path("/sys"))), targets=[target])
    assert len(target.pids) >= 3 and len(target.rank_or_all_pids) == 1  # API server, EngineCore, the one rank
    # The API server's environ is whole: amdtop's launch marker and the profile's settings.
    assert st.pid is not None and ctx.environ(st.pid).get("VLLM_CPU_KVCACHE_SPACE") == "1"
    assert ctx.environ(st.pid)["AMDTOP_WORKER"].startswith(f"{vllm_tp1.name}:")
    # vLLM's retitled rank shows only the tail of its environ (setproctitle wrote over its start): the env rules read
    # the rank through the API server's environ, its own surviving variables on top.
    (rank_pid,) = target.rank_or_all_pids
    assert ctx.cmdline(rank_pid)[0].startswith("VLLM::")
    print(f"\nrank {rank_pid} environ keys as /proc shows them: {sorted(ctx.environ(rank_pid))}")
    envs = rank_envs(ctx, target, "test")
    assert not isinstance(envs, Skipped)
    ((pid, env),) = envs
    assert pid == st.pid and env["AMDTOP_WORKER"].startswith(f"{vllm_tp1.name}:")
    assert set(ctx.environ(rank_pid).items()) <= set(env.items())
    # Pinned to node 0 with real numactl: all of its resident memory is there.
    pct, evidence = worker_locality(ctx, target)
    assert pct == 100.0 and len(evidence) == 1
    assert all("N0=" in line for line in evidence)
    assert st.log is not None
    facts = ctx.startup_logs.facts(st.log)
    assert (facts.version or "").startswith("0.32") and facts.platform == "cpu"
    assert facts.config_value("kv_cache_dtype") == "auto"
    report = run_audit(ctx)
    assert report.locality == ((vllm_tp1.name, 100.0),)
    why = {s.id: s.why for s in report.skipped if s.worker == vllm_tp1.name}
    # A CPU worker has no row in the GPU rules table: the vLLM rules say so instead of passing.
    assert why["aiter_off"] == "no GPU: the rules table covers gfx942, gfx950 and sm_90"
    assert "numa_locality" in report.checked


def test_workers_status_json_has_numa_locality(vllm_tp1: VllmWorker, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--backend", "sim", "--config", str(vllm_tp1.config), "--state-dir", str(vllm_tp1.state_dir)]
    assert main([*argv, "workers", "status", "--json"]) == 0
    (doc,) = [d for d in json.loads(capsys.readouterr().out) if d["name"] == vllm_tp1.name]
    assert doc["numa_locality"] == {"local_pct": 100.0}
