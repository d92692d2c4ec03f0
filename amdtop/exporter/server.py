"""The exporter: a Prometheus ``/metrics`` endpoint over a provider of :class:`~amdtop.pipeline.NodeFrame`.

In amdtop the exporter reads a node runtime (:func:`runtime_exporter`: ``amdtop export``, ``amdtop serve`` and the
dashboard's ``x`` alike): the runtime polls on its own clock, once per interval whoever scrapes, and a scrape serves
the frame it last published with the runtime's own poll count. A provider that polls (tests, benches) is called at
most once per ``min_interval``: a burst of scrapes is served from the cached state instead of multiplying device
calls.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from amdtop.errors import AmdtopError, InputError
from amdtop.exporter.families import PollStats, build_families
from amdtop.pipeline.frame import NodeFrame

if TYPE_CHECKING:
    from prometheus_client.core import Metric

Provider = Callable[[], NodeFrame]
DEFAULT_LISTEN = "127.0.0.1:9464"


def parse_listen(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6).

    Raises:
        InputError: no host, no port, or a port out of range.
    """
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host:
        raise InputError(f"--listen: {text!r} is not HOST:PORT; e.g. 127.0.0.1:9464 (name the host explicitly)")
    try:
        port = int(port_text)
    except ValueError:
        raise InputError(f"--listen: port {port_text!r} is not a number; e.g. 127.0.0.1:9464") from None
    if not 0 <= port <= 65535:
        raise InputError(f"--listen: port {port} is out of range; use 1-65535")
    return host, port


def is_loopback(host: str) -> bool:
    """True when ``host`` names only this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class CachedProvider:
    """Calls the provider at most once per ``min_interval`` seconds; thread-safe."""

    def __init__(self, provider: Provider, min_interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        """Wrap ``provider``; ``clock`` is injectable for tests."""
        self._provider = provider
        self._min_interval = min_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._state: NodeFrame | None = None
        self._taken_at = 0.0
        self._polls = 0
        self._duration = 0.0

    def get(self) -> tuple[NodeFrame, PollStats]:
        """The cached state, refreshed when older than the minimum interval."""
        # One lock for the whole poll: concurrent scrapes wait for the running poll instead of starting their own.
        with self._lock:
            now = self._clock()
            if self._state is None or now - self._taken_at >= self._min_interval:
                start = time.perf_counter()
                self._state = self._provider()
                self._duration = time.perf_counter() - start
                self._taken_at = now
                self._polls += 1
            return self._state, PollStats(self._polls, self._duration)

    @property
    def polls(self) -> int:
        """Provider calls so far."""
        return self._polls


class PolledNode(Protocol):
    """What :func:`runtime_exporter` reads: a runtime's newest frame and its own poll counters."""

    @property
    def polls(self) -> int: ...

    @property
    def last_duration_s(self) -> float: ...

    def latest(self) -> NodeFrame: ...


class RuntimeFeed:
    """A runtime's newest frame and its poll counters: the polls are the runtime's, never a scrape's."""

    def __init__(self, runtime: PolledNode) -> None:
        self.runtime = runtime

    def get(self) -> tuple[NodeFrame, PollStats]:
        """The newest frame (RuntimeError before the first: 500 and why) and the runtime's polls so far."""
        return self.runtime.latest(), PollStats(self.runtime.polls, self.runtime.last_duration_s)

    @property
    def polls(self) -> int:
        """The runtime's polls so far."""
        return self.runtime.polls


class _Collector:
    """prometheus-client collector over the cached provider or a runtime's feed."""

    def __init__(self, cache: CachedProvider | RuntimeFeed) -> None:
        self._cache = cache
        self._built: tuple[NodeFrame | None, list[Metric]] = (None, [])

    def collect(self) -> Iterator[Metric]:
        state, stats = self._cache.get()
        # A burst of scrapes of one frame (within min_interval, or between two ticks of the node runtime) re-serves
        # the families built for it.
        built, families = self._built
        if built is not state:
            families = build_families(state, stats)
            self._built = (state, families)
        yield from families

    def describe(self) -> list[Metric]:
        # Registering must not poll the node.
        return []


class Exporter:
    """Serves ``/metrics`` for one node; start and stop it as often as needed (the TUI toggles it)."""

    def __init__(
        self,
        provider: Provider,
        listen: str = DEFAULT_LISTEN,
        min_interval: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        feed: RuntimeFeed | None = None,
    ) -> None:
        """Prepare (not bind) an exporter on ``listen`` (``HOST:PORT``; port 0 picks a free one); ``feed``: a
        runtime's frames and polls instead of calling ``provider`` (see :func:`runtime_exporter`).

        Raises:
            InputError: ``listen`` is malformed or ``min_interval`` negative.
        """
        if min_interval < 0:
            raise InputError(f"min_interval: {min_interval} is negative; use 0 or more seconds")
        self.host, self.port = parse_listen(listen)
        self.cache: CachedProvider | RuntimeFeed = feed or CachedProvider(provider, min_interval, clock)
        # prometheus_client loads when an exporter is made, not when the dashboard (which only offers one on ``x``)
        # imports this module: it costs ~3 MiB RSS in the attached viewer.
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self.cache))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while serving."""
        return self._server is not None

    @property
    def url(self) -> str:
        """URL of the metrics page (the real port once started with port 0)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def render(self) -> bytes:
        """One scrape without HTTP (tests and benchmarks)."""
        from prometheus_client import generate_latest  # lazy: see __init__

        return bytes(generate_latest(self.registry))

    def start(self) -> None:
        """Bind and serve in a daemon thread.

        Raises:
            AmdtopError: the address is in use or not on this machine.
            InputError: the host name does not resolve.
        """
        if self._server is not None:
            return
        where = f"{self.host}:{self.port}"
        try:
            server = _metrics_server(self.host, self.port, self.registry)
        except socket.gaierror:
            raise InputError(f"--listen: host {self.host!r} does not resolve; use an address of this machine") from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise AmdtopError(f"--listen: {where} is already in use; pick another port with --listen") from None
            raise AmdtopError(f"--listen: cannot listen on {where}: {exc.strerror or exc}; check the address") from None
        # No poll interval: the loop sleeps until a scrape or the stop (prometheus_client's start_http_server woke it
        # twice a second for nothing, a cost of the serve's that the in-process dashboard does not pay).
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": None}, name="amdtop-exporter", daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread
        self.port = int(server.server_address[1])

    def stop(self) -> None:
        """Stop serving and free the port."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        # ``shutdown`` raises the loop's flag and waits for it; the loop sleeps without a timeout, so shutting the
        # listening socket down wakes it (its select then returns at once until the loop sees the flag).
        flag = threading.Thread(target=server.shutdown, name="amdtop-exporter-stop", daemon=True)
        flag.start()
        try:
            server.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        flag.join(timeout=5)
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)


def _metrics_server(host: str, port: int, registry: Any) -> Any:
    """prometheus_client's WSGI app on a threading server of the address's family (what ``start_http_server``
    builds, with its loop left to the caller), quiet: no access line per scrape on stderr."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app  # lazy: see __init__
    from prometheus_client.exposition import ThreadingWSGIServer

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingWSGIServer):
        address_family = family

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    return make_server(host, port, make_wsgi_app(registry), Server, handler_class=Quiet)


def runtime_exporter(runtime: PolledNode, listen: str = DEFAULT_LISTEN) -> Exporter:
    """An exporter of ``runtime``'s frames: it polls nothing itself, and ``amdtop_exporter_polls`` counts the
    runtime's polls (one per interval, whoever scrapes and how often)."""
    return Exporter(runtime.latest, listen, feed=RuntimeFeed(runtime))
