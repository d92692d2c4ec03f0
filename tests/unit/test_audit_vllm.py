"""vLLM rules against real start-up logs from public issues (source in each fixture's first line) and the CPU build's
own log, on stand-in workers whose environ and argv are real processes'."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.audit.context import AuditContext, AuditTarget
from amdtop.audit.registry import all_rules, run_audit
from amdtop.audit.startup_log import StartupLogs, parse_text
from amdtop.model import GpuInfo, Link, LinkType, Topology
from amdtop.supervisor.profiles import Profile
from amdtop.telemetry.sim import SimBackend

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_logs"
MI300X = SimBackend().topology()
H200 = Topology(
    tuple(GpuInfo(i, "NVIDIA H200", f"0000:{i + 0x18:02x}:00.0", 0, vendor="NVIDIA") for i in range(2)),
    (Link(0, 1, LinkType.NVLINK, 1),),
    (),
)
VLLM_RULES = (
    "aiter_off",
    "attention_backend_slow",
    "moe_path_slow",
    "custom_allreduce_disabled",
    "enforce_eager",
    "tunableop_off",
    "kv_cache_dtype",
)


def test_first_line_of_every_capture_names_its_source() -> None:
    for log in LOGS.glob("*.log"):
        first = log.read_text().splitlines()[0]
        assert first.startswith("# source: ") or first.startswith("# built (not a capture)"), log.name


def test_rocm_log_with_flag_selected_triton_and_emulated_moe() -> None:
    facts = parse_text((LOGS / "vllm_49141_rocm_triton_attn_emulated_moe.log").read_text())
    # The ViT and GEMM "Using ... backend" lines are not the attention backend.
    assert (facts.attention, facts.attention_by_flag) == ("TRITON_ATTN", True)
    assert facts.moe == ("Using 'EMULATION' Mxfp4 MoE backend.",)


def test_old_rocm_log_formats() -> None:
    facts = parse_text((LOGS / "rocm_vllm_390_v064_disable_flag.log").read_text())
    assert (facts.version, facts.platform) == ("0.6.4.post2.dev822+g16366ee8b", "rocm")
    facts = parse_text((LOGS / "rocm_vllm_390_custom_ar_platform.log").read_text())
    assert facts.custom_ar_disabled == (
        "Disabled the custom all-reduce kernel because it is not supported on current platform."
    )


def test_cpu_build_log_gives_version_platform_and_engine_config() -> None:
    facts = parse_text((LOGS / "vllm_cpu_0320_tp1.log").read_text())
    assert (facts.version, facts.platform, facts.attention) == ("0.32.0", "cpu", None)
    assert facts.config_value("kv_cache_dtype") == "auto" and facts.config_value("enforce_eager") == "False"


def test_incremental_reader_keeps_only_the_last_run(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("=== amdtop launch w:1 at now: vllm serve\n" + (LOGS / "vllm_38627_rocm_aiter_fa.log").read_text())
    logs = StartupLogs()
    assert logs.facts(str(log)).attention == "ROCM_AITER_FA"
    with log.open("a") as fh:
        fh.write("=== amdtop launch w:2 at later: vllm serve\n")
        fh.write((LOGS / "vllm_49141_rocm_triton_attn_emulated_moe.log").read_text())
    assert logs.facts(str(log)).attention == "TRITON_ATTN"


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def make(
        log: str,
        env: dict[str, str],
        argv: tuple[str, ...] = (),
        *,
        topology: Topology = MI300X,
        profile_args: tuple[tuple[str, object], ...] = (),
    ):  # type: ignore[no-untyped-def]
        # A stand-in API server: argv as vLLM's would read, environment as the ranks inherit it, in its own session
        # as the supervisor launches a worker. It is audited once it says it runs: Popen returns when the exec closes
        # its error pipe, which the kernel does before it sets the new image's argv and environ up, and in that window
        # /proc/PID/cmdline and environ read empty (three parallel CI steps audited a stand-in there: its variables,
        # then its argv, then `--disable-custom-all-reduce` not found).
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)", *argv],
            env={"PATH": "/usr/bin:/bin", **env},
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        _environ_shows(proc, env)
        profile = Profile("llama", "/m", (0, 1), "auto", 8000, env=tuple(env.items()), args=profile_args)  # type: ignore[arg-type]
        target = AuditTarget(
            "llama", (0, 1), 8000, pid=proc.pid, pids=(proc.pid,), log=str(LOGS / log), profile=profile
        )
        ctx = AuditContext(topology=topology, targets=[target], sys_root=tmp_path)
        report = run_audit(ctx, rules=[r for r in all_rules() if r.id in VLLM_RULES])
        assert proc.poll() is None, f"stand-in died under the audit (status {proc.returncode})"
        return report

    yield make
    for p in procs:
        p.kill()
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def _environ_shows(proc: subprocess.Popen[bytes], env: dict[str, str]) -> None:
    """Wait until the stand-in's /proc environ holds ``env`` before it is audited."""
    deadline = time.monotonic() + 10
    want = {f"{k}={v}".encode() for k, v in env.items()}
    while True:
        assert proc.poll() is None, f"stand-in exited with {proc.returncode}"
        try:
            have = set(Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0"))
        except OSError:
            have = set()
        if want <= have:
            return
        assert time.monotonic() < deadline, f"environ of {proc.pid} never showed {sorted(want - have)}"
        time.sleep(0.01)


def by_id(report) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {f.id: f for f in report.findings}


def test_aiter_off_triton_attention_and_emulated_moe_on_gfx942(worker) -> None:  # type: ignore[no-untyped-def]
    found = by_id(worker("vllm_49141_rocm_triton_attn_emulated_moe.log", {}, ("--attention-backend", "TRITON_ATTN")))
    aiter = found["aiter_off"]
    assert aiter.set_by == "vllm" and aiter.fix.changes == (("env.VLLM_ROCM_USE_AITER", "1"),)
    assert "log: Using TRITON_ATTN backend (selected via --attention-backend)." in aiter.evidence
    attn = found["attention_backend_slow"]
    assert attn.set_by == "profile" and attn.fix.kind == "none" and "ROCM_AITER_FA" in (attn.fix.advice or "")
    assert found["moe_path_slow"].evidence == ("log: Using 'EMULATION' Mxfp4 MoE backend.",)


def test_aiter_fa_chosen_passes(worker) -> None:  # type: ignore[no-untyped-def]
    report = worker("vllm_38627_rocm_aiter_fa.log", {"VLLM_ROCM_USE_AITER": "1", "PYTORCH_TUNABLEOP_ENABLED": "1"})
    assert set(by_id(report)) <= {"kv_cache_dtype"}
    assert {"aiter_off", "attention_backend_slow", "tunableop_off"} <= set(report.checked)


def test_custom_allreduce_off_by_the_profile_offers_the_retune(worker) -> None:  # type: ignore[no-untyped-def]
    report = worker(
        "rocm_vllm_390_v064_disable_flag.log",
        {},
        ("--disable-custom-all-reduce", "--enforce-eager"),
        profile_args=(("disable-custom-all-reduce", True), ("enforce-eager", True)),
    )
    found = by_id(report)
    car = found["custom_allreduce_disabled"]
    assert car.set_by == "profile"
    assert car.fix.to_json() == {"kind": "retune", "changes": {"disable-custom-all-reduce": "false"}}
    assert found["enforce_eager"].fix.changes == (("enforce-eager", "false"),)
    assert "0.6.4" in found["aiter_off"].title  # AITER came later than this vLLM: the advice is the version
    assert found["aiter_off"].fix.kind == "none" and "upgrade" in (found["aiter_off"].fix.advice or "")


def test_custom_allreduce_disabled_by_vllm_itself_has_no_profile_fix(worker) -> None:  # type: ignore[no-untyped-def]
    car = by_id(worker("rocm_vllm_390_custom_ar_platform.log", {}))["custom_allreduce_disabled"]
    assert car.set_by == "vllm" and car.fix.kind == "none" and "upgrade vLLM" in (car.fix.advice or "")


def test_sm90_flash_attn_and_cutlass_moe_pass(worker) -> None:  # type: ignore[no-untyped-def]
    report = worker("vllm_31683_cuda_sm90.log", {}, topology=H200)
    assert not set(by_id(report)) & {"aiter_off", "attention_backend_slow", "moe_path_slow", "tunableop_off"}


def test_a_log_without_the_lines_is_skipped_with_the_reason(worker) -> None:  # type: ignore[no-untyped-def]
    report = worker("no_startup_lines.log", {"VLLM_ROCM_USE_AITER": "1"})
    why = {s.id: s.why for s in report.skipped}
    assert "no 'Using ... backend' line" in why["attention_backend_slow"]
    assert "attention_backend_slow" not in report.checked


def test_a_missing_log_is_skipped_with_the_reason(worker) -> None:  # type: ignore[no-untyped-def]
    report = worker("does-not-exist.log", {})
    why = {s.id: s.why for s in report.skipped}
    assert "unreadable (no such file or directory)" in why["attention_backend_slow"]


def test_cpu_platform_has_no_row_in_the_table(tmp_path: Path) -> None:
    cpu_only = Topology((), (), ())
    target = AuditTarget("cpu", (), pid=1, pids=(1,))
    report = run_audit(
        AuditContext(cpu_only, targets=[target], sys_root=tmp_path),
        rules=[r for r in all_rules() if r.id == "aiter_off"],
    )
    assert report.skipped[0].why == "no GPU: the rules table covers gfx942, gfx950 and sm_90"


def test_only_the_runs_start_window_is_scanned_and_a_new_run_is_found_past_it(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    filler = (
        "(APIServer pid=1) INFO 11-29 13:47:00 [loggers.py:259] Engine 000: Avg generation throughput: 1 tokens/s\n"
    )
    with log.open("w") as fh:
        fh.write("=== amdtop launch w:1 at now: vllm serve\n")
        fh.write((LOGS / "vllm_38627_rocm_aiter_fa.log").read_text())
        fh.write(filler * 30000)  # ~3 MB: past the start-up window
        fh.write("(EngineCore pid=9) INFO 01-01 00:00:00 [rocm.py:1] Using TRITON_ATTN backend.\n")
    logs = StartupLogs()
    assert logs.facts(str(log)).attention == "ROCM_AITER_FA"  # the late line is not this run's start-up
    with log.open("a") as fh:
        fh.write(filler * 100 + "=== amdtop launch w:2 at later: vllm serve\n")
        fh.write((LOGS / "vllm_49141_rocm_triton_attn_emulated_moe.log").read_text())
    facts = logs.facts(str(log))
    assert (facts.attention, facts.attention_by_flag) == ("TRITON_ATTN", True)


def test_followed_reader_agrees_with_the_whole_text_parse() -> None:
    for log in sorted(LOGS.glob("*.log")):
        whole = parse_text(log.read_text())
        followed = StartupLogs().facts(str(log))
        assert (followed.version, followed.platform, followed.attention, followed.moe, followed.config) == (
            whole.version,
            whole.platform,
            whole.attention,
            whole.moe,
            whole.config,
        ), log.name
