"""CPU per HTTP call of the worker prober: httpx (one request per connection, as the prober used) against
``http.client`` one connection per call (what ``amdtop.supervisor.metrics.Prober`` used until issue 53) and on one
kept connection (what it uses since: ``bounded_get.KeptConnections``), ``/health`` and ``/metrics`` of one demo
worker; ``Prober`` is the whole call (``/metrics`` parsed too).

    .venv/bin/python bench/probe_http.py --rounds 5 --calls 100
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from amdtop.supervisor import Supervisor
from amdtop.supervisor.metrics import Prober
from amdtop.telemetry.sim import SimBackend
from tests.gates import PASS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100, help="calls of each path per round")
    a = ap.parse_args()
    sim = SimBackend()
    state = Path(tempfile.mkdtemp(prefix="amdtop-bench-"))
    sup = Supervisor(
        state / "none.toml", state, gate=PASS, topology=sim.topology(), demo=True, sim=sim, demo_port_base=18650
    )
    name = sup.names()[0]
    sup.launch(name)
    try:
        url = sup.wait_ready(name, timeout=60).url or ""
        parts = urlsplit(url)
        client = httpx.Client(timeout=0.5, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))
        prober = Prober()

        def with_httpx(path: str) -> int:
            return len(client.get(url + path).content)

        def with_http_client(path: str) -> int:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=0.5)
            try:
                conn.request("GET", path, headers={"Connection": "close"})
                return len(conn.getresponse().read())
            finally:
                conn.close()

        kept = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=0.5)

        def with_kept_connection(path: str) -> int:
            kept.request("GET", path)
            return len(kept.getresponse().read())

        def with_prober(path: str) -> int:
            return 0 if (prober.health(url) if path == "/health" else prober.scrape(name, url)) is None else 1

        peers = {
            "httpx": with_httpx,
            "http.client": with_http_client,
            "kept conn.": with_kept_connection,
            "Prober": with_prober,
        }
        results: dict[str, list[float]] = {}
        for _ in range(a.rounds):
            for label, call in peers.items():
                start = time.process_time()
                for _ in range(a.calls):
                    call("/health")
                    call("/metrics")
                results.setdefault(label, []).append((time.process_time() - start) / (2 * a.calls) * 1e6)
        base = statistics.median(results["http.client"])
        for label, runs in results.items():
            med = statistics.median(runs)
            print(
                f"{label:12s} median {med:6.0f} us per call ({med / base:.2f}x http.client); runs {[round(r) for r in runs]}"
            )
    finally:
        sup.stop(name, grace=2)
        sup.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
