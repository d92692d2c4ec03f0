"""``tail -F`` follower on real files: rotation, truncation, late file, partial line, binary junk, flood; sources."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from amdtop.logread.rccl import ERROR, WARN
from amdtop.logread.rccl.lines import LogLines, log_line
from amdtop.logread.rccl.monitor import LogMonitor
from amdtop.logread.rccl.sources import expand_debug_file, worker_sources
from amdtop.logread.rccl.tail import LogFollower
from amdtop.model import WorkerState, WorkerStatus
from tests.fixtures.rccl.make_logs import rccl_rank_lines


def _texts(f: LogFollower) -> list[str]:
    return [line.text for line in f.poll().lines]


def _append(path: Path, data: str | bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def test_partial_last_line_is_held_until_newline(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("one\ntw")
    f = LogFollower([("w", log)])
    assert _texts(f) == ["one"]
    assert _texts(f) == []
    _append(log, "o\nthree\n")
    batch = f.poll()
    assert [(x.worker, x.text) for x in batch.lines] == [("w", "two"), ("w", "three")]


def test_rotation_by_rename_drains_old_then_reads_new(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("a\n")
    f = LogFollower([log])
    assert _texts(f) == ["a"]
    _append(log, "b\n")  # written just before the rename: must not be lost
    os.rename(log, tmp_path / "w.log.1")
    log.write_text("c\n")
    assert _texts(f) == ["b", "c"]
    _append(log, "d\n")
    assert _texts(f) == ["d"]


def test_truncation_reads_from_start(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("first line\nsecond line\n")
    f = LogFollower([log])
    assert len(_texts(f)) == 2
    with open(log, "w") as fh:
        fh.write("new\n")
    assert _texts(f) == ["new"]


def test_late_file_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "late.log"
    f = LogFollower([log], backlog_bytes=4)
    assert _texts(f) == []
    log.write_text("hello\nworld\n")
    assert _texts(f) == ["hello", "world"]


def test_existing_file_starts_from_backlog(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.write_text("".join(f"line {i:04d}\n" for i in range(1000)))
    f = LogFollower([log], backlog_bytes=100)
    got = _texts(f)
    assert 5 <= len(got) <= 10 and got[-1] == "line 0999" and all(t.startswith("line ") for t in got)


def test_binary_junk_is_tolerated(tmp_path: Path) -> None:
    log = tmp_path / "j.log"
    log.write_bytes(b"\x00\x01\xff\xfe\x1b[2J junk\r\nok line\n")
    got = _texts(LogFollower([log]))
    assert len(got) == 2 and got[1] == "ok line"
    assert got[0].isprintable() and "junk" in got[0]


def test_flood_drops_to_counting(tmp_path: Path) -> None:
    log = tmp_path / "flood.log"
    f = LogFollower([log], max_lines=100, max_bytes=10_000)
    f.poll()
    log.write_text("".join(f"x{i:07d}\n" for i in range(50_000)))  # 450 kB, 50k lines
    batch = f.poll()
    assert len(batch.lines) == 100
    assert batch.lines[-1].text == "x0049999"
    assert batch.dropped == 50_000 - 100


def test_flood_keeps_errors_and_warnings(tmp_path: Path) -> None:
    log = tmp_path / "flood.log"
    f = LogFollower([log], max_lines=100, max_bytes=10_000)
    f.poll()
    lines = [f"x{i:07d}" for i in range(50_000)]
    lines[10] = "RuntimeError: NCCL Error 2: unhandled system error"  # in the skipped (counted) region
    lines[49_850] = "n1:1:1 [0] init.cc:1 NCCL WARN late warning"  # decoded, but cut by max_lines
    log.write_text("\n".join(lines) + "\n")
    batch = f.poll()
    texts = [x.text for x in batch.lines]
    assert texts[:2] == [lines[10], lines[49_850]]
    assert texts[2:] == lines[-100:]
    assert batch.dropped == 50_000 - 102


def test_levels_and_transport_marks(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    log.write_text("\n".join(rccl_rank_lines(0, 2, errors=True)) + "\n")
    lines = LogFollower([("w", log)]).poll().lines
    assert any(x.transport and "via P2P/IPC" in x.text for x in lines)
    assert {x.level for x in lines if "NCCL WARN" in x.text} == {WARN}
    assert [x.level for x in lines if "-> 3" in x.text] == [ERROR, ERROR]
    assert all(x.level != ERROR for x in lines if " via " in x.text)


def test_sources_expand_nccl_debug_file(tmp_path: Path) -> None:
    assert expand_debug_file("/l/nccl.%h.%p.log", "n1", 42) == "/l/nccl.n1.42.log"
    assert expand_debug_file("/l/100%%.%p", "n1", 7) == "/l/100%.7"
    (tmp_path / "nccl.n1.999.log").write_text("x\n")  # a rank that started before we knew its pid
    w = WorkerStatus("llama-a", WorkerState.READY, (0, 1), pids=(10,), rank_pids=((0, 11), (1, 12)), log="/s/out.log")
    got = worker_sources(w, {"NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log")}, hostname="n1")
    assert got == [
        ("llama-a", tmp_path / "nccl.n1.11.log"),
        ("llama-a", tmp_path / "nccl.n1.12.log"),
        ("llama-a", tmp_path / "nccl.n1.999.log"),
        ("llama-a", Path("/s/out.log")),
    ]
    assert worker_sources(w, {}, hostname="n1") == [("llama-a", Path("/s/out.log"))]


def test_monitor_summarises_and_flags_new_errors(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    log.write_text("\n".join(rccl_rank_lines(0, 2)) + "\n")
    mon = LogMonitor([("llama-a", log)])
    first = mon.poll()
    assert (
        "llama-a: RCCL 2.22.3 comm 0x551d06754c6bacf2: 2 ranks, all pairs P2P/IPC (init complete on 1/2)"
        in first.summary
    )
    assert first.new_flags == ()
    _append(log, "RuntimeError: NCCL Error 2: unhandled system error\n")
    second = mon.poll()
    assert [f.worker for f in second.new_flags] == ["llama-a"] and "NCCL Error 2" in second.new_flags[0].message
    assert mon.poll().new_flags == ()


def test_monitor_primes_the_head_of_a_long_log(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    app = "".join(f"INFO 11-29 14:41:{i % 60:02d} [metrics.py:1] throughput {i}\n" for i in range(20_000))
    log.write_text("\n".join(rccl_rank_lines(0, 2)) + "\n" + app)
    mon = LogMonitor([("llama-a", log)], backlog_bytes=4096)
    update = mon.poll()
    assert len(update.lines) < 100  # the tail shows only the backlog window...
    assert "comm 0x551d06754c6bacf2: 2 ranks, all pairs P2P/IPC" in update.summary  # ...the summary saw the init
    rep = mon.report("llama-a")
    assert rep is not None and rep.warnings[0].line == 26
    assert mon.poll().summary == update.summary


def test_poll_lines_are_runs_built_when_read(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("a1\na2 NCCL WARN x\na3\n")
    b.write_text("n1:1:1 [0] NCCL INFO Channel 00/0 : 0[1] -> 1[2] via P2P/IPC\nb2\n")
    lines = LogFollower([("wa", a), ("wb", b)]).poll().lines
    assert (
        isinstance(lines, LogLines)
        and len(lines) == 5
        and [r.texts for r in lines.runs]
        == [
            ("a1", "a2 NCCL WARN x", "a3"),
            ("n1:1:1 [0] NCCL INFO Channel 00/0 : 0[1] -> 1[2] via P2P/IPC", "b2"),
        ]
    )
    built = [log_line("wa", str(a), t) for t in ("a1", "a2 NCCL WARN x", "a3")]
    built += [log_line("wb", str(b), t) for t in lines.runs[1].texts]
    assert list(lines) == built and list(reversed(lines)) == built[::-1]
    assert [lines[k] for k in range(-5, 5)] == built + built
    assert lines[1].level == WARN and lines[3].transport and not lines[4].transport
    assert list(lines[2:4]) == built[2:4] and list(lines[-1:]) == built[-1:] and len(lines[9:]) == 0
    assert lines == tuple(built) and lines.workers() == ["wa", "wb"]
    assert pickle.loads(pickle.dumps(lines)) == lines
    with pytest.raises(IndexError):
        lines[5]


def test_flood_cut_spans_files_and_keeps_their_errors(tmp_path: Path) -> None:
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    f = LogFollower([("wa", a), ("wb", b)], max_lines=3)
    a.write_text("a1\nRuntimeError: NCCL Error 2: unhandled system error\na3\n")
    b.write_text("b1\nn1:1:1 [0] x.cc:1 NCCL WARN w\nb3\nb4\n")
    batch = f.poll()
    # the oldest 4 of 7 lines are cut across both files; the error among them stays, in front of the newest 3
    assert [(x.worker, x.text) for x in batch.lines] == [
        ("wa", "RuntimeError: NCCL Error 2: unhandled system error"),
        ("wb", "n1:1:1 [0] x.cc:1 NCCL WARN w"),
        ("wb", "b3"),
        ("wb", "b4"),
    ]
    assert batch.dropped == 3 and batch.lines[0].level == ERROR


def test_monitor_hands_the_same_update_while_nothing_moves(tmp_path: Path) -> None:
    """A poll that read no line and changed nothing returns the update before it, the very object: a frame part that
    is the same object as its predecessor's is one a viewer takes from its last frame (serve/wire.py KEPT_PARTS)."""
    log = tmp_path / "w.log"
    log.write_text("\n".join(rccl_rank_lines(0, 2)) + "\n")
    mon = LogMonitor([("llama-a", log)])
    first = mon.poll()
    assert first.lines  # the backlog: a new update, not one to repeat
    quiet = mon.poll()
    assert quiet is not first and not quiet.lines and quiet.workers == first.workers
    assert mon.poll() is quiet and mon.poll() is quiet
    _append(log, "RuntimeError: NCCL Error 2: unhandled system error\n")
    flagged = mon.poll()
    assert flagged is not quiet and flagged.new_flags and flagged.lines
    after = mon.poll()  # no new line, but the last update named a new flag: this one must not
    assert after is not flagged and after.new_flags == () and not after.lines
    assert mon.poll() is after
