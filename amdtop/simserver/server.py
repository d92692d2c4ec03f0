"""The simulated server's routes: health, models, tokenize, completions (SSE like vLLM), metrics."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
from typing import Any

from amdtop.simserver import http, sglang_flavour
from amdtop.simserver.background import run_background
from amdtop.simserver.engine import SimConfig, SimEngine, SimRequest
from amdtop.simserver.logs import SimLog, rccl_init_lines
from amdtop.simserver.metrics import render

WORDS = (
    "the", "gpu", "node", "model", "token", "batch", "cache", "memory", "latency", "throughput", "kernel",
    "tensor", "parallel", "rank", "link", "fabric", "clock", "power", "queue", "stream", "prompt", "layer",
    "weight", "shard", "expert", "router", "vector", "matrix", "attention", "decode", "prefill", "server",
    "client", "request", "reply", "engine", "worker", "socket", "thread", "core", "numa", "page", "block", "slot",
    "table", "index", "value", "key", "hello", "world", "fast", "slow", "warm", "cold", "high", "low", "open",
    "close", "read", "write", "send", "receive", "start", "stop", "ready", "wait", "run",
)  # fmt: skip
SPECIAL = ("<unk>", "<s>", "</s>", "<pad>")
VOCAB = SPECIAL + tuple(WORDS)
WORD_ID = {w: i for i, w in enumerate(VOCAB)}
BOS = 1
FINGERPRINT = "vllm-0.32.0-sim"


def tokenize(text: str, add_special: bool = True) -> list[int]:
    """Whitespace tokens mapped into the vocabulary (unknown words become ``<unk>``)."""
    ids = [WORD_ID.get(w, 0) for w in text.split()]
    return [BOS, *ids] if add_special else ids


def _chat_text(messages: Any) -> str:
    if not isinstance(messages, list):
        raise ValueError("messages must be a list")
    parts = []
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        parts.append(
            f"{m.get('role', 'user') if isinstance(m, dict) else 'user'} {content if isinstance(content, str) else ''}"
        )
    return " ".join(parts)


QUIET_PATHS = frozenset({"/health", "/metrics"})
"""Probes amdtop itself sends every few seconds: logging each 200 would bury the demo's log pane."""


class SimServer:
    """One simulated OpenAI-compatible endpoint."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        # One engine per data-parallel rank; requests go to the least loaded one (vLLM's DP coordinator balances by
        # queue length too).
        self.engines = [SimEngine(cfg) for _ in range(max(1, cfg.dp))]
        self.engine = self.engines[0]
        self.sleep_level = 0
        self._received = 0
        self.log = SimLog(cfg.log_file)
        self.created = time.time()
        self._server: asyncio.base_events.Server | None = None
        self._last_stats = (time.monotonic(), 0, 0)
        self._background: asyncio.Task[None] | None = None
        # vLLM's rule (entrypoints/serve/middleware): --api-key, else VLLM_API_KEY, guards the /v1 routes with
        # ``Authorization: Bearer``; /health and /metrics stay open.
        self.api_keys = tuple(k for k in (cfg.api_keys or (os.environ.get("VLLM_API_KEY", ""),)) if k)
        if cfg.flavour == "sglang":
            self.api_keys = cfg.api_keys  # SGLang reads its key from --api-key only
        self._ranks: list[Any] = []

    async def start(self) -> None:
        """Bind, start the engine and log the vLLM start-up milestones."""
        cfg = self.cfg
        if cfg.flavour == "sglang":
            return await self._start_sglang()
        self.log.info("api_server.py:1", f"vLLM API server version 0.32.0 (simulated by amdtop), model {cfg.model}")
        self.log.info(
            "utils.py:286",
            f"non-default args: {{'model': '{cfg.model}', 'port': {cfg.port}, 'tensor_parallel_size': {cfg.tp}}}",
        )
        self.log.info("model.py:2152", f"Using max model len {cfg.max_model_len}")
        if cfg.nccl_debug:
            for line in rccl_init_lines(cfg.tp, os.getpid(), bdfs=cfg.gpu_bdfs, p2p=not cfg.p2p_disabled):
                self.log.raw(line)
        self.log.info("kv_cache_utils.py:1", f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens", proc="EngineCore")
        for engine in self.engines:
            engine.start()
        if cfg.background_load:
            loop = asyncio.get_running_loop()
            # Replicas are load-balanced, not identical: the first gets a little more of the synthetic load.
            shares = [max(1, cfg.background_load * (len(self.engines) + 1 - i) // (2 * len(self.engines) or 1))
                      for i in range(len(self.engines))] if len(self.engines) > 1 else [cfg.background_load]  # fmt: skip
            self._backgrounds = [
                loop.create_task(run_background(e, n)) for e, n in zip(self.engines, shares, strict=True)
            ]
            self._background = self._backgrounds[0]
        self._server = await asyncio.start_server(self._conn, cfg.host, cfg.port, limit=1 << 20)
        self.log.info("entry.py:140", f"Starting vLLM server on http://{cfg.host}:{cfg.port}")
        self.log.raw("INFO:     Application startup complete.")

    async def _start_sglang(self) -> None:
        """:meth:`start` as an SGLang server: its ranks, its log's start and ready lines (sglang's own wording, "The
        server is fired up and ready to roll!", docs/platforms/amd_gpu.md), no vLLM lines."""
        cfg = self.cfg
        self.log.raw(f"[sglang simulated by amdtop] server_args=model_path={cfg.model!r}, tp_size={cfg.tp}, "
                     f"dp_size={cfg.dp}, port={cfg.port}")  # fmt: skip
        if cfg.nccl_debug:
            for line in rccl_init_lines(cfg.tp, os.getpid(), bdfs=cfg.gpu_bdfs, p2p=not cfg.p2p_disabled):
                self.log.raw(line)
        for engine in self.engines:
            engine.start()
        self._ranks = sglang_flavour.spawn_ranks(cfg)
        if cfg.background_load:
            loop = asyncio.get_running_loop()
            share = max(1, cfg.background_load // len(self.engines))
            self._backgrounds = [loop.create_task(run_background(e, share)) for e in self.engines]
            self._background = self._backgrounds[0]
        self._server = await asyncio.start_server(self._conn, cfg.host, cfg.port, limit=1 << 20)
        self.log.raw(f"INFO:     Uvicorn running on http://{cfg.host}:{cfg.port} (Press CTRL+C to quit)")
        self.log.raw("The server is fired up and ready to roll!")

    async def serve_forever(self) -> None:
        """Run until cancelled, logging engine stats every 10 s while busy."""
        assert self._server is not None
        try:
            while True:
                await asyncio.sleep(10.0)
                self._log_stats()
        finally:
            self._server.close()
            for task in getattr(self, "_backgrounds", ()):
                task.cancel()
            for engine in self.engines:
                await engine.stop()
            for rank in self._ranks:
                rank.terminate()
            for rank in self._ranks:
                with contextlib.suppress(Exception):
                    rank.wait(timeout=5)
            self.log.info("launcher.py:1", "[shutdown] API server: shutdown triggered")
            self.log.close()

    def _log_stats(self) -> None:
        t0, p0, g0 = self._last_stats
        now, e = time.monotonic(), self.engine
        dp, dg = e.prompt_tokens_total - p0, e.generation_tokens_total - g0
        self._last_stats = (now, e.prompt_tokens_total, e.generation_tokens_total)
        if (dp or dg or e.running or e.waiting) and self.cfg.flavour == "sglang":
            # SGLang's scheduler line (its wording, e.g. sgl-project/sglang#11854's log: "Decode batch. #running-req:
            # 32, #token: 157952, token usage: 0.21, ..., gen throughput (token/s): 693.45, #queue-req: 0")
            dt = max(1e-9, now - t0)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            self.log.raw(
                f"[{stamp}] Decode batch. #running-req: {len(e.running)}, "
                f"#token: {round(e.kv_usage() * self.cfg.kv_cache_tokens)}, token usage: {e.kv_usage():.2f}, "
                f"gen throughput (token/s): {dg / dt:.2f}, #queue-req: {len(e.waiting)}"
            )
        elif dp or dg or e.running or e.waiting:
            dt = max(1e-9, now - t0)
            self.log.info(
                "loggers.py:335",
                f"Engine 000: Avg prompt throughput: {dp / dt:.1f} tokens/s, Avg generation throughput: {dg / dt:.1f} "
                f"tokens/s, Running: {len(e.running)} reqs, Waiting: {len(e.waiting)} reqs, "
                f"GPU KV cache usage: {100 * e.kv_usage():.1f}%, Prefix cache hit rate: 0.0%",
            )

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer_info = writer.get_extra_info("peername")
        peer = f"{peer_info[0]}:{peer_info[1]}" if isinstance(peer_info, tuple) else "-"
        try:
            while True:
                req = await http.read_request(reader, peer)
                if req is None:
                    break
                status = await self._route(req, writer)
                if req.path not in QUIET_PATHS or status != 200:
                    self.log.access(peer, req.method, req.path, status)
                if not req.keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # The server is stopping with a client's kept connection open (amdtop's status pass keeps them). Ended as
            # cancelled, this handler makes Python 3.11's stream callback call task.exception() on it, which raises
            # and prints a CancelledError traceback into the log: a stopped server would read as crashed. Uvicorn
            # closes such connections without a word; so does this.
            return
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, req: http.HttpRequest, w: asyncio.StreamWriter) -> int:
        cfg = self.cfg
        path, get = req.path, req.method == "GET"
        if self.api_keys and path.startswith(("/v1", "/v2")):
            scheme, _, token = req.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or token not in self.api_keys:
                return await self._send(w, http.json_response(401, {"error": "Unauthorized"}), 401)
        if get and path == "/health":
            return await self._send(w, http.response_bytes(200, b""), 200)
        if (
            cfg.flavour == "sglang"
            and get
            and path in ("/metrics", "/get_model_info", "/model_info", "/load", "/version")
        ):
            return await self._sglang_route(path, w)
        if get and path == "/version":
            return await self._send(w, http.json_response(200, {"version": "0.32.0"}), 200)
        if get and path == "/load":
            load = sum(len(e.running) for e in self.engines)
            return await self._send(w, http.json_response(200, {"server_load": load}), 200)
        if get and path == "/metrics":
            body = render(self.engines, self.created, self.sleep_level).encode()
            return await self._send(w, http.response_bytes(200, body, "text/plain; version=0.0.4; charset=utf-8"), 200)
        if get and path == "/v1/models":
            card = {
                "id": cfg.model,
                "object": "model",
                "created": int(self.created),
                "owned_by": "vllm",
                "root": cfg.model,
                "parent": None,
                "max_model_len": cfg.max_model_len,
            }
            return await self._send(w, http.json_response(200, {"object": "list", "data": [card]}), 200)
        if cfg.dev_mode and path.split("?")[0] in ("/sleep", "/wake_up", "/is_sleeping"):
            return await self._sleep_route(req, w)
        if req.method != "POST":
            return await self._send(w, self._error(404, "Not Found"), 404)
        try:
            doc = req.json()
            if not isinstance(doc, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            return await self._send(w, self._error(400, f"bad JSON body: {exc}"), 400)
        if path == "/tokenize":
            text = doc.get("prompt") if "prompt" in doc else _chat_text(doc.get("messages", []))
            ids = tokenize(str(text), bool(doc.get("add_special_tokens", True)))
            out = {"count": len(ids), "max_model_len": cfg.max_model_len, "tokens": ids, "token_strs": None}
            return await self._send(w, http.json_response(200, out), 200)
        if path == "/detokenize":
            ids = [int(i) for i in doc.get("tokens", [])]
            text = " ".join(VOCAB[i] for i in ids if 0 <= i < len(VOCAB) and i != BOS)
            return await self._send(w, http.json_response(200, {"prompt": text}), 200)
        if path in ("/v1/completions", "/v1/chat/completions"):
            return await self._generate(req, doc, w, chat=path.endswith("chat/completions"))
        return await self._send(w, self._error(404, "Not Found"), 404)

    async def _sglang_route(self, path: str, w: asyncio.StreamWriter) -> int:
        if path == "/metrics":
            if self.cfg.metrics_page is not None:
                with open(self.cfg.metrics_page, "rb") as f:
                    body = f.read()
            else:
                body = sglang_flavour.render(self.engines).encode()
            return await self._send(w, http.response_bytes(200, body, "text/plain; version=0.0.4; charset=utf-8"), 200)
        if path in ("/model_info", "/get_model_info"):
            return await self._send(w, http.json_response(200, sglang_flavour.model_info(self.cfg)), 200)
        return await self._send(w, self._error(404, "Not Found"), 404)  # vLLM's /load and /version

    async def _sleep_route(self, req: http.HttpRequest, w: asyncio.StreamWriter) -> int:
        # vLLM's dev-mode endpoints (vllm/entrypoints/serve/dev): POST /sleep?level=N, POST /wake_up, GET /is_sleeping.
        path, _, query = req.path.partition("?")
        if path == "/is_sleeping" and req.method == "GET":
            return await self._send(w, http.json_response(200, {"is_sleeping": self.sleep_level > 0}), 200)
        if path == "/wake_up" and req.method == "POST":
            self.sleep_level = 0
            for engine in self.engines:
                engine.resume()
            return await self._send(w, http.json_response(200, {"status": "awake", "tags": None}), 200)
        if path == "/sleep" and req.method == "POST":
            params = dict(p.partition("=")[::2] for p in query.split("&") if p)
            level = int(params.get("level", "1")) if params.get("level", "1").isdigit() else 0
            if level not in (1, 2):
                return await self._send(w, self._error(400, f"invalid sleep level {params.get('level')}"), 400)
            self.sleep_level = level
            for engine in self.engines:
                engine.pause()
            self.log.info("abstract.py:390", "It took 0.002 seconds to fall asleep.", proc="EngineCore")
            return await self._send(w, http.json_response(200, {"status": "sleeping", "level": level}), 200)
        return await self._send(w, self._error(405, "Method Not Allowed"), 405)

    def _pick(self) -> SimEngine:
        return min(self.engines, key=lambda e: len(e.running) + len(e.waiting))

    @staticmethod
    def _error(status: int, message: str) -> bytes:
        kind = "BadRequestError" if status < 500 else "InternalServerError"
        return http.json_response(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

    @staticmethod
    async def _send(w: asyncio.StreamWriter, data: bytes, status: int) -> int:
        w.write(data)
        await w.drain()
        return status

    async def _generate(
        self, req: http.HttpRequest, doc: dict[str, Any], w: asyncio.StreamWriter, *, chat: bool
    ) -> int:
        cfg, engine = self.cfg, self._pick()
        index = self._received
        self._received += 1
        engine.received += 1
        if cfg.fail_after is not None and index >= cfg.fail_after:
            engine.success["error"] += 1
            return await self._send(
                w, self._error(500, "EngineCore encountered an issue. See stack trace (above) for the root cause."), 500
            )
        try:
            text = _chat_text(doc.get("messages")) if chat else doc.get("prompt", "")
            if isinstance(text, list):
                text = " ".join(map(str, text))
            prompt_ids = tokenize(str(text))
            max_tokens = int(doc.get("max_tokens") or doc.get("max_completion_tokens") or 16)
            if max_tokens < 1:
                raise ValueError("max_tokens must be at least 1")
        except (ValueError, TypeError, AttributeError) as exc:
            return await self._send(w, self._error(400, str(exc)), 400)
        if len(prompt_ids) + max_tokens > cfg.max_model_len:
            msg = f"This model's maximum context length is {cfg.max_model_len} tokens. However, you requested {len(prompt_ids) + max_tokens} tokens."
            return await self._send(w, self._error(400, msg), 400)
        stream = bool(doc.get("stream", False))
        opts = doc.get("stream_options") or {}
        include_usage = bool(opts.get("include_usage")) if isinstance(opts, dict) else False
        error_at = None
        if stream and cfg.error_chunk_after is not None and index >= cfg.error_chunk_after:
            error_at = min(2, max_tokens - 1)
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(8)
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        pieces: list[str] = []
        n_prompt = len(prompt_ids)

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            body = {"id": rid, "object": obj, "created": created, "model": cfg.model, "choices": choices, **extra}
            return http.sse_event(json.dumps(body, separators=(",", ":")))

        def choice(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "stop_reason": None}
            return {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
                "prompt_token_ids": None,
                "token_ids": None,
            }

        def on_token(i: int) -> None:
            word = " " + WORDS[(i * 7 + n_prompt) % len(WORDS)]
            pieces.append(word)
            if not stream:
                return
            if w.is_closing():
                # The client went away (a failed write closed the transport): free the slot.
                on_finish("abort")
                return
            w.write(chunk([choice(word, "length" if i + 1 >= max_tokens else None)]))

        def on_finish(reason: str) -> None:
            if not done.done():
                done.set_result(reason)

        sreq = SimRequest(
            prompt_tokens=n_prompt, max_tokens=max_tokens, on_token=on_token, on_finish=on_finish, error_at=error_at
        )
        if stream:
            w.write(http.sse_head())
            if chat:
                w.write(chunk([choice(None, None, role=True)]))
        engine.submit(sreq)
        try:
            reason = await done
        except asyncio.CancelledError:
            engine.abort(sreq)
            raise
        if reason == "abort":
            engine.abort(sreq)
            return 499
        usage = {"prompt_tokens": n_prompt, "total_tokens": n_prompt + sreq.emitted, "completion_tokens": sreq.emitted}
        if not stream:
            if reason == "error":
                return await self._send(w, self._error(500, "EngineCore encountered an issue."), 500)
            if chat:
                ch: dict[str, Any] = {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(pieces)},
                    "logprobs": None,
                    "finish_reason": reason,
                    "stop_reason": None,
                }
            else:
                ch = {
                    "index": 0,
                    "text": "".join(pieces),
                    "logprobs": None,
                    "finish_reason": reason,
                    "stop_reason": None,
                }
            body = {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": cfg.model,
                "choices": [ch],
                "usage": usage,
            }
            return await self._send(w, http.json_response(200, body), 200)
        if reason == "error":
            err = {
                "error": {
                    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            }
            w.write(http.sse_event(json.dumps(err)))
        elif include_usage:
            w.write(chunk([], usage=usage, system_fingerprint=FINGERPRINT))
        w.write(http.sse_event("[DONE]") + http.SSE_END)
        await w.drain()
        return 200
