"""Load generator speed: amdtop's httpx client vs `vllm bench serve`'s aiohttp client on a zero-work server.

Usage: .venv/bin/python bench/loadgen.py [--port 18190] [--seconds 5] [--rounds 3] [--out-len 16]

A zero-work streaming server (a raw asyncio Protocol in a subprocess that answers every POST at once with a
pre-built vLLM-style SSE body: OUT_LEN token chunks, a usage chunk and [DONE]) runs on loopback. Against it, in
the same run and alternating per round:
  * amdtop: ``run_step`` (closed loop, exactly C in flight) for SECONDS -> completed requests per second;
  * vllm bench serve: the real CLI from .venv-vllm (``--max-concurrency C --request-rate inf``, random dataset,
    tiny-llama tokenizer) with enough prompts for about SECONDS -> its ``request_throughput``;
at C = 64 and 256. amdtop runs with its per-step recording on (``--no-record`` turns it off): a /metrics scrape of a real
vLLM page every 0.5 s, the server process's CPU and placement through psutil, as ``amdtop ramp`` does. TTFT overhead: at C = 1 the median TTFT of each client minus the median TTFT of a bare asyncio
socket client (send, first body byte) against the same server. Medians over rounds are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
VLLM = REPO / ".venv-vllm" / "bin" / "vllm"
TOKENIZER = REPO / ".cache" / "tiny-llama"


def sse_body(out_len: int) -> bytes:
    chunks = []
    for i in range(out_len):
        doc = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "text": f" t{i}", "logprobs": None, "finish_reason": "length" if i == out_len - 1 else None}]}  # fmt: skip
        chunks.append(f"data: {json.dumps(doc, separators=(',', ':'))}\n\n")
    usage = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "m", "choices": [],
             "usage": {"prompt_tokens": 32, "total_tokens": 32 + out_len, "completion_tokens": out_len}}  # fmt: skip
    chunks += [f"data: {json.dumps(usage, separators=(',', ':'))}\n\n", "data: [DONE]\n\n"]
    body = b"".join(f"{len(c.encode()):x}\r\n".encode() + c.encode() + b"\r\n" for c in chunks) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    return head + body


METRICS = (REPO / "tests" / "unit" / "data" / "vllm_metrics_tp1.txt").read_bytes()
METRICS_RESP = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: %d\r\n\r\n%s" % (
    len(METRICS),
    METRICS,
)
MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}).encode()
MODELS_RESP = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(MODELS),
    MODELS,
)


class ZeroWork(asyncio.Protocol):
    """Answers each complete request at once; keeps the connection open (HTTP/1.1 keep-alive)."""

    def __init__(self, stream: bytes) -> None:
        self.stream = stream
        self.buf = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            length = 0
            for line in head.split(b"\r\n"):
                if line.startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            if head.startswith(b"post"):
                self.t.write(self.stream)  # type: ignore[attr-defined]
            else:
                self.t.write(METRICS_RESP if head.startswith(b"get /metrics") else MODELS_RESP)  # type: ignore[attr-defined]


def serve(port: int, out_len: int) -> None:
    async def main() -> None:
        stream = sse_body(out_len)
        server = await asyncio.get_running_loop().create_server(
            lambda: ZeroWork(stream), "127.0.0.1", port, backlog=1024
        )
        async with server:
            await server.serve_forever()

    asyncio.run(main())


async def bare_ttft(port: int, n: int) -> list[float]:
    """Send-to-first-byte with a bare asyncio socket client: the floor any client measures."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    req = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    out = []
    for _ in range(n):
        st = time.perf_counter()
        w.write(req)
        await r.readuntil(b"\r\n\r\n")
        await r.readuntil(b"data:")
        out.append(time.perf_counter() - st)
        await r.readuntil(b"0\r\n\r\n")
    w.close()
    return out


async def amdtop_run(port: int, conc: int, seconds: float, out_len: int, record: bool = True) -> dict[str, float]:
    from amdtop.ramp.client import LoadSpec, run_step
    from amdtop.ramp.observe import default_worker_pids
    from amdtop.ramp.recorder import recorded_step

    spec = LoadSpec(f"http://127.0.0.1:{port}", "m", tuple(f"prompt {i}" for i in range(64)), 32, out_len)

    def load() -> Any:
        return run_step(spec, conc, warmup_s=1.0, duration_s=seconds)

    if not record:
        step, _ = await load()
        return step.to_json()
    (step, _), observed = await recorded_step(spec.url, load, warmup_s=1.0, duration_s=seconds, observer=None,
                                              worker_pids=default_worker_pids(spec.url))  # fmt: skip
    assert observed["server_metrics"] and observed["kv_cache_tokens"] == 524288, observed  # the recording really ran
    return {**step.to_json(), **observed}


def vllm_run(port: int, conc: int, prompts: int, out_len: int) -> dict[str, float]:
    """One ``vllm bench serve`` run; adds ``cpu_s``, the process's CPU seconds (import and set-up included)."""
    with tempfile.TemporaryDirectory() as d:
        argv = [str(VLLM), "bench", "serve", "--backend", "openai", "--base-url", f"http://127.0.0.1:{port}",
                "--endpoint", "/v1/completions", "--model", "m", "--tokenizer", str(TOKENIZER), "--dataset-name", "random",
                "--random-input-len", "32", "--random-output-len", str(out_len), "--ignore-eos", "--max-concurrency",
                str(conc), "--num-prompts", str(prompts), "--save-result", "--result-dir", d, "--result-filename", "r.json"]  # fmt: skip
        child = subprocess.Popen(argv, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)  # fmt: skip
        proc = psutil.Process(child.pid)
        cpu = 0.0
        while child.poll() is None:
            try:
                t = proc.cpu_times()
                cpu = t.user + t.system
            except psutil.Error:
                pass
            time.sleep(0.05)
        if child.returncode != 0:
            raise RuntimeError(f"vllm bench serve exited {child.returncode}")
        return {**json.loads((Path(d) / "r.json").read_text()), "cpu_s": cpu}


def per_cpu_rate(full: dict[str, float], base: dict[str, float]) -> float:
    """vllm bench's requests per CPU-second of its benchmark alone: the extra CPU of ``full`` over a run of ``base``'s
    few prompts (same import, tokenizer and dataset set-up) pays for the extra requests."""
    extra = full["cpu_s"] - base["cpu_s"]
    return (full["completed"] - base["completed"]) / extra if extra > 0 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=18190)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out-len", type=int, default=16)
    ap.add_argument("--no-record", action="store_true", help="amdtop without its per-step recording")
    ap.add_argument("--cpu-normalised", action="store_true", help="also requests per CPU-second of each client")
    ap.add_argument("--skip-ttft", action="store_true", help="skip the C=1 TTFT overhead rows")
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.port, a.out_len)
        return
    srv = subprocess.Popen([sys.executable, __file__, "--serve", "--port", str(a.port), "--out-len", str(a.out_len)])
    proc = psutil.Process(srv.pid)

    def busy() -> float:
        t = proc.cpu_times()
        return float(t.user + t.system)

    try:
        time.sleep(1.0)
        rows: dict[str, list[float]] = {}
        for _ in range(a.rounds):
            for conc in (64, 256):
                c0, w0 = busy(), time.perf_counter()
                ours = asyncio.run(amdtop_run(a.port, conc, a.seconds, a.out_len, not a.no_record))
                srv_ours = 100 * (busy() - c0) / (time.perf_counter() - w0)
                rate = ours["request_throughput"]
                rows.setdefault(f"amdtop c={conc} req/s", []).append(rate)
                rows.setdefault(f"amdtop c={conc} client CPU %", []).append(ours["client_cpu_pct"])
                rows.setdefault(f"amdtop c={conc} server CPU %", []).append(srv_ours)
                n = max(conc * 4, int(rate * a.seconds))
                theirs = vllm_run(a.port, conc, n, a.out_len)
                rows.setdefault(f"vllm c={conc} req/s", []).append(theirs["request_throughput"])
                rows.setdefault(f"amdtop/vllm c={conc}", []).append(rate / theirs["request_throughput"])
                if a.cpu_normalised:
                    # Requests per CPU-second of each client: what it would sustain given a whole core, whatever
                    # share of the shared machine it got during its run.
                    ours_pc = rate / (ours["client_cpu_pct"] / 100)
                    base = vllm_run(a.port, conc, conc, a.out_len)
                    theirs_pc = per_cpu_rate(theirs, base)
                    rows.setdefault(f"amdtop c={conc} req per CPU-s", []).append(ours_pc)
                    rows.setdefault(f"vllm c={conc} req per CPU-s", []).append(theirs_pc)
                    rows.setdefault(f"amdtop/vllm per CPU-s c={conc}", []).append(ours_pc / theirs_pc)
            if a.skip_ttft:
                print({k: round(v[-1], 3) for k, v in rows.items()}, flush=True)
                continue
            bare = asyncio.run(bare_ttft(a.port, 200))
            ours1 = asyncio.run(amdtop_run(a.port, 1, a.seconds, a.out_len))
            theirs1 = vllm_run(a.port, 1, 200, a.out_len)
            floor = statistics.median(bare) * 1000
            rows.setdefault("bare median TTFT ms", []).append(floor)
            rows.setdefault("amdtop TTFT overhead ms", []).append(ours1["median_ttft_ms"] - floor)
            rows.setdefault("vllm TTFT overhead ms", []).append(theirs1["median_ttft_ms"] - floor)
            print({k: round(v[-1], 3) for k, v in rows.items()}, flush=True)
        print("\n| measure | median | runs |\n|---|---:|---|")
        for k, v in rows.items():
            print(f"| {k} | {statistics.median(v):.3f} | {', '.join(f'{x:.3f}' for x in v)} |")
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
