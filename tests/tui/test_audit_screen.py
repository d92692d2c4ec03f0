"""The Audit screen (key ``u``): findings of the frame's audit, the header's count, the fix key through the retune
path (diff and confirmation), disabled under --readonly; an SVG snapshot of the screen."""

from __future__ import annotations

from pathlib import Path

from amdtop.audit.model import AuditReport, Finding, Fix, Skipped
from tests.tui.conftest import make_app

REPORT = AuditReport(
    findings=(
        Finding(
            "nccl_p2p_forced_off", "error", "worker", "NCCL_P2P_DISABLE force collectives off XGMI onto a slower path",
            ("/proc/4242/environ: NCCL_P2P_DISABLE=1", "GPUs 4,5: every pair on a direct XGMI link"),
            "with P2P off RCCL/NCCL move every all-reduce through host shared memory", "https://docs.nvidia.com/x",
            Fix("profile_env", changes=(("env.NCCL_P2P_DISABLE", ""),)), worker="qwen-32b", gpus=(4, 5),
            set_by="profile",
        ),
        Finding(
            "numa_balancing_on", "warn", "node", "kernel NUMA balancing is on",
            ("/proc/sys/kernel/numa_balancing: 1",), "pages migrate", "https://rocm.docs.amd.com/x",
            Fix("command", command="sudo sysctl kernel.numa_balancing=0"), set_by="node",
        ),
    ),
    checked=("nccl_p2p_forced_off", "numa_balancing_on"),
    skipped=(Skipped("cpu_governor", "no cpufreq driver"),),
)  # fmt: skip


class FixedAuditor:
    """Stands in for the pipeline's auditor with a known report (the rules are tested in tests/unit)."""

    def request(self) -> None:
        pass

    def maybe_run(self, *_args: object) -> AuditReport:
        return REPORT


def audited_app(**kw: object):  # type: ignore[no-untyped-def]
    app = make_app(**kw)  # type: ignore[arg-type]
    app.pipeline.auditor = FixedAuditor()  # type: ignore[assignment]
    return app


async def test_u_opens_the_audit_and_header_counts_findings() -> None:
    app = audited_app()
    async with app.run_test(size=(160, 45)) as pilot:
        frame = app.step()
        assert frame.audit is REPORT
        assert "audit 2" in app.status_line(frame)
        await pilot.press("u")
        await pilot.pause()
        screen = app.screen
        assert type(screen).__name__ == "AuditScreen"
        detail = str(screen.query_one("#audit-detail").render())
        assert "nccl_p2p_forced_off@qwen-32b" in detail and "fix (f): env.NCCL_P2P_DISABLE=" in detail
        await pilot.press("down")
        detail = str(screen.query_one("#audit-detail").render())
        assert "run as root (amdtop never runs it): sudo sysctl kernel.numa_balancing=0" in detail
        assert screen.check_action("fix", ()) is None  # a root command: shown, not applied
        await pilot.press("up", "f")
        await pilot.pause(0.5)
        confirm = app.screen
        assert type(confirm).__name__ == "ConfirmScreen"
        assert "Apply nccl_p2p_forced_off@qwen-32b to qwen-32b" in confirm.text  # type: ignore[attr-defined]
        await pilot.press("n")
        await pilot.press("escape")
        assert app.screen is app.dashboard


async def test_fix_key_hidden_under_readonly() -> None:
    app = audited_app(readonly=True)
    async with app.run_test(size=(160, 45)) as pilot:
        app.step()
        await pilot.press("u")
        await pilot.pause()
        assert app.screen.check_action("fix", ()) is False


def test_audit_screen_snapshot(snap_compare) -> None:  # type: ignore[no-untyped-def]
    app = audited_app()

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        app.step()
        await pilot.press("u")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(140, 36), run_before=run_before)


def test_no_host_files_reach_a_stand_in_node(tmp_path: Path) -> None:
    # The demo harness uses a stand-in procfs: the real auditor must then read nothing of this host.
    app = make_app()
    frame = app.pipeline.tick()
    assert frame.audit is not None
    assert not [f for f in frame.audit.findings if f.scope == "node"]
    assert not [f for f in frame.audit.findings if f.id == "vram_orphaned"]


async def test_launch_dialog_shows_the_gate_reasons_and_forces() -> None:
    from amdtop.audit.gate import GateRefused

    app = make_app()
    control = app.control
    calls: list[bool] = []
    original = control.launch  # type: ignore[union-attr]
    reasons = [
        Finding(
            "ecc_uncorrectable", "error", "gpu", "GPU 0: uncorrectable ECC errors or retired VRAM pages", (), "", ""
        ),
        Finding("gpu_hot_idle", "error", "gpu", "GPU 1 throttled at idle: power_cap", (), "", ""),
    ]

    def launch(name: str, force: bool = False):  # type: ignore[no-untyped-def]
        calls.append(force)
        if not force:
            raise GateRefused(name, "launch", reasons)
        return original(name)

    control.launch = launch  # type: ignore[union-attr,method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        app.step()
        app.action_launch("mistral-7b")
        await pilot.pause(0.5)
        text = app.screen.text  # type: ignore[attr-defined]
        assert text.splitlines()[:4] == [
            "Launch mistral-7b refused by the launch gate:",
            "",
            "• GPU 0: uncorrectable ECC errors or retired VRAM pages",
            "• GPU 1 throttled at idle: power_cap",
        ]
        await pilot.press("y")
        await pilot.pause(0.5)
        assert calls == [False, True]


def test_numa_pane_shows_measured_locality() -> None:
    from dataclasses import replace

    from tui.viewmodel.topology import numa_view

    app = make_app()
    frame = app.pipeline.tick()
    running = [w.name for w in frame.workers if w.state.value != "stopped"]
    frame = replace(frame, audit=AuditReport(locality=((running[0], 62.4),)))
    lines = [line.plain for line in numa_view(frame)]
    (mine,) = [line for line in lines if line.startswith(running[0])]
    assert "local 62%" in mine
