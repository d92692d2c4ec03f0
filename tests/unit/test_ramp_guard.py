"""Issue 13 item 6: the ramp refuses what it cannot hold, checks where results go first, never loses them, and says
when nothing was measured (real simulated server over loopback; a real 64 KiB tmpfs for the full disk)."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.cli.main import main
from tests.unit.simproc import simserver
from tests.unit.tinyfs import fill, tiny_tmpfs

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    with tiny_tmpfs(tmp_path / "tiny") as mnt:
        yield mnt


FAST = ["--concurrency", "1", "--step-seconds", "0.5", "--warmup-seconds", "0.1", "--input-len", "4",
        "--output-len", "4", "--no-refine"]  # fmt: skip


def only_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("amdtop: error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_concurrency_beyond_the_client_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    rc = main(["ramp", "--url", "http://127.0.0.1:18191", "--concurrency", "1,100000", "--state-dir", str(tmp_path)])
    line = only_error(capsys.readouterr().err)
    assert rc == 2 and "--concurrency: 100000 is more than this client can hold" in line, line
    assert any(w in line for w in ("file descriptors", "memory", "one client process")), line
    assert time.monotonic() - t0 < 5
    rc = main(["ramp", "--url", "http://127.0.0.1:18191", "--max-num-seqs", "100000", "--state-dir", str(tmp_path)])
    assert rc == 2 and "--max-num-seqs: 100000" in only_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--step-seconds", "0"), ("--step-seconds", "nan"), ("--warmup-seconds", "-1"), ("--input-len", "0"),
     ("--output-len", "99999999999"), ("--knee-fraction", "1.5"), ("--max-error-rate", "-0.1"),
     ("--request-timeout", "inf"), ("--slo-ttft-ms", "0"), ("--max-num-seqs", "0")],
)  # fmt: skip
def test_ramp_numeric_flags_are_range_checked(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["ramp", "--url", "http://127.0.0.1:18191", flag, value])
    assert exc.value.code == 2 and f"argument {flag}: " in only_error(capsys.readouterr().err)


def test_output_paths_are_checked_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "plain").write_text("x")
    with simserver(18192, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "5"):
        url = ["ramp", "--url", "http://127.0.0.1:18192", *FAST]
        rc = main([*url, "--json", str(tmp_path), "--state-dir", str(tmp_path / "st")])
        line = only_error(capsys.readouterr().err)
        assert rc == 2 and f"--json: {tmp_path} is a directory" in line, line
        rc = main([*url, "--state-dir", str(tmp_path / "plain" / "st")])
        line = only_error(capsys.readouterr().err)
        assert rc == 2 and line.startswith("amdtop: error: --state-dir: cannot write results to"), line
    assert not (tmp_path / "st" / "ramp").exists() or not list((tmp_path / "st" / "ramp").glob("*.json"))


def test_full_disk_mid_run_keeps_results_in_a_fallback(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "spare"))
    (tmp_path / "spare").mkdir()
    (tiny / "st" / "ramp").mkdir(parents=True)
    fill(tiny)  # the pre-run check passes (an empty file still fits), the first save does not
    with simserver(18193, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "5"):
        rc = main(["ramp", "--url", "http://127.0.0.1:18193", *FAST, "--state-dir", str(tiny / "st"),
                   "--json", str(tiny / "out.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "--json: cannot write" in err and "disk full" in err and "--state-dir: cannot write" in err, err
    saved = list((tmp_path / "spare").rglob("*.json"))
    assert {p.name for p in saved} >= {"out.json"} and len(saved) == 2, saved
    for p in saved:
        doc = json.loads(p.read_text())
        assert doc["steps"] and doc["steps"][0]["completed"] > 0
    assert not [p for p in tiny.rglob("*.tmp")]


def test_step_without_a_completed_request_is_reported_and_fails_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first token takes 3 s, the window 0.5 s: no request ends inside it.
    with simserver(18194, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "3000"):
        rc = main(["ramp", "--url", "http://127.0.0.1:18194", *FAST, "--json", "-", "--state-dir", str(tmp_path)])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["steps"][0]["completed"] == 0
    assert doc["steps"][0]["note"] == "no request completed in the measurement window"
    assert "concurrency    1: no request completed" in out.err
    assert rc == 1 and "nothing was measured" in only_error(out.err)
