"""``logs parse`` on compressed files and on RCCL lines with invalid bytes (issue 13, item 8)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.logread.rccl.parser import parse_files, parse_lines
from tests.fixtures.rccl.make_logs import rccl_rank_lines

LINES = [line for r in range(2) for line in rccl_rank_lines(r, 2)]
TEXT = ("\n".join(LINES) + "\n").encode()


@pytest.mark.parametrize(
    ("name", "pack"),
    [("log.gz", gzip.compress), ("log.bz2", bz2.compress), ("log.xz", lzma.compress)],
)
def test_compressed_logs_are_read(tmp_path: Path, name: str, pack: object) -> None:
    plain = tmp_path / "plain.log"
    plain.write_bytes(TEXT)
    packed = tmp_path / name
    packed.write_bytes(pack(TEXT))  # type: ignore[operator]
    got, want = parse_files([packed]), parse_files([plain])
    assert got.lines == want.lines == len(LINES) and got.unknown_lines == 0
    assert got.comms == want.comms and got.comms[0].nranks == 2


def test_cli_reads_gzip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "rccl.log.gz"
    f.write_bytes(gzip.compress(TEXT))
    assert main(["logs", "parse", str(f), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["library"] == "RCCL" and doc["unknown_lines"] == 0 and doc["comms"][0]["nranks"] == 2


@pytest.mark.parametrize(
    ("magic", "kind"),
    [(b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4"), (b"PK\x03\x04", "zip")],
)
def test_other_compressions_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], magic: bytes, kind: str
) -> None:
    f = tmp_path / "rccl.log.x"
    f.write_bytes(magic + b"\x00" * 64)
    assert main(["logs", "parse", str(f)]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    (line,) = out.err.strip().splitlines()
    assert line.startswith("amdtop: error:") and str(f) in line and f"{kind}-compressed" in line


def test_truncated_gzip_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "cut.log.gz"
    f.write_bytes(gzip.compress(TEXT)[:40])
    assert main(["logs", "parse", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(f) in err[0] and "cannot read" in err[0]


def test_invalid_bytes_in_rccl_lines_are_counted_unknown(tmp_path: Path) -> None:
    good = "n1:1:1 [0] NCCL INFO Channel 00/0 : 0[5000] -> 1[26000] via P2P/IPC comm 0x1 nRanks 02"
    bad = [
        b"n1:1:1 [0] NCCL INFO Channel 01/0 : 0[5000] -> 1[26\xff00] via P2P/IPC comm 0x1 nRanks 02",
        b"n1:1:1 [0] NCCL INFO Channel 02/0 : 0[5000] -> 1[26000] via P2P/I\xfe\xffC comm 0x1 nRanks 02",
        b"n1:1:1 [0] NCCL INFO Chan\xc3nel 03/0 : 0[5000] -> 1[26000] via P2P/IPC comm 0x1 nRanks 02",
        b"n1:1:1 [0] NCCL INFO Channel 04/02 :   0 \xff 1",
    ]
    f = tmp_path / "junk.log"
    f.write_bytes(good.encode() + b"\n" + b"\n".join(bad) + b"\n")
    rep = parse_files([f])
    assert rep.unknown_lines == 4
    assert dict(rep.transports) == {"P2P/IPC": 1}  # only the intact line names a transport


def test_ascii_lines_are_not_slowed_into_unknown() -> None:
    assert parse_lines(LINES).unknown_lines == 0


def test_invalid_bytes_in_init_lines_are_unknown_not_half_read(tmp_path: Path) -> None:
    f = tmp_path / "init.log"
    f.write_bytes(
        b"n1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 5\xff00 used 1 bytes - Init COMPLETE\n"
        b"n1:1:1 [0] NCCL INFO Connected all rings comm 0x1 nRanks 0\xfe busId 5000\n"
    )
    rep = parse_files([f])
    assert rep.unknown_lines == 2 and rep.comms == ()
