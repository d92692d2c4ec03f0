"""Issue 13: a controller that never loses a worker, never harms what is not its own, never shows a secret.

Real worker processes (small Python programs, the same as test_supervisor_procs), the real CLI entry point, real
files; the full-disk cases use a real 64 KiB tmpfs where this machine lets the test mount one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdtop.cli.main import main
from tests.unit.test_supervisor_procs import FAMILY, alive, wait_files, write_profile
from tests.unit.tinyfs import fill, tiny_tmpfs

# Maps a vLLM-named segment of its own (as vLLM's message queues do), then sleeps.
MAPPER = """
import mmap, os, sys, time
out, shm = sys.argv[1], sys.argv[2]
fd = os.open(shm, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 4096)
m = mmap.mmap(fd, 4096)
open(out + f".{os.getpid()}", "w").close()
time.sleep(600)
"""


def cli(cfg: Path, state: Path, *args: str) -> list[str]:
    return ["--backend", "sim", "--config", str(cfg), "--state-dir", str(state), "workers", *args]


def run(cfg: Path, state: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(cli(cfg, state, *args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def status_of(cfg: Path, state: Path, capsys: pytest.CaptureFixture[str], name: str = "w") -> dict[str, object]:
    rc, out, err = run(cfg, state, capsys, "status", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert name in rows, (rc, err)
    return rows[name]


@pytest.fixture
def cleanup(tmp_path: Path) -> Iterator[list[Path]]:
    """State dirs whose workers must not outlive the test, whatever happened (also on code that loses them: every
    process whose command line runs this test's program is killed)."""
    dirs: list[Path] = []
    yield dirs
    from amdtop.procinfo import read_cmdline, read_environ
    from amdtop.supervisor.procs import scan

    wanted = {os.path.abspath(d) for d in dirs}
    for pid in scan():
        if read_environ(pid).get("AMDTOP_STATE_DIR") in wanted or str(tmp_path / "prog.py") in read_cmdline(pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if not line.startswith("amdtop: backend")]
    assert len(lines) == 1 and lines[0].startswith("amdtop: error: "), err
    assert "Traceback" not in err
    return lines[0]


# -- item 1: a torn, truncated or deleted state file never loses a running worker ------------------------------------
@pytest.mark.parametrize("damage", ["corrupt", "truncated", "missing"])
def test_damaged_state_file_worker_is_found_and_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path], damage: str
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY), tmp_path / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    pids = wait_files(tmp_path, 5)
    path = state / "workers" / "w.json"
    launched = json.loads(path.read_text())
    if damage == "corrupt":
        path.write_text("{")
    elif damage == "truncated":
        path.write_text(path.read_text()[:40])
    else:
        path.unlink()
    row = status_of(cfg, state, capsys)
    assert row["state"] == "starting" and row["pid"] == launched["pid"] and set(pids) <= set(row["pids"])  # type: ignore[arg-type]
    assert "state rebuilt from its running processes" in str(row["note"])
    assert ("missing" if damage == "missing" else "corrupt") in str(row["note"])
    rc, _, err = run(cfg, state, capsys, "launch", "w")
    assert rc == 2 and "already running" in err  # a second copy is never started beside the lost one
    rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
    assert rc == 0 and "5 terminated" in err, err
    assert not alive(pids)
    assert status_of(cfg, state, capsys)["state"] == "stopped"


def test_stale_state_file_of_an_older_launch_does_not_hide_the_running_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY), tmp_path / "state"
    cleanup.append(state)
    run(cfg, state, capsys, "launch", "w")
    wait_files(tmp_path, 5)
    path = state / "workers" / "w.json"
    stale = json.loads(path.read_text())
    run(cfg, state, capsys, "stop", "w", "--grace", "2")
    stopped = path.read_text()
    for f in tmp_path.glob("out.*"):
        f.unlink()
    run(cfg, state, capsys, "launch", "w")
    pids = wait_files(tmp_path, 5)
    path.write_text(stopped)  # a backup of the previous run restored over the live one
    row = status_of(cfg, state, capsys)
    assert row["state"] == "starting" and row["pid"] != stale["pid"] and "is running" in str(row["note"])
    assert run(cfg, state, capsys, "stop", "w", "--grace", "2")[0] == 0
    assert not alive(pids)


# -- item 2 and 7: full disk, unwritable state dir --------------------------------------------------------------------
@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    with tiny_tmpfs(tmp_path / "tiny") as mnt:
        yield mnt


@pytest.mark.parametrize("room", [0, 1], ids=["log-write-fails", "state-write-fails-after-spawn"])
def test_launch_on_full_disk_starts_nothing_or_rolls_back(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path], room: int
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY), tiny / "state"
    cleanup.append(state)
    (state / "workers").mkdir(parents=True)
    (state / "logs").mkdir()
    fill(tiny, leave_pages=room)  # room=1: the launch line fits in the log, the state file does not
    rc, _, err = run(cfg, state, capsys, "launch", "w")
    line = one_error_line(err)
    assert rc == 1 and "disk full" in line, line
    if room:
        assert "rolled back" in line and (state / "logs" / "w.log").exists()
    time.sleep(0.5)
    assert not alive({int(p.suffix[1:]) for p in tmp_path.glob("out.*")})
    assert not [p for p in (state / "workers").iterdir() if p.suffix == ".tmp"]


def test_stop_works_when_the_state_dir_fills_up(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY), tiny / "state"
    cleanup.append(state)
    assert run(cfg, state, capsys, "launch", "w")[0] == 0
    pids = wait_files(tmp_path, 5)
    fill(tiny)
    (state / "workers" / "w.json").write_text("")  # truncated to nothing, and no room to write it again
    assert status_of(cfg, state, capsys)["state"] == "starting"
    rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
    # Issue 23: the stop's record goes where the launch record was (rewritten in place when no new file fits);
    # test_supervisor_hostile3 covers the stop that cannot record itself at all (exit 1).
    assert rc == 0 and "5 terminated" in err, err
    assert not alive(pids)
    assert status_of(cfg, state, capsys)["state"] == "stopped"


@pytest.mark.parametrize("where", ["under-a-file", "in-proc"])
def test_unwritable_state_dir_is_one_line_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    cfg = write_profile(tmp_path, FAMILY)
    (tmp_path / "plain").write_text("x")
    state = tmp_path / "plain" / "state" if where == "under-a-file" else Path("/proc/amdtop-state")
    rc, _, err = run(cfg, state, capsys, "launch", "w")
    line = one_error_line(err)
    assert rc == 2 and line.startswith("amdtop: error: --state-dir: cannot write"), line
    time.sleep(0.2)
    assert not list(tmp_path.glob("out.*"))


def test_retune_on_full_disk_leaves_profile_and_no_temp_file(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = write_profile(tmp_path, FAMILY)
    moved = tiny / "workers.toml"
    moved.write_text(cfg.read_text() + "[worker.args]\nmax-num-seqs = 8\n" + "# padding\n" * 400)
    before = moved.read_text()
    fill(tiny)
    rc, _, err = run(moved, tmp_path / "state", capsys, "retune", "w", "max-num-seqs=16")
    line = one_error_line(err.split("\n", 2)[-1] if err.startswith("worker w:") else err)
    assert rc == 1 and "disk full" in line and "profile is unchanged" in line, line
    assert moved.read_text() == before
    assert not [p for p in tiny.iterdir() if p.name.endswith(".tmp")]


# -- item 3: only provably own files are deleted ----------------------------------------------------------------------
def test_stop_never_deletes_paths_a_state_file_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    tag = f"amdtop_test_{os.getpid()}"
    own = Path(f"/dev/shm/vllm_{tag}_own")
    victims = [tmp_path / "precious.txt", Path(f"/dev/shm/vllm_{tag}_older"), Path(f"/dev/shm/psm_{os.getpid():08x}")]
    for v in victims:
        v.write_text("not the worker's")
    cfg = write_profile(tmp_path, MAPPER)
    cfg.write_text(
        cfg.read_text().replace(
            f'"{tmp_path / "prog.py"}"]', f'"{tmp_path / "prog.py"}", "{tmp_path / "out"}", "{own}"]'
        )
    )
    state = tmp_path / "state"
    cleanup.append(state)
    try:
        time.sleep(1.1)  # the victims predate the launch by more than the ctime slack
        run(cfg, state, capsys, "launch", "w")
        wait_files(tmp_path, 1)
        path = state / "workers" / "w.json"
        doc = json.loads(path.read_text())
        doc["shm"] = [str(v) for v in victims] + ["/dev/shm/../../" + str(tmp_path / "precious.txt")]
        path.write_text(json.dumps(doc))
        rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "2")
        assert rc == 0 and f"removed {own}" in err, err
        assert not own.exists()
        assert all(v.exists() for v in victims), [str(v) for v in victims if not v.exists()]
    finally:
        for p in (own, *victims):
            p.unlink(missing_ok=True)


def test_forged_state_file_naming_a_foreign_process_harms_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY), tmp_path / "state"
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    try:
        ticks = int(Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        (state / "workers").mkdir(parents=True)
        forged = {
            "name": "w", "launch_id": "abc", "pid": victim.pid, "pgid": victim.pid, "start_ticks": ticks,
            "started_at": 0, "argv": ["x"], "env": {}, "log": str(precious), "port": 18029,
            "url": "http://127.0.0.1:18029", "gpus": [0], "numa_node": None, "known": [[victim.pid, ticks]],
            "shm": [str(precious)], "dist_ids": [],
        }  # fmt: skip
        (state / "workers" / "w.json").write_text(json.dumps(forged))
        assert status_of(cfg, state, capsys)["state"] != "starting"
        rc, _, err = run(cfg, state, capsys, "stop", "w", "--grace", "0.2")
        assert rc == 0 and "0 terminated" in err, err
        assert victim.poll() is None and precious.read_text() == "keep"
        for bad in ({**forged, "pid": 0, "pgid": 0}, {**forged, "name": "other"}):
            (state / "workers" / "w.json").write_text(json.dumps(bad))
            assert run(cfg, state, capsys, "stop", "w", "--grace", "0.2")[0] == 0
            assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


# -- item 4: secrets ----------------------------------------------------------------------------------------------------
SECRET_ARGS = '[worker.args]\napi-key = "sk-live-123456"\n[worker.env]\nHF_TOKEN = "hf_abcdef"\nNCCL_DEBUG = "INFO"\n'


def test_secrets_never_reach_log_state_or_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    cfg, state = write_profile(tmp_path, FAMILY, extra_args=SECRET_ARGS), tmp_path / "state"
    cleanup.append(state)
    old = os.umask(0o022)
    try:
        rc, _, err = run(cfg, state, capsys, "launch", "w")
    finally:
        os.umask(old)
    assert rc == 0, err
    pids = wait_files(tmp_path, 5)
    rc, out, err = run(cfg, state, capsys, "status", "--json")
    log, rec = state / "logs" / "w.log", state / "workers" / "w.json"
    texts = {"log": log.read_text(), "state": rec.read_text(), "status": out + err}
    for where, text in texts.items():
        assert "sk-live-123456" not in text and "hf_abcdef" not in text, where
    # Issue 23: one api-key goes to vLLM as VLLM_API_KEY in its environment, never into argv.
    assert "--api-key" not in texts["log"] and '"HF_TOKEN": "***"' in texts["state"]
    assert '"VLLM_API_KEY": "***"' in texts["state"]
    assert '"NCCL_DEBUG": "INFO"' in texts["state"]
    for f in (log, rec):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    run(cfg, state, capsys, "stop", "w", "--grace", "2")
    assert not alive(pids)


def test_retune_keeps_mode_and_writes_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = write_profile(tmp_path, FAMILY, extra_args='[worker.env]\nHF_TOKEN = "hf_abcdef"\n')
    real.chmod(0o600)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.geteuid(), os.getegid())  # root can give it away
    os.chown(real, *owner)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    rc, _, err = run(link, tmp_path / "state", capsys, "retune", "w", "max-num-seqs=16")
    assert rc == 0, err
    assert "hf_abcdef" not in err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "max-num-seqs = 16" in real.read_text() and 'HF_TOKEN = "hf_abcdef"' in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o600 and (real.stat().st_uid, real.stat().st_gid) == owner
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_one_masking_rule() -> None:
    from amdtop.secrets import is_secret_name, mask_argv, mask_env

    for name in ("HF_TOKEN", "api-key", "--api-key", "OPENAI_API_KEY", "DB_PASSWORD", "MY_SECRET_X", "hf-token",
                 "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "HFTOKEN", "WANDB_API_KEY"):  # fmt: skip
        assert is_secret_name(name), name
    for name in ("max-num-batched-tokens", "tokenizer", "ssl-keyfile", "PATH", "NCCL_DEBUG", "max-num-seqs",
                 "HIP_VISIBLE_DEVICES", "tokenizer-mode"):  # fmt: skip
        assert not is_secret_name(name), name
    argv = ["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=hf_2", "--max-num-batched-tokens", "4096",
            "HF_TOKEN=hf_3", "--disable-auth", "--port", "8000", "https://u:pw4@host/x"]  # fmt: skip
    assert mask_argv(argv) == ["vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--max-num-batched-tokens",
                               "4096", "HF_TOKEN=***", "--disable-auth", "--port", "8000", "https://u:***@host/x"]  # fmt: skip
    assert mask_env({"HF_TOKEN": "x", "EMPTY_TOKEN": "", "PATH": "/bin"}) == {"HF_TOKEN": "***", "EMPTY_TOKEN": "",
                                                                             "PATH": "/bin"}  # fmt: skip


# -- item 5: stop/restart/status from the launch's own record -----------------------------------------------------------
TWO = """[[worker]]
name = "n0"
model = "{model}"
gpus = [0]
numa_node = "none"
port = 18024
command = ["{py}", "{prog}", "{out}"]

[[worker]]
name = "n1"
model = "m"
gpus = [1]
port = 18025
"""


def test_worker_stays_controllable_when_its_profile_breaks_or_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleanup: list[Path]
) -> None:
    write_profile(tmp_path, FAMILY)
    cfg, state = tmp_path / "two.toml", tmp_path / "state"
    cleanup.append(state)
    text = TWO.format(model=tmp_path / "out", py=sys.executable, prog=tmp_path / "prog.py", out=tmp_path / "out")
    cfg.write_text(text)
    assert run(cfg, state, capsys, "launch", "n0")[0] == 0
    pids = wait_files(tmp_path, 5)
    # Another worker turns invalid: status shows n0 running and names the error; restart and stop of n0 still work.
    cfg.write_text(text.replace("gpus = [1]", "gpus = [99]"))
    rc, out, err = run(cfg, state, capsys, "status", "--json")
    assert rc == 2 and "worker[n1].gpus: GPU 99 does not exist" in err
    assert {r["name"]: r["state"] for r in json.loads(out)}["n0"] == "starting"
    assert run(cfg, state, capsys, "launch", "n0")[0] == 2  # launching anything needs a valid file
    for f in tmp_path.glob("out.*"):
        f.unlink()
    rc, _, err = run(cfg, state, capsys, "restart", "n0", "--grace", "2")
    assert rc == 0, err
    assert not alive(pids)
    pids = wait_files(tmp_path, 5)
    # The file becomes unparseable, then loses n0 altogether: n0 is still listed, and stop stops it.
    cfg.write_text("[[worker]\nbroken")
    assert {r["name"] for r in json.loads(run(cfg, state, capsys, "status", "--json")[1])} == {"n0"}
    cfg.write_text("[[worker]]" + text.split("[[worker]]")[2])
    row = status_of(cfg, state, capsys, "n0")
    assert row["state"] == "starting"
    rc, _, err = run(cfg, state, capsys, "restart", "n0")
    assert rc == 2 and "not in" in err and alive(pids)  # cannot start it again, and nothing was stopped
    rc, _, err = run(cfg, state, capsys, "stop", "n0", "--grace", "2")
    assert rc == 0 and "terminated" in err, err
    assert not alive(pids)
    assert run(cfg, state, capsys, "stop", "zz")[0] == 2
    rc, _, err = run(cfg, state, capsys, "stop", "../../escape")
    assert rc == 2 and "not a worker name" in err and not (tmp_path / "escape.lock").exists()


# -- item 9: numeric flags --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["stop", "w", "--grace", "-1"], "argument --grace: -1 must be at least 0 seconds"),
        (["stop", "w", "--grace", "nan"], "argument --grace: 'nan' is not a finite number of seconds"),
        (["restart", "w", "--grace", "inf"], "argument --grace: 'inf' is not a finite number"),
        (["launch", "w", "--timeout", "-5"], "argument --timeout: -5 must be greater than 0 seconds"),
        (["launch", "w", "--timeout", "0"], "argument --timeout: 0 must be greater than 0 seconds"),
        (["retune", "w", "max-num-seqs=99999999999999999999999"], "max-num-seqs: 99999999999999999999999 is outside"),
    ],
)
def test_numeric_flags_are_range_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], fragment: str
) -> None:
    cfg = write_profile(tmp_path, FAMILY)
    before = cfg.read_text()
    with pytest.raises(SystemExit) as exc:
        if main(cli(cfg, tmp_path / "state", *args)) == 2:
            raise SystemExit(2)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and fragment in one_error_line(err), err
    assert cfg.read_text() == before and not list(tmp_path.glob("out.*"))


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_interval_is_range_checked(capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--interval", value, "workers", "status"])
    assert exc.value.code == 2 and "argument --interval" in one_error_line(capsys.readouterr().err)
