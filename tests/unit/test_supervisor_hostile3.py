"""Issue 23 (hostile input, round three): forged markers, another user's processes, floats, exec races, retune,
full-disk stops, secrets in every form.

Real worker processes (small Python programs), the real CLI entry point, real files, real signals; another user's
process runs through ``setpriv`` where this machine allows it; the full-disk stop uses a real 64 KiB tmpfs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.model import WorkerState
from amdtop.supervisor import Supervisor
from tests.gates import PASS
from tests.unit import test_supervisor_hostile as hostile
from tests.unit.test_supervisor_hostile import one_error_line, run, status_of
from tests.unit.test_supervisor_procs import FAMILY, STUBBORN, TOPO, alive, wait_files, write_profile
from tests.unit.tinyfs import fill, tiny_tmpfs

cleanup = hostile.cleanup  # the same fixture: kills what a test's workers leave, whatever happened


def _marked_env(state: Path, marker: str, url: str = "http://127.0.0.1:18031") -> dict[str, str]:
    return {
        **os.environ,
        "AMDTOP_WORKER": marker,
        "AMDTOP_STATE_DIR": os.path.abspath(state),
        "AMDTOP_URL": url,
    }


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Forgers the test starts: killed at the end, whatever happened."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _sleeper(env: dict[str, str], *prefix: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*prefix, "sleep", "120"], env=env, start_new_session=True)


def _wait_exec(p: subprocess.Popen[bytes], word: str = "sleep") -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if Path(f"/proc/{p.pid}/cmdline").read_bytes().startswith(word.encode()):
            return
        time.sleep(0.02)
    raise AssertionError(f"{p.pid} never ran {word}")


# -- item 1: a malformed marker is ignored with a note, never an error for the other workers --------------------------
def test_forged_marker_with_a_bad_name_does_not_break_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path], spawned: list[subprocess.Popen[bytes]]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY), tmp_path / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    pids = wait_files(tmp_path, 5)
    forger = _sleeper(_marked_env(state, "x y:1"))
    spawned.append(forger)
    _wait_exec(forger)
    rc, out, err = run(cfg, state, capsys, "status", "--json")
    assert rc == 0, err
    rows = {r["name"]: r for r in json.loads(out)}
    assert set(rows) == {"w"} and rows["w"]["state"] == "starting"
    assert f"ignored process {forger.pid}" in err and "not a worker name" in err, err
    assert "Traceback" not in err
    # The frame (snapshot, exporter, TUI) reads the same status: the worker is there.
    assert main(["--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "snapshot", "--json"]) == 0
    workers = json.loads(capsys.readouterr().out)["workers"]
    assert [w["name"] for w in workers] == ["w"], workers
    assert run(cfg, state, capsys, "stop", "w", "--grace", "2")[0] == 0
    assert not alive(pids) and forger.poll() is None


# -- item 2: markers are evidence, never authority --------------------------------------------------------------------
def _other_user_prefix() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("running a process as another user needs root (setpriv --reuid)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    probe = subprocess.run(
        ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "true"], capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"setpriv cannot switch to nobody here ({probe.stderr.decode().strip()})")
    return ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]


def test_another_users_marked_process_is_never_adopted_or_signalled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path], spawned: list[subprocess.Popen[bytes]]
) -> None:
    prefix = _other_user_prefix()
    cfg, state = write_profile(tmp_path, FAMILY, port=18032), tmp_path / "state"
    cleanup.append(state)
    state.mkdir()
    # The forger even names a launch id the log knows: the owner check alone must refuse it.
    (state / "logs").mkdir()
    (state / "logs" / "w.log").write_text("=== amdtop launch w:abc123abc123 at 2026-01-01 00:00:00: x\n")
    forger = _sleeper(_marked_env(state, "w:abc123abc123"), *prefix)
    spawned.append(forger)
    _wait_exec(forger)
    assert Path(f"/proc/{forger.pid}").stat().st_uid == 65534
    row = status_of(cfg, state, capsys)
    assert row["state"] == "stopped" and row["pid"] is None, row
    assert not (state / "workers" / "w.json").exists()
    rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "0.5")
    assert rc == 0 and "nothing to stop" in err, err
    assert forger.poll() is None
    # launch is not refused as "already running": the forger is not the worker.
    rc, _, err = run(cfg, state, capsys, "launch", "w")
    assert rc == 0, err
    pids = wait_files(tmp_path, 5)
    rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
    assert rc == 0 and not alive(pids) and forger.poll() is None, err


FORKS_AS_NOBODY = """
import os, subprocess, sys, time
child = subprocess.Popen(["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "sleep", "120"])
open(sys.argv[1] + f".{child.pid}", "w").close()
open(sys.argv[1] + f".{os.getpid()}", "w").close()
time.sleep(600)
"""


def test_stop_never_signals_another_users_process_in_the_workers_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    _other_user_prefix()
    cfg, state = write_profile(tmp_path, FORKS_AS_NOBODY, port=18039), tmp_path / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    pids = wait_files(tmp_path, 2)
    deadline = time.monotonic() + 10
    while not any(Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep") for p in alive(pids)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    nobody = {p for p in pids if Path(f"/proc/{p}").stat().st_uid == 65534}
    assert len(nobody) == 1, pids
    row = status_of(cfg, state, capsys)
    assert not nobody & set(row["pids"]), row  # type: ignore[arg-type]
    rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
    assert rc == 0, err
    assert alive(pids) == nobody  # the worker is gone; the other user's process in its group was not touched
    os.kill(nobody.pop(), signal.SIGKILL)


def test_same_user_marker_with_an_unknown_launch_id_is_not_adopted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path], spawned: list[subprocess.Popen[bytes]]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY, port=18033), tmp_path / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    pids = wait_files(tmp_path, 5)
    assert run(cfg, state, capsys, "stop", "w", "--grace", "2")[0] == 0
    forger = _sleeper(_marked_env(state, "w:feedfeedfeed"))
    spawned.append(forger)
    _wait_exec(forger)
    (state / "workers" / "w.json").unlink()  # nothing but the marker speaks for the forger
    row = status_of(cfg, state, capsys)
    assert row["state"] == "stopped" and row["pid"] is None, row
    assert run(cfg, state, capsys, "stop", "w", "--grace", "0.5")[0] == 0
    assert forger.poll() is None and not alive(pids)


# -- item 3: floats from a profile, and a stop that always ends ------------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "1e9"])
def test_stop_grace_from_a_profile_is_finite_and_in_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    cfg = write_profile(tmp_path, FAMILY, extra_args=f"stop_grace_s = {value}\n")
    rc, _, err = run(cfg, tmp_path / "state", capsys, "launch", "w")
    line = one_error_line(err)
    assert rc == 2 and "worker[w].stop_grace_s" in line, line
    assert not list(tmp_path.glob("out.*"))


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_float_args_in_a_profile_are_finite(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    cfg = write_profile(tmp_path, FAMILY, extra_args=f"[worker.args]\ngpu-memory-utilization = {value}\n")
    rc, _, err = run(cfg, tmp_path / "state", capsys, "launch", "w")
    line = one_error_line(err)
    assert rc == 2 and "worker[w].args.gpu-memory-utilization" in line, line


def test_a_state_file_with_a_nan_time_counts_as_torn(tmp_path: Path) -> None:
    from amdtop.supervisor.state import StateStore

    store = StateStore(tmp_path / "state")
    store.dir.mkdir(parents=True)
    doc = {"name": "w", "launch_id": "a", "pid": 1234, "pgid": 1234, "start_ticks": 1, "started_at": float("nan"),
           "argv": [], "log": "x", "port": 1, "url": "http://127.0.0.1:1"}  # fmt: skip
    store.path("w").write_text(json.dumps(doc))  # json writes NaN, and reads it back
    rec, problem = store.load_checked("w")
    assert rec is None and "started_at nan is not a time" in str(problem)


def test_stop_has_a_hard_ceiling_whatever_grace_it_is_given(tmp_path: Path) -> None:
    cfg = write_profile(tmp_path, STUBBORN)
    sup = Supervisor(cfg, tmp_path / "state", gate=PASS, topology=TOPO)
    try:
        sup.launch("w")
        pids = wait_files(tmp_path, 2)
        done: list[object] = []
        t = threading.Thread(target=lambda: done.append(sup.stop("w", grace=float("nan"))), daemon=True)
        t.start()
        t.join(60)  # a hang detector, not a timing: a nan grace used to wait forever
        assert done, "stop with a nan grace never returned"
        assert not alive(pids)
        assert sup.status_one("w").state is WorkerState.STOPPED
    finally:
        for pid in alive(wait_files(tmp_path, 2)):
            os.kill(pid, signal.SIGKILL)
        sup.close()


# -- item 4: a launch never loses its process mid-exec -----------------------------------------------------------------
REEXEC = """
import os, sys, time
out = sys.argv[1]
n = int(os.environ.get("REEXEC_N", "0"))
if n < 120:  # a wrapper chain: every exec empties /proc/PID/environ for a moment
    os.environ["REEXEC_N"] = str(n + 1)
    os.execv(sys.executable, [sys.executable, *sys.argv])
open(out + f".{os.getpid()}", "w").close()
time.sleep(600)
"""


def test_a_worker_that_execs_through_wrappers_is_never_seen_crashed(tmp_path: Path, cleanup: list[Path]) -> None:
    cfg, state = write_profile(tmp_path, REEXEC), tmp_path / "state"
    cleanup.append(state)
    sup = Supervisor(cfg, state, gate=PASS, topology=TOPO, grace_s=2.0)
    other = Supervisor(cfg, state, gate=PASS, topology=TOPO, grace_s=2.0)  # another amdtop: it did not spawn the worker
    try:
        sup.launch("w")
        seen: dict[str, list[WorkerState]] = {"launcher": [], "other": []}
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("out.*")) and time.monotonic() < deadline:
            seen["launcher"].append(sup.status_one("w").state)
            seen["other"].append(other.status_one("w").state)
        for who, states in seen.items():
            assert WorkerState.CRASHED not in states, (who, states.count(WorkerState.CRASHED), len(states))
        assert sup.status_one("w").state is WorkerState.STARTING
    finally:
        sup.stop("w", grace=1)
        sup.close()
        other.close()


# -- item 6: retune validates every change before writing ------------------------------------------------------------
def test_refused_retune_leaves_the_profile_byte_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY, port=18034), tmp_path / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    pids = wait_files(tmp_path, 5)
    before = cfg.read_bytes()
    for change in ("env.HIP_VISIBLE_DEVICES=3", "env.CUDA_VISIBLE_DEVICES=5"):
        for dry in ((), ("--dry-run",)):
            rc, _, err = run(cfg, state, capsys, "retune", "w", change, *dry)
            line = one_error_line(err)
            assert rc == 2 and "VISIBLE_DEVICES" in line, line
            assert cfg.read_bytes() == before
    assert alive(pids) == pids  # the running worker was not touched
    assert run(cfg, state, capsys, "stop", "w", "--grace", "2")[0] == 0


# -- item 12: a stop on a full disk --------------------------------------------------------------------------------------
def test_stop_on_a_full_disk_says_so_and_status_never_shows_crashed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    with tiny_tmpfs(tmp_path / "tiny") as tiny:
        cfg, state = write_profile(tmp_path, FAMILY, port=18035), tiny / "state"
        cleanup.append(state)
        assert run(cfg, state, capsys, "launch", "w")[0] == 0
        pids = wait_files(tmp_path, 5)
        fill(tiny)
        rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
        assert not alive(pids)
        row = status_of(cfg, state, capsys)
        assert row["state"] == "stopped", (row, err)
        if rc == 1:
            assert "cannot write" in err and "disk full" in err, err
        else:  # the stop record went into the blocks the old record already held
            assert rc == 0 and "disk full" not in err, err
        # Nothing at all can be written: the record cannot even be rewritten in place.
        (state / "workers" / "w.json").unlink()
        for f in tmp_path.glob("out.*"):
            f.unlink()
        for f in tiny.glob("filler*"):
            f.unlink()
        assert run(cfg, state, capsys, "launch", "w")[0] == 0
        pids = wait_files(tmp_path, 5)
        rec = state / "workers" / "w.json"
        doc = json.loads(rec.read_text())
        rec.write_text(json.dumps(doc, separators=(",", ":")))  # compact: no slack for a rewrite in place
        fill(tiny)
        rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
        assert not alive(pids)
        lines = [x for x in err.splitlines() if x.startswith("amdtop: error:")]
        assert rc == 1 and len(lines) == 1 and "disk full" in lines[0], err
        assert status_of(cfg, state, capsys)["state"] == "stopped"


# -- item 14: nan and inf on the command line ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["ramp", "--url", "http://127.0.0.1:1", "--goodput", "ttft:nan"], "--goodput"),
        (["ramp", "--url", "http://127.0.0.1:1", "--goodput", "tpot:inf"], "--goodput"),
        (["snapshot", "--window", "nan"], "--window"),
        (["snapshot", "--window", "inf"], "--window"),
        (["probe", "--sizes", "inf"], "--sizes"),
        (["probe", "--sizes", "64K", "--copy-size", "nan"], "--copy-size"),
        (["probe", "--sizes", "1e400"], "--sizes"),
        (["--interval", "1e308", "snapshot"], "--interval"),
    ],
)
def test_nan_and_inf_flags_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], field: str
) -> None:
    code: int | str | None
    try:
        code = main(["--backend", "sim", "--state-dir", str(tmp_path / "state"), *argv])
    except SystemExit as exc:
        code = exc.code
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and field in line, line
    assert not (tmp_path / "state" / "ramp").exists() or not list((tmp_path / "state" / "ramp").iterdir())


def test_files_in_the_state_dir_are_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    from amdtop.supervisor.state import StateStore

    old = os.umask(0o022)
    try:
        store = StateStore(tmp_path / "state")
        with store.lock("w"):
            pass
    finally:
        os.umask(old)
    for p in (tmp_path / "state").rglob("*"):
        if p.is_file():
            assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


# -- item 7: secrets, one rule everywhere ----------------------------------------------------------------------------
def test_one_rule_covers_lists_patterns_userinfo_and_the_workers_own_echo() -> None:
    from amdtop.logread.rccl.lines import make_line
    from amdtop.secrets import is_secret_name, mask_argv, mask_env, mask_log_line, mask_url

    for name in ("MY_PASSPHRASE", "GH_PAT", "AWS_CREDENTIALS_FILE", "APP_SECRET", "S3_KEY", "HF_TOKEN", "DBPASS"):
        assert is_secret_name(name), name
    for name in ("PATH", "NCCL_P2P_LEVEL", "PATCH_SIZE", "max-num-batched-tokens", "tokenizer", "ssl-keyfile"):
        assert not is_secret_name(name), name
    assert mask_env({"MY_PASSPHRASE": "p1", "GH_PAT": "ghp_2"}) == {"MY_PASSPHRASE": "***", "GH_PAT": "***"}
    assert mask_argv(["vllm", "serve", "m", "--api-key", "k1", "k2", "--port", "8000"]) == [
        "vllm", "serve", "m", "--api-key", "***", "***", "--port", "8000"
    ]  # fmt: skip
    assert mask_url("https://u:pw@h:1/x https://ghp_tok@github.com/r") == "https://u:***@h:1/x https://***@github.com/r"
    echo = (
        "INFO 12-02 06:00:00 [utils.py:253] non-default args: {'model_tag': '/m', 'api_key': ['k1', 'k2'], "
        "'hf_token': 'hf_x', 'max_num_batched_tokens': 4096, 'port': 8000}"
    )
    for shown in (mask_log_line(echo), make_line("w", "w.log", echo).text):
        assert "k1" not in shown and "k2" not in shown and "hf_x" not in shown, shown
        assert "'max_num_batched_tokens': 4096" in shown and "'api_key': '***'" in shown
    nccl = "node:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"
    assert mask_log_line(nccl) == nccl


ECHO_THEN_CRASH = """
import sys
print("INFO non-default args: {'model_tag': 'm', 'api_key': ['k1-secret', 'k2-secret'], 'port': 1}", flush=True)
sys.exit(3)
"""


def test_list_valued_keys_and_the_workers_echo_never_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    extra = '[worker.args]\napi-key = ["k1-secret", "k2-secret"]\n[worker.env]\nMY_PASSPHRASE = "pp-secret"\n'
    extra += 'GH_PAT = "ghp-secret"\nDB = "postgres://u:pw-secret@db/x"\n'
    cfg, state = write_profile(tmp_path, ECHO_THEN_CRASH, port=18036, extra_args=extra), tmp_path / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    deadline = time.monotonic() + 20
    while (row := status_of(cfg, state, capsys))["state"] != "crashed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert row["state"] == "crashed", row
    _, out, err = run(cfg, state, capsys, "status", "--json")
    texts = {
        "log": (state / "logs" / "w.log").read_text(),  # the launch line amdtop writes
        "state": (state / "workers" / "w.json").read_text(),
        "status": out + err,
        "last_log_lines": json.dumps(row["last_log_lines"]),
    }
    for where, text in texts.items():
        for secret in ("k1-secret", "k2-secret", "pp-secret", "ghp-secret", "pw-secret"):
            if where == "log" and secret.startswith("k"):
                # The worker's own echo is its output: amdtop shows it masked (Logs pane, last_log_lines).
                text = text.split("\n", 1)[0]
            assert secret not in text, (where, secret)
    assert "non-default args" in texts["last_log_lines"]
    for f in (state / "logs" / "w.log", state / "workers" / "w.json"):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_one_api_key_travels_in_the_environment_and_amdtop_sends_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = 18037
    cfg, state = tmp_path / "w.toml", tmp_path / "state"
    cleanup.append(state)
    cfg.write_text(
        f'[[worker]]\nname = "w"\nmodel = "sim"\ngpus = [0]\nnuma_node = "none"\nport = {port}\n'
        f'command = ["{sys.executable}", "-m", "amdtop.simserver"]\n'
        '[worker.args]\napi-key = "sk-only-mine"\ntokens-per-s = 0\n'
    )
    rc, _, err = run(cfg, state, capsys, "launch", "w", "--wait", "--timeout", "60")
    assert rc == 0, err
    row = status_of(cfg, state, capsys)
    pid = int(row["pid"])  # type: ignore[call-overload]
    assert b"sk-only-mine" not in Path(f"/proc/{pid}/cmdline").read_bytes()  # every user reads cmdline
    assert b"VLLM_API_KEY=sk-only-mine" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    import httpx

    url = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401  # the key is in force
    # amdtop's own clients: the prober (health, metrics) and the ramp send it as a Bearer token.
    sup = Supervisor(cfg, state, gate=PASS, topology=TOPO)
    try:
        assert sup.prober.keys == {url: "sk-only-mine"} and sup.api_key("w") == "sk-only-mine"
        assert sup.status_one("w").engine is not None
    finally:
        sup.close()
    ramp = ["ramp", "--url", url, "--concurrency", "1", "--step-seconds", "1", "--warmup-seconds", "0",
            "--no-refine", "--no-record", "--input-len", "8", "--output-len", "4", "--json", str(tmp_path / "r.json")]  # fmt: skip
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["--backend", "sim", "--state-dir", str(state), *ramp])
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and "HTTP 401" in line and "VLLM_API_KEY" in line, line
    monkeypatch.setenv("VLLM_API_KEY", "sk-only-mine")
    assert main(["--backend", "sim", "--state-dir", str(state), *ramp]) == 0, capsys.readouterr().err
    doc = (tmp_path / "r.json").read_text()
    assert json.loads(doc)["steps"][0]["completed"] > 0 and "sk-only-mine" not in doc
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o600
    assert run(cfg, state, capsys, "stop", "w", "--grace", "5")[0] == 0


def test_prober_sends_the_bearer_token_to_health_and_metrics(tmp_path: Path) -> None:
    import http.server

    from amdtop.supervisor.metrics import Prober

    seen: list[str | None] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"vllm:num_requests_running 0\n")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        prober = Prober(2.0)
        prober.keys = {url: "sk-probe"}
        assert prober.health(url) == 200 and prober.scrape("w", url) is not None
        assert prober.health(url.replace("127.0.0.1", "localhost")) == 200  # another worker's URL: no key
    finally:
        server.shutdown()
    assert seen == ["Bearer sk-probe", "Bearer sk-probe", None]


# -- item 11: a URL password never reaches the ramp's files ------------------------------------------------------------
def test_ramp_url_password_stays_out_of_the_ramp_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.simproc import simserver

    state = tmp_path / "state"
    with simserver(18038, "--tokens-per-s", "0"):
        old = os.umask(0o022)
        try:
            code = main(["--backend", "sim", "--state-dir", str(state), "ramp", "--url",
                         "http://u:pw-secret@127.0.0.1:18038", "--concurrency", "1", "--step-seconds", "1",
                         "--warmup-seconds", "0", "--no-refine", "--no-record", "--input-len", "8", "--output-len", "4",
                         "--json", str(tmp_path / "out.json")])  # fmt: skip
        finally:
            os.umask(old)
    err = capsys.readouterr().err
    assert code == 0, err
    files = [*(state / "ramp").iterdir(), tmp_path / "out.json"]
    assert len(files) == 3
    for f in files:
        assert "pw-secret" not in f.read_text(), f
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert json.loads((tmp_path / "out.json").read_text())["url"] == "http://u:***@127.0.0.1:18038"
