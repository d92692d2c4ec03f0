"""The supervisor against real vLLM on the CPU: pinning, readiness, streaming, /metrics, retune, re-attach, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from amdtop.model import WorkerState
from amdtop.procinfo import read_cmdline
from amdtop.supervisor import Supervisor
from amdtop.supervisor.metrics import parse_samples
from amdtop.supervisor.procs import dist_ids_in, mapped_shm, scan
from amdtop.telemetry.sim import SimBackend
from tests.e2e.conftest import READY_TIMEOUT_S, SERVED_NAME, VllmWorker, marked_pids, profile_toml
from tests.gates import PASS

pytestmark = pytest.mark.e2e
TP2_PORT = 18011


def stream_completion(url: str, prompt: str = "the cat sat on", max_tokens: int = 16) -> list[dict[str, object]]:
    """POST a streaming completion and return the parsed SSE chunks (asserting the [DONE] terminator)."""
    body = {"model": SERVED_NAME, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    chunks: list[dict[str, object]] = []
    done = False
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120.0) as resp:
        assert resp.status_code == 200
        for line in resp.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            chunks.append(json.loads(line[6:]))
    assert done, "stream ended without data: [DONE]"
    return chunks


def test_tp1_pinned_ready_streams_and_meters(vllm_tp1: VllmWorker) -> None:
    sup = vllm_tp1.supervisor
    before = sup.status_one(vllm_tp1.name)
    assert before.state is WorkerState.READY
    rec = sup.record(vllm_tp1.name)
    assert rec is not None and rec.argv[:3] == ("numactl", "--cpunodebind=0", "--membind=0")
    # numactl's binding is inherited by every vLLM process: API server, EngineCore, worker, resource tracker.
    assert len(before.pids) >= 3
    assert before.mems_allowed == (0,)
    chunks = stream_completion(vllm_tp1.url)
    text = "".join(str(c["choices"][0]["text"]) for c in chunks if c.get("choices"))  # type: ignore[index]
    assert text
    samples = parse_samples(httpx.get(f"{vllm_tp1.url}/metrics", timeout=10).text)
    assert samples["vllm:generation_tokens_total"] >= 16
    after = sup.status_one(vllm_tp1.name)
    assert after.engine is not None and after.engine.gen_tokens_per_s is not None and after.engine.gen_tokens_per_s > 0


def _shm_of(log: Path) -> list[str]:
    ids = dist_ids_in(log.read_text(errors="replace"))
    return [n for n in os.listdir("/dev/shm") if any(i in n for i in ids)]


def test_tp2_reattach_retune_stop(tmp_path: Path, vllm_tp1: VllmWorker) -> None:
    config = tmp_path / "workers.toml"
    # --enforce-eager: nothing here measures speed, and both starts (launch, retune) skip the torch.compile pass.
    config.write_text(profile_toml("tp2", TP2_PORT, tp=2, max_num_seqs=8, eager=True))
    state = tmp_path / "state"
    # The supervising process: `amdtop workers launch --wait`, killed while it waits (a TUI or SSH session dying).
    t0 = time.monotonic()
    cli = subprocess.Popen(
        [sys.executable, "-m", "amdtop", "--backend", "sim", "--config", str(config), "--state-dir", str(state),
         "workers", "launch", "tp2", "--wait"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (state / "workers" / "tp2.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    sup = Supervisor(config, state, gate=PASS, topology=SimBackend().topology(), vendor="AMD")
    try:
        st = sup.wait_ready("tp2", timeout=READY_TIMEOUT_S)
        ready_s = time.monotonic() - t0
        assert sorted(r for r, _ in st.rank_pids) == [0, 1]
        assert st.mems_allowed == (0,)
        chunks = stream_completion(st.url or "")
        assert chunks
        first = sup.record("tp2")
        assert first is not None
        old_pids = set(st.pids)

        first_held = mapped_shm(old_pids)
        t1 = time.monotonic()
        new = sup.retune("tp2", {"max-num-seqs": "3"})
        clean = sup.last_stop("tp2")
        assert clean is not None and set(clean.terminated) == old_pids and not clean.killed
        assert new.pid != first.pid and new.restarts == 1
        argv = read_cmdline(new.pid or 0)
        assert argv[argv.index("--max-num-seqs") + 1] == "3"
        assert "# e2e worker tp2" in config.read_text() and "max-num-seqs = 3" in config.read_text()
        assert not (old_pids & set(sup.status_one("tp2").pids))
        assert not [h for h in first_held if Path(h).exists()], "shared memory of the first run left behind"
        sup.wait_ready("tp2", timeout=READY_TIMEOUT_S)
        restart_ready_s = time.monotonic() - t1
        assert stream_completion(new.url or "")

        # SIGKILL the API server alone (vLLM issue #55510): EngineCore, the TP workers and the resource tracker live
        # on as orphans holding memory; the supervisor must see a crash and the stop must take them all.
        running = sup.status_one("tp2")
        held = mapped_shm(set(running.pids))
        assert any(Path(h).name.startswith("psm_") for h in held)  # vLLM's SharedMemory message queues
        os.kill(running.pid or 0, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (crashed := sup.status_one("tp2")).state is not WorkerState.CRASHED and time.monotonic() < deadline:
            time.sleep(0.2)
        assert crashed.state is WorkerState.CRASHED
        orphans = set(crashed.pids)
        assert len(orphans) >= 4 and running.pid not in orphans  # EngineCore, 2 workers, resource tracker
        report = sup.stop("tp2", grace=10)  # orphans sometimes sit out any grace: keep CI short
        print(
            f"\nE2E tp2: launch->ready {ready_s:.1f} s, retune restart->ready {restart_ready_s:.1f} s, "
            f"clean stop {clean.seconds:.2f} s ({clean.message}; removed {list(clean.swept_shm)}); "
            f"orphan stop {report.seconds:.2f} s ({report.message}; removed {list(report.swept_shm)})"
        )
        assert set(report.terminated) | set(report.swept_pids) >= orphans
        assert sup.status_one("tp2").state is WorkerState.STOPPED
        assert not marked_pids("tp2:") and not (orphans & set(scan()))
        assert not _shm_of(Path(new.log or ""))
        assert not [h for h in held if Path(h).exists()], "shared memory of the killed worker left behind"
    finally:
        sup.stop("tp2", grace=5)
        sup.close()
