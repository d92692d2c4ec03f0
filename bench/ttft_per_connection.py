"""TTFT per keep-alive connection against an OpenAI-compatible server, with a raw socket (no HTTP library).

Shows whether time to first token depends on the connection: N connections, M sequential streaming requests each.
Usage: python bench/ttft_per_connection.py --port 18190 --model tiny [--connections 6 --requests 15] [--quickack]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import time


def one(sock: socket.socket, request: bytes, quickack: bool) -> float:
    t0 = time.perf_counter()
    sock.sendall(request)
    buf, ttft = b"", None
    while True:
        data = sock.recv(65536)
        if quickack:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        if not data:
            break
        buf += data
        if ttft is None and b'data: {"id"' in buf and b'"text":"' in buf:
            ttft = time.perf_counter() - t0
        if b"data: [DONE]" in buf:
            break
    return (ttft or 0.0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--connections", type=int, default=6)
    ap.add_argument("--requests", type=int, default=15)
    ap.add_argument("--quickack", action="store_true", help="set TCP_QUICKACK after every recv")
    args = ap.parse_args()
    body = json.dumps(
        {"model": args.model, "prompt": "the gpu runs a model and the server streams tokens", "max_tokens": 64,
         "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True}}
    ).encode()  # fmt: skip
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    for conn in range(args.connections):
        sock = socket.create_connection(("127.0.0.1", args.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        values = [one(sock, request, args.quickack) for _ in range(args.requests)]
        sock.close()
        print(
            f"conn {conn}: median TTFT {statistics.median(values):.1f} ms  min {min(values):.1f} max {max(values):.1f}"
        )


if __name__ == "__main__":
    main()
