"""``logs parse`` on hostile input (issue 52): a huge rank count, spliced lines, a repeated line, a device that never
ends. Each reproduction of the issue is a test: bounded memory, the right verdict, a one-line refusal."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.logread.rccl.files import parse_files
from amdtop.logread.rccl.parser import parse_lines

ROOT = Path(__file__).resolve().parents[2]


def _peak_mb(fn: object) -> float:
    tracemalloc.start()
    try:
        fn()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


# bug 2: one line with a huge nranks or rank must not build range(nranks)
def test_a_huge_nranks_in_one_line_is_parsed_in_bounded_memory(tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    log.write_text(
        "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2000000000 cudaDev 0 busId 1000 - Init START\n"
        "h:1:2 [0] NCCL INFO comm 0x2 rank 1999999999 nranks 2000000000 cudaDev 0 busId 1000 - Init START\n"
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n"
    )
    report = None

    def parse() -> None:
        nonlocal report
        report = parse_files([log])

    assert _peak_mb(parse) < 64
    assert report is not None
    (comm, *_rest) = report.comms
    assert comm.nranks == 2000000000 and len(comm.missing) <= 4096
    (timeout,) = [i for i in report.incidents if i.kind == "collective_timeout"]
    assert dict(timeout.detail)["silent_count"] == 1999999999
    assert dict(timeout.detail)["silent_ranks"] == ()  # counted, never listed


def test_the_cli_reproduction_prints_json_not_a_memoryerror(tmp_path: Path) -> None:
    log = tmp_path / "n.log"
    log.write_text("h:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2000000000 cudaDev 0 busId 1000 - Init START\n")
    out = subprocess.run(
        [sys.executable, "-m", "amdtop", "logs", "parse", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-400:]
    assert '"nranks": 2000000000' in out.stdout


# bug 6: a torn line must not flip a watchdog verdict
_PROGRESS = (
    "[rank{r}]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 1 Rank {r}] Exception (either an error or "
    "timeout) detected by watchdog at work: {at}, last enqueued NCCL work: {at}, last completed NCCL work: {done}."
)
"""ProcessGroupNCCL's progress line (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp watchdogHandler), built from its
format string with torchrun's ``[rankN]:`` and glog's heads."""
_WATCHDOG = (
    "[rank{r}]:[E1206 18:44:12.715298746 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum={at}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600061 "
    "milliseconds before timing out."
)


def _job(torn: bool) -> list[str]:
    # ranks 0-2 completed 9 and wait in 10; rank 3 completed only 8: rank 3 is the laggard
    lines = []
    for r, at, done in ((0, 10, 9), (1, 10, 9), (2, 10, 9), (3, 9, 8)):
        lines += [_WATCHDOG.format(r=r, at=at), _PROGRESS.format(r=r, at=at, done=done)]
    if torn:
        # rank 3's progress line cut mid-word by rank 0's whole progress line, its rest on the next line
        whole = _PROGRESS.format(r=3, at=9, done=8)
        cut = whole.index("last compl") + len("last compl")
        i = lines.index(whole)
        lines[i : i + 1] = [whole[:cut] + _PROGRESS.format(r=0, at=10, done=9), whole[cut:]]
    return lines


def test_a_spliced_progress_line_does_not_lend_its_head_to_another_ranks_seqnum() -> None:
    (clean,) = [i for i in parse_lines(_job(torn=False)).incidents if i.kind == "collective_timeout"]
    assert clean.laggard == 3
    torn_lines = _job(torn=True)
    from amdtop.logread.rccl.unwrap import untear

    for lines in (torn_lines, list(untear(torn_lines))):
        (torn,) = [i for i in parse_lines(lines).incidents if i.kind == "collective_timeout"]
        # rank 3 timed out on 9 where the others did on 10: still the laggard, never "no rank is behind"
        assert torn.laggard == 3
        assert "no rank" not in torn.summary


def test_a_spliced_watchdog_line_keeps_each_rank_its_own_seqnum() -> None:
    a, b = _WATCHDOG.format(r=1, at=10), _WATCHDOG.format(r=3, at=9)
    cut = a.index("SeqNum=") + len("SeqNum=")
    lines = [a[:cut] + b, _WATCHDOG.format(r=0, at=10), _WATCHDOG.format(r=2, at=10)]
    (i,) = [i for i in parse_lines(lines).incidents if i.kind == "collective_timeout"]
    assert dict(dict(i.detail)["timed_out_seq"]).get(3) == 9  # rank 3's record, read as rank 3's
    assert dict(dict(i.detail)["timed_out_seq"]).get(1) is None  # rank 1's record was cut: not reported
    assert i.laggard == 3


# bug 9: memory follows what is reported, not the input's length
def test_a_repeated_watchdog_line_costs_no_memory_per_line(tmp_path: Path) -> None:
    line = _WATCHDOG.format(r=1, at=808) + "\n"
    small, big = tmp_path / "s.log", tmp_path / "b.log"
    small.write_text(line * 25000)
    big.write_text(line * 100000)
    peak_small = _peak_mb(lambda: parse_files([small]))
    peak_big = _peak_mb(lambda: parse_files([big]))
    assert peak_big < peak_small * 1.5 + 4, (peak_small, peak_big)
    report = parse_files([big])
    assert [i.kind for i in report.incidents] == ["collective_timeout"]
    assert len(report.errors) == 20000 and report.dropped == 80000  # counted, not lost silently


# bug 19: a character device is refused like --kernel-log refuses it
@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_a_character_device_is_refused_in_one_line(device: str) -> None:
    with pytest.raises(InputError, match="character device"):
        parse_files([device])
