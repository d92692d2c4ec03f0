"""``python -m amdtop.simserver``: parse vllm-serve-like argv and run the simulated server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence

from amdtop.hip_devices import device_bdf
from amdtop.simserver.engine import SimConfig
from amdtop.simserver.server import SimServer
from amdtop.telemetry.sim import PARTITION_ENV, mi300x_topology

# vllm serve flags that take no value: an unknown flag followed by a bare word otherwise swallows that word.
_BOOL_FLAGS = {
    "--enforce-eager",
    "--trust-remote-code",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--disable-log-requests",
    "--disable-log-stats",
    "--enable-chunked-prefill",
    "--disable-custom-all-reduce",
    "--enable-auto-tool-choice",
    "--enable-expert-parallel",
    "--enable-server-load-tracking",
    "--enable-metrics",
    "--enable-dp-attention",
}


def build_parser() -> argparse.ArgumentParser:
    """The known options (vllm serve spellings are accepted alongside the simulator's own)."""
    p = argparse.ArgumentParser(prog="python -m amdtop.simserver", description="simulated vLLM OpenAI server")
    p.add_argument("model_tag", nargs="?", default=None, help="model (positional, as in vllm serve)")
    p.add_argument("--model", "--model-path", dest="model", default=None)
    p.add_argument(
        "--flavour", choices=("vllm", "sglang"), default="vllm", help="whose names, routes and titles to show"
    )
    p.add_argument("--metrics-page", default=None, help="serve this file verbatim as /metrics (a captured page)")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--capacity", type=int, default=None, help="concurrency at which throughput saturates")
    p.add_argument("--tokens-per-s", type=float, default=50.0, help="per-sequence decode speed (0 = unpaced)")
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--log-file", default=None)
    p.add_argument("--tp", "--tensor-parallel-size", "--tp-size", dest="tp", type=int, default=1)
    p.add_argument("--dp", "--data-parallel-size", "--dp-size", dest="dp", type=int, default=1)
    p.add_argument("--max-num-seqs", "--max-running-requests", dest="max_num_seqs", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--gpu-memory-utilization", "--mem-fraction-static", dest="gpu_memory_utilization", type=float,
                   default=0.9)  # fmt: skip
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--kv-cache-tokens", type=int, default=None, help="KV cache size in tokens (default 524288)")
    p.add_argument("--num-gpu-blocks-override", type=int, default=None, help="KV cache size in blocks (as vllm serve)")
    p.add_argument("--background-load", type=int, default=0, help="synthetic sequences kept running (demo)")
    p.add_argument("--api-key", nargs="+", default=None, help="keys guarding /v1 (as vllm serve; else VLLM_API_KEY)")
    p.add_argument("--fail-after", type=int, default=None, help="requests after the first N get HTTP 500")
    p.add_argument("--error-chunk-after", type=int, default=None, help="streams after the first N get an error chunk")
    return p


def split_unknown(argv: Sequence[str], parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """Separate unknown ``--foo value`` pairs (and ``--foo=value``) from the argv the parser knows."""
    known = {s for a in parser._actions for s in a.option_strings}
    keep: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        name = tok.split("=", 1)[0]
        if tok.startswith("--") and name not in known:
            dropped.append(tok)
            if "=" not in tok and name not in _BOOL_FLAGS and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                dropped.append(argv[i + 1])
                i += 1
        else:
            keep.append(tok)
        i += 1
    return keep, dropped


def _kv_tokens(a: argparse.Namespace) -> int:
    block: int = max(1, int(a.block_size))
    if a.num_gpu_blocks_override is not None:
        return max(1, int(a.num_gpu_blocks_override)) * block
    if a.kv_cache_tokens is not None:
        return max(1, int(a.kv_cache_tokens))
    # The default scales with --gpu-memory-utilization around vLLM's 0.9, so a retune of it shows in the capacity.
    return max(1, round(524288 * float(a.gpu_memory_utilization) / 0.9))


def config_from_argv(argv: Sequence[str]) -> tuple[SimConfig, list[str]]:
    """Parse argv into a :class:`SimConfig`; returns it and the ignored arguments."""
    parser = build_parser()
    keep, dropped = split_unknown(list(argv), parser)
    a = parser.parse_args(keep)
    model = a.served_model_name or a.model or a.model_tag or "sim-model"
    capacity = a.capacity if a.capacity is not None else (a.max_num_seqs or 8)
    if a.max_num_seqs is not None:
        # Like vLLM, never more running sequences than max-num-seqs.
        capacity = min(capacity, a.max_num_seqs)
    cfg = SimConfig(
        host=a.host,
        port=a.port,
        model=model,
        capacity=max(1, capacity),
        tokens_per_s=a.tokens_per_s,
        ttft_ms=a.ttft_ms,
        tp=a.tp,
        max_model_len=a.max_model_len,
        max_num_seqs=a.max_num_seqs,
        kv_cache_tokens=_kv_tokens(a),
        block_size=max(1, int(a.block_size)),
        gpu_memory_utilization=a.gpu_memory_utilization,
        fail_after=a.fail_after,
        error_chunk_after=a.error_chunk_after,
        log_file=a.log_file,
        background_load=max(0, a.background_load),
        api_keys=tuple(a.api_key or ()),
        dp=max(1, a.dp),
        dev_mode=os.environ.get("VLLM_SERVER_DEV_MODE", "") == "1",
        nccl_debug=os.environ.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"),
        gpu_bdfs=visible_bdfs(os.environ),
        p2p_disabled=os.environ.get("NCCL_P2P_DISABLE", "").strip().lower() in ("1", "true", "yes"),
        flavour=a.flavour,
        metrics_page=a.metrics_page,
    )
    return cfg, dropped


def visible_bdfs(env: Mapping[str, str]) -> tuple[str, ...]:
    """PCI addresses of the simulated devices named by HIP_VISIBLE_DEVICES (else CUDA_VISIBLE_DEVICES).

    The indices are HIP devices: on a partitioned node (the demo sets ``AMDTOP_SIM_PARTITION``) device 5 in CPX is
    partition 5 of GPU 0 (``0000:05:00.5``), not GPU 5, and RCCL prints that partition's bus id.
    """
    raw = env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES") or ""
    try:
        topology = mi300x_topology(env.get(PARTITION_ENV, "").strip() or None)
    except ValueError:
        topology = mi300x_topology()
    out = []
    for part in raw.split(","):
        part = part.strip()
        bdf = device_bdf(topology, int(part)) if part.isdigit() else None
        if bdf is not None:
            out.append(bdf)
    return tuple(out)


async def _run(cfg: SimConfig, dropped: list[str]) -> None:
    server = SimServer(cfg)
    if dropped:
        server.log.info("arg_utils.py:1", f"ignoring unsupported arguments: {' '.join(dropped)}", level="WARNING")
    await server.start()
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, task.cancel if task else (lambda: None))
    with contextlib.suppress(asyncio.CancelledError):
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the simulated server until SIGTERM/SIGINT."""
    cfg, dropped = config_from_argv(sys.argv[1:] if argv is None else argv)
    try:
        asyncio.run(_run(cfg, dropped))
    except OSError as exc:
        sys.stderr.write(f"amdtop-simserver: error: --port: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
