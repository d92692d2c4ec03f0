"""Facts other amdtop commands leave in the state dir: the link probe's results and the load ramps' knees."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from amdtop.model import Flag, WorkerStatus
from amdtop.pipeline.frame import LinkBandwidth, RampKnee
from amdtop.probe.cache import cache_path, load_results
from amdtop.sysread import read_text

RAMP_DIRS = ("ramp", "ramps")


def load_probe(state_dir: Path) -> tuple[tuple[LinkBandwidth, ...], tuple[Flag, ...]]:
    """Measured bandwidth per GPU pair and the ``link_degraded`` flags of the cached probe; empty when none ran."""
    results = load_results(state_dir)
    if results is None:
        return (), ()
    gpus = sorted(set(results.gpus))
    out: list[LinkBandwidth] = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            value = results.pair_gbps(a, b)
            if value is not None:
                out.append(LinkBandwidth(a, b, float(value)))
    return tuple(out), tuple(results.flags)


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a forged or damaged record (port 99999): no ramp matches it, the tick goes on
        return None
    return f"{parts.hostname}:{port}" if port else parts.hostname


def load_ramp_knees(state_dir: Path, workers: Sequence[WorkerStatus] = ()) -> tuple[RampKnee, ...]:
    """The newest ramp result with a knee per worker, from ``state_dir/ramp/*.json`` (``ramp --json`` shape).

    The worker is the document's ``worker`` key, else the worker whose URL the ramp hit, else the ramp's URL.
    """
    by_origin = {_origin(w.url or (f"http://127.0.0.1:{w.port}" if w.port else None)): w.name for w in workers}
    by_origin.pop(None, None)
    newest: dict[str, tuple[float, RampKnee]] = {}
    for sub in RAMP_DIRS:
        folder = state_dir / sub
        if not folder.is_dir():
            continue
        for path in folder.glob("*.json"):
            try:
                doc = json.loads(read_text(path))
                knee = doc.get("knee") or {}
                concurrency = knee.get("concurrency")
                mtime = path.stat().st_mtime
            except (OSError, ValueError, AttributeError):
                continue
            if not isinstance(concurrency, int | float):
                continue
            url = doc.get("url")
            origin = _origin(url) if isinstance(url, str) else None
            worker = str(doc.get("worker") or by_origin.get(origin) or url or path.stem)
            when = doc.get("finished_at") or doc.get("timestamp") or mtime
            rec = doc.get("recommended_max_num_seqs")
            value = RampKnee(worker, int(concurrency), int(rec) if isinstance(rec, int | float) else None, float(when))
            if worker not in newest or newest[worker][0] < float(when):
                newest[worker] = (float(when), value)
    return tuple(v for _, v in sorted(newest.values(), key=lambda t: t[1].worker))


def state_stamp(state_dir: Path) -> tuple[float, ...]:
    """Modification times of what :func:`load_probe` and :func:`load_ramp_knees` read: unchanged means no re-read."""
    stamps: list[float] = []
    for path in (cache_path(state_dir), *(state_dir / sub for sub in RAMP_DIRS)):
        try:
            stamps.append(path.stat().st_mtime)
        except OSError:
            stamps.append(-1.0)
    return tuple(stamps)
