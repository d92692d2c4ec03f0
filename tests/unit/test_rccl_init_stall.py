"""The live tail's stalled-init timer (issue 27): a real log file followed by a real :class:`LogMonitor`, the clock
injected. ``nccl_init_stalled`` after ``init_stall_s`` without progress, cleared by progress and by completion, and
carried to the frame and the exporter's ``amdtop_flag_active``."""

from __future__ import annotations

from pathlib import Path

from amdtop.exporter.families import build_families
from amdtop.logread.rccl.monitor import LogMonitor
from amdtop.model import FlagKind
from amdtop.pipeline.producer import NodePipeline
from amdtop.telemetry.sim import MI300X_BDFS, SimBackend
from amdtop.thresholds import NCCL_INIT_STALL_S
from tests.fixtures.rccl.make_logs import interleave, proc_comm_lines, startup_warns
from widgets.log_summary import render_logs

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "rccl"
BUS = tuple(f"{int(b.replace(':', '').replace('.', ''), 16):x}" for b in MI300X_BDFS[:4])


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _hung_log(path: Path) -> None:
    # ranks 2 and 3 stop after their Trees line; RCCL's kernel-command-line advice printed before
    procs = [
        [startup_warns("n1", 7000 + r, r), *proc_comm_lines(r, BUS, pid=7000 + r, fail="hang" if r >= 2 else None)]
        for r in range(4)
    ]
    path.write_text("\n".join(interleave(procs)) + "\n")


def _monitor(path: Path, clock: Clock, stall_s: float = 60.0) -> LogMonitor:
    return LogMonitor([("tp4", path)], SimBackend().topology(), init_stall_s=stall_s, clock=clock, wall=lambda: 5e8)


def _stalled(mon: LogMonitor) -> list[object]:
    return [f for f in mon.poll().flags if f.kind is FlagKind.NCCL_INIT_STALLED]


def test_default_stall_time_is_60_s() -> None:
    assert NCCL_INIT_STALL_S == 60.0
    assert LogMonitor([]).init_watch.stall_s == 60.0


def test_stalled_after_the_configured_time_not_before(tmp_path: Path) -> None:
    log = tmp_path / "tp4.log"
    _hung_log(log)
    clock = Clock()
    mon = _monitor(log, clock)
    update = mon.poll()
    assert [f.kind for f in update.flags] == []  # a live log: no "never completed" verdict at its end
    clock.t += 59.9
    assert _stalled(mon) == []
    clock.t += 0.1
    update = mon.poll()
    (flag,) = update.flags
    assert flag.kind is FlagKind.NCCL_INIT_STALLED and flag in update.new_flags
    extra = dict(flag.extra)
    assert extra["stuck_ranks"] == (2, 3) and extra["last_phase"] == "trees" and extra["stalled_after_s"] == 60.0
    assert extra["phases"] == ((0, "complete"), (1, "complete"), (2, "trees"), (3, "trees"))
    assert any(c.startswith('Missing "iommu=pt"') for c in extra["likely_causes"]) and extra["since"] == 5e8
    assert flag.gpus == (2, 3) and flag.worker == "tp4"
    assert "init stalled (no progress for 60 s): 2/4 ranks complete; ranks 2-3 at trees" in flag.message
    view = update.worker("tp4")
    assert view is not None and flag in view.flags
    # the Logs pane's head renders it from the same update
    head = render_logs(update.workers, update.flags).plain
    assert "! nccl_init_stalled [tp4 · GPUs 2,3]: comm-1: init stalled" in head
    # the same flag on the next polls: equal, so not new again
    clock.t += 30
    again = mon.poll()
    assert again.flags == (flag,) and again.new_flags == ()


def test_progress_restarts_the_clock_and_completion_clears_it(tmp_path: Path) -> None:
    log = tmp_path / "tp4.log"
    _hung_log(log)
    clock = Clock()
    mon = _monitor(log, clock, stall_s=10.0)
    mon.poll()
    clock.t += 10
    assert len(_stalled(mon)) == 1
    ptr = f"0x{0x5600A000 + 7002 * 0x100:x}"  # make_logs' pointer of pid 7002
    with log.open("a") as fh:  # rank 2 reaches its channel connections
        fh.write(
            f"n1:7002:7063 [2] NCCL INFO Channel 00/0 : 2[{BUS[2]}] -> 3[{BUS[3]}] via P2P/IPC comm {ptr} nRanks 04\n"
        )
    clock.t += 1
    assert _stalled(mon) == []
    clock.t += 9.9
    assert _stalled(mon) == []
    clock.t += 0.1
    (flag,) = _stalled(mon)
    assert dict(flag.extra)["phases"][2] == (2, "connecting")
    with log.open("a") as fh:
        for r in (2, 3):
            fh.write(
                f"n1:{7000 + r}:{7061 + r} [{r}] NCCL INFO comm 0x{0x5600A000 + (7000 + r) * 0x100:x} rank {r} nranks 4 "
                f"cudaDev {r} busId {BUS[r]} used 67129296 bytes - Init COMPLETE\n"
            )
    clock.t += 1000
    update = mon.poll()
    assert update.flags == () and update.worker("tp4").comms[0].init_complete == 4  # type: ignore[union-attr]


def test_an_init_that_failed_with_an_error_is_left_to_the_error_flag(tmp_path: Path) -> None:
    log = tmp_path / "tp4.log"
    log.write_text((FIX / "built" / "ipc-warn-no-trail.log").read_text())
    clock = Clock()
    mon = _monitor(log, clock)
    mon.poll()
    clock.t += 600
    kinds = {f.kind for f in mon.poll().flags}
    assert kinds == {FlagKind.NCCL_ERROR}


def test_stalled_flag_reaches_the_frame_and_the_exporter(tmp_path: Path) -> None:
    log = tmp_path / "tp4.log"
    _hung_log(log)
    clock = Clock()
    mon = _monitor(log, clock, stall_s=5.0)
    pipe = NodePipeline(SimBackend(), monitor=mon, discover=False)
    frame = pipe.tick()
    assert not frame.flags_of(FlagKind.NCCL_INIT_STALLED)
    clock.t += 5
    frame = pipe.tick()
    (flag,) = frame.flags_of(FlagKind.NCCL_INIT_STALLED)
    assert frame.logs is not None and flag in frame.logs.flags
    fams = {f.name: f for f in build_families(frame)}
    active = [s.labels for s in fams["amdtop_flag_active"].samples]
    assert {"kind": "nccl_init_stalled", "worker": "tp4", "gpus": "2,3"}.items() <= next(
        a for a in active if a["kind"] == "nccl_init_stalled"
    ).items()
    counts = {s.labels["kind"]: s.value for s in fams["amdtop_flags"].samples}
    assert counts["nccl_init_stalled"] == 1 and counts["nic_mismatch"] == 0
