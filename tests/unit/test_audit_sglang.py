"""SGLang rules on stand-in workers whose environ and argv are real processes' (the command line is the DP-attention
one quoted in sgl-project/sglang#6555); vLLM's rules leave SGLang workers alone."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.registry import all_rules, run_audit
from amdtop.audit.rules_sglang import SGLANG_ATTN_DEFAULT, SGLANG_ENVIRON
from amdtop.supervisor.profiles import Profile
from amdtop.telemetry.sim import SimBackend

MI300X = SimBackend().topology()
RULES = ("sglang_aiter_off", "sglang_attention_backend", "aiter_off", "attention_backend_slow", "moe_path_slow")
ARGV = ("-m", "sglang.launch_server", "--model-path", "/models/DeepSeek-R1", "--tp", "8", "--attention-backend",
        "fa3", "--enable-dp-attention", "--dp-size", "2", "--enable-metrics")  # fmt: skip


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def make(env: dict[str, str], argv: tuple[str, ...] = ARGV, *, profile_args: tuple[tuple[str, object], ...] = ()):  # type: ignore[no-untyped-def]
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)", *argv], env={"PATH": "/usr/bin:/bin", **env}
        )
        procs.append(proc)
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        for _ in range(500):  # until exec has finished: before it the child shows pytest's own argv
            if b"sleep(60)" in cmdline.read_bytes():
                break
            time.sleep(0.01)
        profile = Profile("ds", "/m", (0, 1), "auto", 30000, env=tuple(env.items()), args=profile_args,  # type: ignore[arg-type]
                          engine="sglang")  # fmt: skip
        target = AuditTarget("ds", (0, 1), 30000, pid=proc.pid, pids=(proc.pid,), profile=profile)
        ctx = AuditContext(topology=MI300X, targets=[target], sys_root=tmp_path)
        return run_audit(ctx, rules=[r for r in all_rules() if r.id in RULES])

    yield make
    for p in procs:
        p.kill()
        p.wait()


def test_aiter_off_and_a_forced_attention_backend_on_gfx942(audit) -> None:  # type: ignore[no-untyped-def]
    report = audit({}, profile_args=(("attention-backend", "fa3"),))
    found = {f.id: f for f in report.findings}
    assert set(found) == {"sglang_aiter_off", "sglang_attention_backend"}  # vLLM's rules never judge it
    aiter = found["sglang_aiter_off"]
    assert aiter.severity == "warn" and aiter.source == SGLANG_ENVIRON and aiter.set_by == "sglang"
    assert aiter.fix.changes == (("env.SGLANG_USE_AITER", "1"),)
    assert aiter.evidence[0].endswith("SGLANG_USE_AITER not set (SGLang's default is off)")
    attn = found["sglang_attention_backend"]
    assert attn.severity == "info" and attn.source == SGLANG_ATTN_DEFAULT and attn.set_by == "profile"
    assert attn.evidence == (f"/proc/{attn.evidence[0].split('/')[2]}/cmdline: --attention-backend fa3",)
    assert "drop --attention-backend fa3 from [worker.args]" in (attn.fix.advice or "")
    assert {s.id for s in report.skipped} >= {"aiter_off", "attention_backend_slow"}
    assert {s.why for s in report.skipped if s.id == "aiter_off"} == {"no running vLLM worker"}


def test_aiter_on_and_default_backend_pass(audit) -> None:  # type: ignore[no-untyped-def]
    argv = tuple(a for a in ARGV if a not in ("--attention-backend", "fa3"))
    report = audit({"SGLANG_USE_AITER": "1"}, argv)
    assert report.findings == ()
    assert {"sglang_aiter_off", "sglang_attention_backend"} <= set(report.checked)
