"""Worker profiles: the ``[[worker]]`` tables of the TOML config, parsed into frozen values and validated.

Parsing keeps the tomlkit document so that retune can write a change back with the file's comments and order.
Every error is one line that names the worker and the field (``worker[NAME].FIELD: what; fix``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from amdtop import sglang_procs
from amdtop.cpulist import format_cpulist
from amdtop.errors import InputError
from amdtop.hip_devices import device_indices, device_numa
from amdtop.layout import WorkerLayout, layout_from_args
from amdtop.model import Topology
from amdtop.supervisor.engines import (
    DEFAULT_COMMAND,
    ENGINES,
    canonical_sglang_args,
    check_sglang_args,
    uses_own_numa_binding,
)
from amdtop.supervisor.parallel_args import check_parallel_args
from amdtop.supervisor.retune import check_arg_value, check_foreign_flag

if TYPE_CHECKING:
    import tomlkit

ArgValue = str | int | float | bool | tuple[str | int | float, ...]
"""A ``vllm serve`` flag value: scalar, ``true`` (bare flag) or a list (repeated values)."""

_TOP_KEYS = {"name", "model", "gpus", "numa_node", "port", "command", "args", "env", "host", "stop_grace_s", "engine"}


@dataclass(frozen=True, slots=True)
class Profile:
    """One worker as declared in the config file."""

    name: str
    """Unique worker name."""
    model: str
    """Model path or id, passed as the positional ``model_tag``."""
    gpus: tuple[int, ...]
    """GPU indices in rank order; empty for a CPU worker."""
    numa_node: int | str
    """An explicit node, ``"auto"`` (from the GPUs) or ``"none"`` (no pinning)."""
    port: int
    """HTTP port."""
    command: tuple[str, ...] = ("vllm", "serve")
    """argv prefix (never run through a shell)."""
    args: tuple[tuple[str, ArgValue], ...] = ()
    """``vllm serve`` flags without dashes, in file order."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment, applied over the inherited one."""
    host: str = "127.0.0.1"
    """Bind address (``--host``), from ``host`` or ``args.host``."""
    stop_grace_s: float | None = None
    """SIGTERM-to-SIGKILL grace for this worker; ``None`` uses the supervisor default."""
    engine: str = "vllm"
    """The serving engine: ``vllm`` (``vllm serve``) or ``sglang`` (``python -m sglang.launch_server``); ``args`` are
    that engine's flags."""

    def arg(self, key: str) -> ArgValue | None:
        """Value of flag ``key`` (without dashes), ``None`` when absent."""
        for k, v in self.args:
            if k == key:
                return v
        return None

    @property
    def api_keys(self) -> tuple[str, ...]:
        """The keys of ``args.api-key`` (a string or a list), empty when the server is open."""
        value = self.arg("api-key")
        if value is None or isinstance(value, bool):
            return ()
        return tuple(str(v) for v in value) if isinstance(value, tuple) else (str(value),)

    @property
    def tp_size(self) -> int:
        """Tensor-parallel size: ``args.tensor-parallel-size``, else the GPUs per data-parallel replica (at least 1)."""
        return self.layout.tp

    @property
    def layout(self) -> WorkerLayout:
        """DP/TP/PP sizes, expert parallel and API server count from the args (TP defaults to GPUs / (DP x PP))."""
        if self.engine == "sglang":
            return sglang_procs.layout_from_args(canonical_sglang_args(dict(self.args)), len(self.gpus))
        return layout_from_args(dict(self.args), len(self.gpus))

    @property
    def tp_arg(self) -> ArgValue | None:
        """The TP size the args give (``tensor-parallel-size``; SGLang's ``tp-size`` or an alias), ``None`` when absent."""
        if self.engine == "sglang":
            return canonical_sglang_args(dict(self.args)).get("tp-size")  # type: ignore[return-value]
        return self.arg("tensor-parallel-size")

    @property
    def url(self) -> str:
        """Base URL of the server on loopback."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"http://{host}:{self.port}"


MAX_STOP_GRACE_S = 7 * 24 * 3600.0
"""The longest stop grace a profile may ask (as the CLI's --grace)."""


def _check_number(name: str, key: str, value: object) -> None:
    """A number in ``[worker.args]`` is finite (TOML has ``nan`` and ``inf``), and a retunable flag is in the range
    retune allows: checked when the file loads, not when vLLM refuses it."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{_field(name, 'args.' + key)}: {value!r} is not a finite number; give a number")
    check_arg_value(name, key, value)


def _field(name: str, key: str) -> str:
    return f"worker[{name}].{key}"


def _int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_one(raw: Mapping[str, Any], index: int) -> Profile:
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"worker[{index}].name: missing or not a string; give every [[worker]] a name")
    if not all(c.isalnum() or c in "-_." for c in name):
        raise InputError(f"{_field(name, 'name')}: {name!r} has characters other than letters, digits, -_.; rename it")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise InputError(
            f"{_field(name, unknown[0])}: unknown key; use one of {', '.join(sorted(_TOP_KEYS))} (vllm flags go in [worker.args])"
        )
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise InputError(f"{_field(name, 'model')}: missing or not a string; set the model path or id")
    gpus = raw.get("gpus", [])
    if not isinstance(gpus, list) or not all(_int(g) for g in gpus):
        raise InputError(f"{_field(name, 'gpus')}: must be a list of GPU indices; e.g. gpus = [0, 1]")
    numa = raw.get("numa_node", "auto")
    if not (_int(numa) or numa in ("auto", "none")):
        raise InputError(f'{_field(name, "numa_node")}: {numa!r} is not a node; use an integer, "auto" or "none"')
    port = raw.get("port")
    if not _int(port) or not 1 <= port <= 65535:
        raise InputError(f"{_field(name, 'port')}: missing or not a port number; set port = 1..65535")
    engine = raw.get("engine", "vllm")
    if engine not in ENGINES:
        raise InputError(
            f'{_field(name, "engine")}: {engine!r} is not an engine amdtop launches; use "vllm" or "sglang"'
        )
    command = raw.get("command", list(DEFAULT_COMMAND[engine]))
    if not isinstance(command, list) or not command or not all(isinstance(c, str) and c for c in command):
        raise InputError(f'{_field(name, "command")}: must be a non-empty list of strings; e.g. ["vllm", "serve"]')
    args_raw = raw.get("args", {})
    if not isinstance(args_raw, Mapping):
        raise InputError(f"{_field(name, 'args')}: must be a table; use [worker.args]")
    args: list[tuple[str, ArgValue]] = []
    for key, value in args_raw.items():
        if isinstance(value, list):
            if not all(isinstance(v, (str, int, float)) for v in value):
                raise InputError(f"{_field(name, 'args.' + key)}: list values must be strings or numbers; fix the list")
            for v in value:
                _check_number(name, str(key), v)
            args.append((str(key), tuple(value)))
        elif isinstance(value, (str, int, float, bool)):
            _check_number(name, str(key), value)
            args.append((str(key), value))
        else:
            raise InputError(
                f"{_field(name, 'args.' + key)}: unsupported value {value!r}; use a string, number or bool"
            )
    if any(k in ("port", "model") for k, _ in args):
        raise InputError(f"{_field(name, 'args')}: port and model are worker keys, not args; move them up")
    for key, _ in args:
        check_foreign_flag(name, engine, key)  # loads, launches, and then the server refuses it: refuse it here
    env_raw = raw.get("env", {})
    if not isinstance(env_raw, Mapping):
        raise InputError(f"{_field(name, 'env')}: must be a table; use [worker.env]")
    env = tuple((str(k), str(v)) for k, v in env_raw.items())
    host = raw.get("host", dict(args).get("host", "127.0.0.1"))
    if not isinstance(host, str):
        raise InputError(f'{_field(name, "host")}: must be a string; e.g. host = "127.0.0.1"')
    grace = raw.get("stop_grace_s")
    if grace is not None and (
        not isinstance(grace, (int, float))
        or isinstance(grace, bool)
        or not math.isfinite(grace)
        or not 0 <= grace <= MAX_STOP_GRACE_S
    ):
        raise InputError(
            f"{_field(name, 'stop_grace_s')}: {grace!r} is not a number of seconds in 0..{MAX_STOP_GRACE_S:g} "
            "(a week); e.g. 30"
        )
    if engine == "sglang":
        check_sglang_args(name, dict(args), len(gpus))
    else:
        tp = dict(args).get("tensor-parallel-size")
        if tp is not None and not (_int(tp) and tp >= 1):
            raise InputError(f"{_field(name, 'args.tensor-parallel-size')}: must be a positive integer; e.g. 2")
        check_parallel_args(name, dict(args), len(gpus))
    return Profile(
        name=name,
        model=model,
        gpus=tuple(gpus),
        numa_node=numa,
        port=port,
        command=tuple(command),
        args=tuple(args),
        env=env,
        host=host,
        stop_grace_s=None if grace is None else float(grace),
        engine=engine,
    )


def parse_document(text: str, source: str = "config") -> tomlkit.TOMLDocument:
    """Parse TOML text into a tomlkit document (keeps comments and order)."""
    # tomlkit loads when a profile file is read: the dashboard and the CLI import this module through the
    # supervisor's light parts, and the attached viewer reads no profile file (~0.6 MiB RSS).
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:
        raise InputError(f"{source}: not valid TOML ({exc}); fix the syntax") from None


def profiles_from_document(doc: tomlkit.TOMLDocument, source: str = "config") -> list[Profile]:
    """Read every ``[[worker]]`` of ``doc`` (names must be unique)."""
    plain = doc.unwrap()
    workers = plain.get("worker", [])
    if not isinstance(workers, list):
        raise InputError(f"{source}: 'worker' must be an array of tables; write [[worker]]")
    profiles = [_parse_one(w if isinstance(w, Mapping) else {}, i) for i, w in enumerate(workers)]
    seen: set[str] = set()
    for p in profiles:
        if p.name in seen:
            raise InputError(f"{_field(p.name, 'name')}: declared twice; give every worker a unique name")
        seen.add(p.name)
    return profiles


def load_profiles(path: Path) -> tuple[tomlkit.TOMLDocument, list[Profile]]:
    """Read ``path``; a missing file is an empty profile list."""
    if not path.exists():
        import tomlkit  # lazy: see parse_document

        return tomlkit.document(), []
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror}); fix the path or permissions") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: byte {exc.start} is not UTF-8; save the profile file as UTF-8") from None
    doc = parse_document(text, str(path))
    return doc, profiles_from_document(doc, str(path))


def load_profiles_lenient(path: Path) -> tuple[tomlkit.TOMLDocument, list[Profile], InputError | None]:
    """Like :func:`load_profiles`, but a bad file or a bad worker costs only itself: returns the document, every
    worker that parses, and the first error (``None`` when the whole file is good). Stopping or inspecting a running
    worker must not depend on the rest of the file."""
    try:
        doc, profiles = load_profiles(path)
        return doc, profiles, None
    except InputError as exc:
        first = exc
    try:
        doc = parse_document(path.read_text(), str(path))
    except (OSError, InputError, UnicodeDecodeError):
        import tomlkit  # lazy: see parse_document

        return tomlkit.document(), [], first
    workers = doc.unwrap().get("worker", [])
    good: list[Profile] = []
    seen: set[str] = set()
    for i, raw in enumerate(workers if isinstance(workers, list) else []):
        try:
            p = _parse_one(raw if isinstance(raw, Mapping) else {}, i)
        except InputError:
            continue
        if p.name not in seen:
            seen.add(p.name)
            good.append(p)
    return doc, good, first


def _span(nodes: Sequence[int]) -> str:
    return format_cpulist(nodes) or "none"


def attention_heads(model: str) -> int | None:
    """``num_attention_heads`` from the model directory's config.json, ``None`` when not readable."""
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    heads = cfg.get("num_attention_heads") if isinstance(cfg, dict) else None
    if heads is None and isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):
        heads = cfg["text_config"].get("num_attention_heads")
    return heads if _int(heads) and heads > 0 else None


def resolve_numa(profile: Profile, topology: Topology) -> int | None:
    """The NUMA node to pin to (``None``: no pinning), validated against ``topology``."""
    nodes = sorted(n.id for n in topology.numa_nodes)
    if profile.numa_node == "none" or uses_own_numa_binding(profile.engine, profile.args):
        # vLLM's --numa-bind (SGLang's --numa-node) pins each rank to its own GPU's node: no outer numactl, no span error
        return None
    if profile.numa_node == "auto":
        if not profile.gpus:
            return None
        # On a partitioned node profiles name HIP devices (partitions); elsewhere the HIP index is the GPU index.
        gpu_nodes = sorted({n for i in profile.gpus if (n := device_numa(topology, i)) is not None})
        if len(gpu_nodes) > 1:
            raise InputError(
                f'{_field(profile.name, "numa_node")}: "auto" but GPUs {format_cpulist(profile.gpus)} span NUMA nodes '
                f'{_span(gpu_nodes)}; set numa_node to one node explicitly or "none"'
            )
        return gpu_nodes[0] if gpu_nodes else None
    node = int(profile.numa_node)
    if node not in nodes:
        raise InputError(
            f"{_field(profile.name, 'numa_node')}: NUMA node {node} does not exist (this node has {_span(nodes)}); "
            f'use one of {_span(nodes)}, "auto" or "none"'
        )
    return node


def validate_profiles(profiles: Sequence[Profile], topology: Topology) -> None:
    """Cross-check every profile against the topology and against each other (static checks only)."""
    known = sorted(device_indices(topology))
    gpu_owner: dict[int, str] = {}
    port_owner: dict[int, str] = {}
    for p in profiles:
        for g in p.gpus:
            if g not in known:
                have = f"GPUs {format_cpulist(known)}" if known else "no GPUs"
                raise InputError(
                    f"{_field(p.name, 'gpus')}: GPU {g} does not exist (this node has {have}); use an index from 'amdtop topo'"
                )
            if g in gpu_owner:
                raise InputError(
                    f"{_field(p.name, 'gpus')}: GPU {g} is already used by worker {gpu_owner[g]}; give each worker its own GPUs"
                )
            gpu_owner[g] = p.name
        if len(set(p.gpus)) != len(p.gpus):
            raise InputError(f"{_field(p.name, 'gpus')}: a GPU is listed twice; list each GPU once")
        tp = p.tp_arg
        tp_key = "tp-size" if p.engine == "sglang" else "tensor-parallel-size"
        if p.gpus and tp is not None and p.layout.gpus_needed != len(p.gpus):
            raise InputError(
                f"{_field(p.name, 'args.' + tp_key)}: {tp} does not match the {len(p.gpus)} GPUs listed; "
                f"drop it or list {p.layout.gpus_needed} GPUs"
            )
        heads = attention_heads(p.model)
        # SGLang's DP attention splits the heads over tp / dp ranks only (each DP rank's attention is its own TP group)
        attn_tp = (
            p.tp_size // sglang_procs.attention_dp(canonical_sglang_args(dict(p.args)))
            if p.engine == "sglang"
            else p.tp_size
        )
        if heads is not None and heads % max(1, attn_tp):
            raise InputError(
                f"{_field(p.name, 'gpus')}: tensor-parallel size {attn_tp} does not divide the model's {heads} "
                f"attention heads; use a TP size that divides {heads}"
            )
        resolve_numa(p, topology)
        if p.port in port_owner:
            raise InputError(
                f"{_field(p.name, 'port')}: port {p.port} is also used by worker {port_owner[p.port]}; "
                "give each worker its own port"
            )
        port_owner[p.port] = p.name
