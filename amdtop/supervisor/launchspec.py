"""Building a worker's argv and environment, and the checks that must pass before anything is started."""

from __future__ import annotations

import errno
import os
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from amdtop.errors import InputError
from amdtop.supervisor.engines import sglang_serve_args, uses_own_numa_binding
from amdtop.supervisor.profiles import ArgValue, Profile
from amdtop.sysread import read_text

MARKER_ENV = "AMDTOP_WORKER"
"""Environment marker inherited by every process of a worker: ``<name>:<launch-id>``."""
STATE_ENV = "AMDTOP_STATE_DIR"
"""The absolute state dir of the launching amdtop: a worker is found again only by the amdtop that owns it."""
API_KEY_ENV = "VLLM_API_KEY"
"""Where vLLM reads its API key from the environment (``envs.VLLM_API_KEY``): only the owner can read
``/proc/PID/environ``, while every user reads ``/proc/PID/cmdline``, so one key goes there, never into argv."""
URL_ENV = "AMDTOP_URL"
"""The worker's base URL, so a worker rebuilt from its processes alone can still be probed."""

VISIBILITY_ENV = {"AMD": "HIP_VISIBLE_DEVICES", "NVIDIA": "CUDA_VISIBLE_DEVICES"}
_OTHER_VISIBILITY = {"AMD": "CUDA_VISIBLE_DEVICES", "NVIDIA": "HIP_VISIBLE_DEVICES"}


def systemd_usable() -> bool:
    """True where ``systemd-run --scope`` can work: systemd is PID 1's init and the tool exists."""
    return Path("/run/systemd/system").is_dir() and shutil.which("systemd-run") is not None


def flag_args(key: str, value: ArgValue) -> list[str]:
    """``--key value`` (``--key`` for true, nothing for false, ``--key v1 v2`` for a list)."""
    if value is True:
        return [f"--{key}"]
    if value is False:
        return []
    if isinstance(value, tuple):
        return [f"--{key}", *(str(v) for v in value)]
    return [f"--{key}", str(value)]


LOAD_TRACKING = "enable-server-load-tracking"
"""vLLM's flag that makes ``GET /load`` count the requests in flight (off by default; amdtop turns it on)."""


def tracks_load(profile: Profile) -> bool:
    """Whether the worker runs with :data:`LOAD_TRACKING`: by default, or set true; a profile turns it off with
    ``false`` (a vLLM before 0.8). SGLang has no such flag (nor ``GET /load``)."""
    return profile.engine == "vllm" and profile.arg(LOAD_TRACKING) in (None, True)


def serve_args(profile: Profile) -> list[str]:
    """``command`` + model + TP size + port + host + the profile's args (in file order); SGLang's in
    :func:`amdtop.supervisor.engines.sglang_serve_args`."""
    if profile.engine == "sglang":
        return sglang_serve_args(profile)
    argv = [
        *profile.command,
        profile.model,
        "--tensor-parallel-size",
        str(profile.tp_size),
        "--port",
        str(profile.port),
    ]
    if profile.arg("host") is None:
        argv += ["--host", profile.host]
    if profile.arg(LOAD_TRACKING) is None:
        # The stall judge needs the requests the server accepted (GET /load): vLLM's own counters miss those that
        # never got a first token, i.e. every request of an EngineCore that hung between two batches. A profile
        # sets ``enable-server-load-tracking = false`` for a vLLM older than the flag (added in 0.8).
        argv.append(f"--{LOAD_TRACKING}")
    for key, value in profile.args:
        if key == "tensor-parallel-size" or (key == "api-key" and len(profile.api_keys) == 1):
            continue  # one API key travels in the environment (build_env); vLLM reads several only from argv
        argv += flag_args(key, value)
    return argv


def build_argv(profile: Profile, numa_node: int | None, *, scope_unit: str | None = None) -> list[str]:
    """The worker's argv: optional ``systemd-run --scope``, optional ``numactl`` pinning, then :func:`serve_args`."""
    argv: list[str] = []
    if scope_unit is not None:
        argv += ["systemd-run", "--scope", "--quiet", "--collect", f"--unit={scope_unit}", "--"]
    if numa_node is not None and not uses_own_numa_binding(profile.engine, profile.args):
        argv += ["numactl", f"--cpunodebind={numa_node}", f"--membind={numa_node}"]
    return argv + serve_args(profile)


FAULT_HANDLER_ENV = "PYTHONFAULTHANDLER"


def build_env(
    profile: Profile, base: Mapping[str, str], *, vendor: str, marker: str, state_dir: str | None = None
) -> dict[str, str]:
    """The worker's environment: ``base`` + GPU visibility + the profile's env + the marker.

    Exactly one visibility variable is set for the vendor; an inherited value of the other one is dropped because vLLM
    refuses HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES with different values.
    """
    env = dict(base)
    own = dict(profile.env)
    var = VISIBILITY_ENV.get(vendor, "HIP_VISIBLE_DEVICES")
    other = _OTHER_VISIBILITY.get(vendor, "CUDA_VISIBLE_DEVICES")
    if profile.gpus:
        wanted = ",".join(str(g) for g in profile.gpus)
        for key in (var, other):
            if key in own and own[key] != wanted:
                raise InputError(
                    f"worker[{profile.name}].env.{key}: {own[key]!r} contradicts gpus = {list(profile.gpus)}; "
                    "drop it (amdtop sets GPU visibility from gpus)"
                )
        env.pop(other, None)
        env[var] = wanted
    env.update(own)
    if var in env and other in env and env[var] != env[other]:
        raise InputError(
            f"worker[{profile.name}].env.{other}: differs from {var}; set only one of them or make them match"
        )
    if len(profile.api_keys) == 1 and profile.engine == "vllm":  # SGLang reads its key from argv only
        key = profile.api_keys[0]
        if own.get(API_KEY_ENV, key) != key:
            raise InputError(
                f"worker[{profile.name}].env.{API_KEY_ENV}: differs from args.api-key; set the key in one place"
            )
        env[API_KEY_ENV] = key
    env[MARKER_ENV] = marker
    if state_dir is not None:
        env[STATE_ENV] = state_dir
    env[URL_ENV] = profile.url
    # A rank that dies of SIGSEGV/SIGBUS/SIGABRT/SIGFPE/SIGILL prints the signal and its Python stacks into its log
    # (faulthandler acts on those signals only), so the log names the crash; a value the profile or the caller set wins.
    env.setdefault(FAULT_HANDLER_ENV, "1")
    return env


def command_path(command: str, env: Mapping[str, str]) -> str | None:
    """Where ``command`` resolves with the worker's PATH, ``None`` when it does not."""
    if "/" in command:
        return command if os.path.isfile(command) and os.access(command, os.X_OK) else None
    return shutil.which(command, path=env.get("PATH", os.defpath))


# TCP states (``/proc/net/tcp`` hex) of connections a dead server leaves behind: TIME_WAIT, FIN_WAIT1/2, CLOSE_WAIT,
# LAST_ACK, CLOSING. They block a plain bind but not the server's own, which sets SO_REUSEADDR.
_LEFTOVER_STATES = frozenset({"06", "04", "05", "08", "09", "0B"})


def _only_leftover_connections(port: int, proc_net: Path = Path("/proc/net")) -> bool:
    """True when every TCP socket on local ``port`` listed in procfs is a closing connection (no listener)."""
    states: list[str] = []
    for name in ("tcp", "tcp6"):
        try:
            lines = read_text(proc_net / name).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and int(fields[1].rsplit(":", 1)[1], 16) == port:
                states.append(fields[3])
    return bool(states) and all(s in _LEFTOVER_STATES for s in states)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """True when something already holds ``port``: a listener, or a socket bound but not yet listening (vLLM binds
    its port early and listens only when ready). Connections a stopped server left closing do not count.
    """
    addr = "0.0.0.0" if host in ("0.0.0.0", "", "::") else host
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, port))
        except OSError as exc:
            if exc.errno == errno.EACCES:
                return True
            return exc.errno == errno.EADDRINUSE and not _only_leftover_connections(port)
    return False


HOST_NODES = Path("/sys/devices/system/node")
"""Where the kernel lists this host's NUMA nodes (``node0``, ``node1``...)."""


def host_numa_nodes(root: Path = HOST_NODES) -> list[int]:
    """This host's NUMA node ids (empty where the kernel exposes none, e.g. some containers)."""
    try:
        names = [p.name for p in root.iterdir()]
    except OSError:
        return []
    return sorted(int(n[4:]) for n in names if n.startswith("node") and n[4:].isdigit())


def preflight(
    profile: Profile,
    numa_node: int | None,
    env: Mapping[str, str],
    *,
    check_port: bool = True,
    node_root: Path = HOST_NODES,
) -> None:
    """Launch-time checks: numactl present when pinning, the node on this host, command found, port free.

    Raises InputError. A restart checks everything but the port before stopping the running worker (which holds the
    port itself).
    """
    field = f"worker[{profile.name}]"
    if numa_node is not None and command_path("numactl", env) is None:
        raise InputError(
            f"{field}.numa_node: numactl is not installed but pinning to node {numa_node} is asked; "
            'install numactl or set numa_node = "none"'
        )
    if numa_node is not None and numa_node not in (nodes := host_numa_nodes(node_root)):
        # The profile was checked against the telemetry's topology (simulated on a sim backend); numactl would end
        # with its usage text on a node this host lacks.
        have = f"has NUMA nodes {', '.join(map(str, nodes))}" if nodes else "lists no NUMA nodes"
        raise InputError(
            f"{field}.numa_node: pinning to NUMA node {numa_node} is asked but this host {have}; "
            'set numa_node to one of them or "none"'
        )
    if command_path(profile.command[0], env) is None:
        raise InputError(f"{field}.command: {profile.command[0]!r} not found on PATH; install it or give the full path")
    if check_port and port_in_use(profile.port, profile.host):
        raise InputError(
            f"{field}.port: port {profile.port} is already in use on this host; stop what holds it or pick another port"
        )
