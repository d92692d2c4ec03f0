"""``amdtop web``: the dashboard in a browser through textual-serve, each tab a thin viewer attached to the serve.

textual-serve as shipped starts ``command`` through a shell with a copy of our environment for each websocket and
asks nobody for credentials. Here each tab runs ``python -m tui --attach-only`` (no shell; argv only) with an
environment reduced to what a viewer needs, the viewers are read-only unless ``--allow-control``, and every request
must carry the token written to ``<state-dir>/web-token``: ``?token=`` on the first load (then a cookie), or
``Authorization: Bearer``. Anything else gets 401.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import logging
import os
import secrets
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from amdtop.cli.common import config_path, state_dir
from amdtop.errors import AmdtopError, os_reason
from amdtop.exporter import parse_listen
from amdtop.exporter.server import is_loopback
from amdtop.serve.server import running_serve_pid

TOKEN_FILE = "web-token"
COOKIE = "amdtop_web_token"
VIEWER_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
    "XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR", "VIRTUAL_ENV", "PYTHONPATH",
)  # fmt: skip
"""The only variables a viewer inherits: where amdtop's files are and how to print text. Tokens, keys and the
rest of the operator's shell stay out of processes that a browser drives."""


TEXTUAL_SERVE_CHECKED = "1.1.3"
"""The textual-serve whose private methods below were read and overridden; another one is refused at start."""
OVERRIDDEN = (
    (Server, "_make_app"),  # where the token check is added: without it every request is served
    (Server, "handle_websocket"),
    (Server, "_process_messages"),  # called from our websocket handler
    (Server, "initialize_logging"),
    (Server, "on_startup"),
    (AppService, "_build_environment"),  # without it a viewer gets the whole environment
    (AppService, "_open_app_process"),  # without it a viewer runs through a shell
)


def check_textual_serve(version: str | None = None) -> None:
    """AmdtopError (one line, naming the fix) unless textual-serve is the version checked against and has every
    method overridden here: a renamed ``_make_app`` would serve without the token, a renamed ``_open_app_process``
    would bring the shell back."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    if version is None:
        try:
            version = installed("textual-serve")
        except PackageNotFoundError:
            version = "not installed"
    fix = f"pip install textual-serve=={TEXTUAL_SERVE_CHECKED}"
    if version != TEXTUAL_SERVE_CHECKED:
        raise AmdtopError(
            f"web: textual-serve {version} is not {TEXTUAL_SERVE_CHECKED}, the version amdtop web was checked against; {fix}"
        )
    for cls, name in OVERRIDDEN:
        if not callable(getattr(cls, name, None)):
            raise AmdtopError(
                f"web: textual-serve {version} has no {cls.__name__}.{name}, which amdtop web overrides or calls; {fix}"
            )


def write_token(directory: Path) -> str:
    """A fresh random token in ``<state-dir>/web-token`` (0600, replaced on every start).

    Written to a new file of its own (``O_CREAT | O_EXCL | O_NOFOLLOW``: never through a symlink or into a file
    someone else made) and renamed over the old one, which replaces a symlink itself, never its target."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_urlsafe(32)
    path = directory / TOKEN_FILE
    tmp = directory / f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.write(fd, (token + "\n").encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return token


def viewer_environment(environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    """The reduced environment of a viewer process."""
    return {k: environ[k] for k in VIEWER_ENV if k in environ}


class ViewerService(AppService):
    """One browser tab's viewer: argv without a shell, the reduced environment."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        super().__init__(" ".join(argv), **kwargs)
        self.argv = argv

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        full = super()._build_environment(width, height)
        env = viewer_environment()
        # Textual's web driver settings, which the parent class adds to its copy of everything.
        env.update({k: v for k, v in full.items() if k.startswith(("TEXTUAL", "TERM_PROGRAM")) or k in ("COLUMNS", "ROWS")})
        return env

    async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._build_environment(width=width, height=height),
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        return process


class WebServer(Server):
    """textual-serve with a token check on every request and :class:`ViewerService` for every websocket."""

    def __init__(self, argv: list[str], token: str, host: str, port: int) -> None:
        super().__init__(" ".join(argv), host=host, port=port, title="amdtop")
        self.argv = argv
        self.token = token
        self.viewers = 0
        """Viewer processes running now."""

    def initialize_logging(self) -> None:
        # One line per request on stdout is noise for an operator; errors still show.
        logging.basicConfig(level=logging.WARNING, format="%(message)s")

    def serve_on(self, sock: socket.socket, debug: bool = False) -> None:
        """textual-serve's :meth:`serve`, on a socket already bound (the port is taken before the token is written:
        a busy port leaves the token of the web server that holds it alone)."""
        self.debug = debug
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.add_signal_handler(signal.SIGINT, self.request_exit)
            loop.add_signal_handler(signal.SIGTERM, self.request_exit)
        except NotImplementedError:
            pass
        web.run_app(self._make_app(), sock=sock, handle_signals=False, loop=loop, print=lambda *args: None)

    async def on_startup(self, app: web.Application) -> None:
        pass  # textual-serve's logo and URL: ours, with the token, went to stderr once

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._auth)
        return app

    def _presented(self, request: web.Request) -> tuple[str | None, bool]:
        """(the token the request carries, whether it came in the query)."""
        if (query := request.query.get("token")) is not None:
            return query, True
        header = request.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            return header[len("Bearer ") :].strip(), False
        return request.cookies.get(COOKIE), False

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        presented, in_query = self._presented(request)
        if presented is None or not hmac.compare_digest(presented.encode(), self.token.encode()):
            return web.Response(status=401, text="401 Unauthorized: amdtop web wants its token (<state-dir>/web-token)\n")
        response: web.StreamResponse = await handler(request)
        if in_query and not isinstance(response, web.WebSocketResponse) and not response.prepared:
            # The websocket and static requests the page makes carry the cookie, not the token in their URLs.
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        # textual-serve's handler, with our service class (its own builds the shell command and copies os.environ).
        websocket = web.WebSocketResponse(heartbeat=15)
        width = to_int(request.query.get("width", "80"), 80)
        height = to_int(request.query.get("height", "24"), 24)
        service: ViewerService | None = None
        try:
            await websocket.prepare(request)
            service = ViewerService(
                self.argv,
                write_bytes=websocket.send_bytes,
                write_str=websocket.send_str,
                close=websocket.close,
                download_manager=self.download_manager,
                debug=self.debug,
            )
            self.viewers += 1
            await service.start(width, height)
            try:
                await self._process_messages(websocket, service)
            finally:
                await service.stop()
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as error:
            logging.getLogger(__name__).exception(error)
        finally:
            if service is not None:
                self.viewers -= 1
                await service.stop()
                process = service._process
                if process is not None and process.returncode is None:
                    process.kill()  # a viewer that did not quit when its tab closed
        return websocket


def viewer_argv(args: argparse.Namespace, directory: Path) -> list[str]:
    """The command of one tab's viewer: attached to the serve or nothing (``--attach-only``)."""
    argv = [sys.executable, "-m", "tui", "--attach-only", "--state-dir", str(directory)]
    argv += ["--config", str(config_path(args).absolute())]
    if not args.allow_control:
        argv.append("--readonly")
    return argv


def run(args: argparse.Namespace) -> int:
    """Serve the dashboard to browsers until interrupted."""
    check_textual_serve()  # before anything listens: never serve without our token check and reduced viewers
    host, port = parse_listen(args.listen)
    directory = state_dir(args).absolute()
    pid = running_serve_pid(directory)
    if pid is None:
        raise AmdtopError(f"no amdtop serve runs for {directory}: start `amdtop serve` first (each tab attaches to it)")
    if not is_loopback(host):
        sys.stderr.write(f"amdtop: warning: web dashboard on {host}, not loopback: anyone who reaches it and has the token sees the node\n")
    try:
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise AmdtopError(f"--listen {args.listen}: cannot listen ({os_reason(exc)}); pick another port") from None
    token = write_token(directory)
    server = WebServer(viewer_argv(args, directory), token, host, port)
    shown = f"[{host}]" if ":" in host else host
    mode = "control allowed" if args.allow_control else "read-only"
    sys.stderr.write(
        f"amdtop: web dashboard ({mode}, attached to serve pid {pid}) at http://{shown}:{port}/?token={token}\n"
    )
    sys.stderr.flush()
    server.serve_on(sock)
    return 0
