"""``logs parse`` reads pipes, ``/dev/stdin`` and process substitutions whole, and never hangs on a FIFO without a
writer (issue 23, item 5). Real subprocesses and real pipes: each case failed before the reader streamed."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.logread.rccl.files import open_log
from tests.fixtures.rccl.make_logs import rccl_rank_lines

# 4 ranks, long enough that the old peek-then-reopen lost the first 8 KiB read from the pipe
LINES = [line for r in range(4) for line in rccl_rank_lines(r, 4, nchannels=16)]
TEXT = ("\n".join(LINES) + "\n").encode()
CLI = [sys.executable, "-m", "amdtop"]


def _parse(argv: list[str], **kw: object) -> dict[str, object]:
    out = subprocess.run([*CLI, "logs", "parse", *argv, "--json"], capture_output=True, check=True, timeout=60, **kw)  # type: ignore[call-overload]
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_stdin_pipe_is_read_whole() -> None:
    assert len(TEXT) > 8192
    doc = _parse(["/dev/stdin"], input=TEXT)
    assert doc["lines"] == len(LINES)
    assert doc["comms"][0]["nranks"] == 4 and doc["comms"][0]["init_complete"] == 4  # type: ignore[index]


def test_process_substitution_of_gzip_is_read_whole(tmp_path: Path) -> None:
    # what bash's <(gzip -c a.log) hands over: /dev/fd/N, a pipe whose first bytes are gzip's magic
    packed = tmp_path / "a.log.gz"
    packed.write_bytes(gzip.compress(TEXT))
    with subprocess.Popen(["gzip", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as gz:
        assert gz.stdin is not None and gz.stdout is not None
        gz.stdin.write(TEXT)
        gz.stdin.close()
        fd = gz.stdout.fileno()
        doc = _parse([f"/dev/fd/{fd}"], pass_fds=(fd,))
    assert doc["lines"] == len(LINES) and doc["unknown_lines"] == 0


def test_fifo_with_a_late_writer_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with subprocess.Popen([*CLI, "logs", "parse", str(fifo), "--json"], stdout=subprocess.PIPE) as proc:
        time.sleep(0.5)
        with open(fifo, "wb") as w:
            w.write(TEXT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out)["lines"] == len(LINES)


def test_fifo_without_writer_is_refused_not_hung(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"a FIFO with no writer \(waited 0.2 s\)"):
        open_log(fifo, fifo_wait_s=0.2)


def test_cli_fifo_without_writer_exits_2_with_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    out = subprocess.run([*CLI, "logs", "parse", str(fifo)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert (
        out.stderr.count("\n") == 1 and out.stderr.startswith("amdtop: error: ") and "FIFO with no writer" in out.stderr
    )


def test_writer_that_closes_without_data_gives_an_empty_report(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with subprocess.Popen([*CLI, "logs", "parse", str(fifo), "--json"], stdout=subprocess.PIPE) as proc:
        time.sleep(0.5)
        open(fifo, "wb").close()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and json.loads(out)["lines"] == 0
