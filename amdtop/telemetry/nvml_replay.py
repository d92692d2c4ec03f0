"""Record every NVML call the backend makes on a real machine, and replay it without NVIDIA hardware.

Recording (on the GPU machine)::

    python -m amdtop.telemetry.nvml_replay record --out tests/fixtures/nvml/h200_replay.json --polls 3

writes one JSON fixture holding each call's arguments and results (in call order), the sysfs and procfs files the
backend read, and the snapshot the backend produced. :class:`ReplayNvml` is a stand-in for the ``pynvml`` module
that answers from such a fixture, so tests run the real backend code against the real capture.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from amdtop.sysread import read_text

FIXTURE_VERSION = 3
# Calls amdtop began making after version-1 fixtures were recorded: such a capture says nothing about them, so its
# replay answers NOT_SUPPORTED -- the same ``None`` the backend shows where a GPU lacks the field.
ADDED_IN_V2 = frozenset(
    {
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetViolationStatus",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetMemoryErrorCounter",
        "nvmlDeviceGetFieldValues",
    }
)
# Version 3 added the per-process utilisation samples.
ADDED_IN_V3 = frozenset({"nvmlDeviceGetProcessUtilization"})
_NOT_SUPPORTED = 3


SINCE_ARG = frozenset({"nvmlDeviceGetProcessUtilization"})
"""Calls whose last argument is a "since" timestamp the caller picks: a replay answers them for any timestamp."""


class ReplayMiss(KeyError):
    """The backend made a call the fixture never recorded: the test must fail loudly, not degrade."""


class ReplayNVMLError(Exception):
    """Stands in for ``pynvml.NVMLError``: carries the NVML return code in ``value``."""

    def __init__(self, value: int, message: str = "") -> None:
        super().__init__(message or f"NVML error {value}")
        self.value = value


# -- recording -----------------------------------------------------------------------------------------------------


def _is_handle(obj: Any) -> bool:
    return type(obj).__name__ in ("c_nvmlDevice_t", "LP_struct_c_nvmlDevice_t")


class RecordingNvml:
    """Wraps the real ``pynvml`` module; every ``nvml*`` call's result (or error) is kept in :attr:`calls`."""

    def __init__(self, real: Any) -> None:
        """Record calls made through ``real``."""
        self._real = real
        self._handles: dict[int, str] = {}
        self.calls: dict[str, list[Any]] = {}

    def _token(self, handle: Any) -> str:
        addr = ctypes.cast(handle, ctypes.c_void_p).value or 0
        if addr not in self._handles:
            self._handles[addr] = f"h{len(self._handles)}"
        return self._handles[addr]

    def _ser(self, obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, str)):
            return obj
        if isinstance(obj, bytes):
            return {"__bytes__": obj.decode(errors="replace")}
        if _is_handle(obj):
            return {"__handle__": self._token(obj)}
        if isinstance(obj, (list, tuple, ctypes.Array)):
            return [self._ser(x) for x in obj]
        if isinstance(obj, ctypes.Structure | ctypes.Union):
            return {"__struct__": {name: self._ser(getattr(obj, name)) for name, *_ in obj._fields_}}
        if hasattr(obj, "value") and isinstance(obj, ctypes._SimpleCData):
            return self._ser(obj.value)
        if hasattr(obj, "__dict__"):
            return {"__struct__": {k: self._ser(v) for k, v in vars(obj).items() if not k.startswith("_")}}
        return repr(obj)

    def _key(self, name: str, args: tuple[Any, ...]) -> str:
        return json.dumps([name, [self._ser(a) for a in args]], sort_keys=True)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._real, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr

        def call(*args: Any) -> Any:
            key = self._key(name, args)
            try:
                result = attr(*args)
            except self._real.NVMLError as exc:
                self.calls.setdefault(key, []).append({"__error__": int(exc.value), "message": str(exc)})
                raise
            self.calls.setdefault(key, []).append(self._ser(result))
            return result

        return call


# -- replay --------------------------------------------------------------------------------------------------------


class _Handle:
    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


def _deser(obj: Any) -> Any:
    if isinstance(obj, list):
        return [_deser(x) for x in obj]
    if isinstance(obj, dict):
        if "__handle__" in obj:
            return _Handle(obj["__handle__"])
        if "__bytes__" in obj:
            return obj["__bytes__"].encode()
        if "__struct__" in obj:
            return SimpleNamespace(**{k: _deser(v) for k, v in obj["__struct__"].items()})
    return obj


class ReplayNvml:
    """A ``pynvml`` stand-in answering from a recorded fixture; repeated calls replay in order, then repeat the last.

    ``fail(token, code, name=None)`` makes calls on one GPU handle (optionally one function) raise NVML error
    ``code`` from then on, to test lost GPUs and unsupported fields against otherwise real data.
    """

    NVMLError = ReplayNVMLError

    def __init__(self, fixture: dict[str, Any]) -> None:
        """Replay ``fixture`` (the dict :func:`load_fixture` returns)."""
        self._calls: dict[str, list[Any]] = fixture["calls"]
        self._pos: dict[str, int] = {}
        self._faults: list[tuple[str, str | None, int]] = []
        self._since: dict[tuple[str, str], list[Any]] = {}
        self._version = int(fixture.get("version", 1))
        self.log: list[str] = []
        for name, value in fixture.get("constants", {}).items():
            setattr(self, name, value)

    def fail(self, token: str, code: int, name: str | None = None) -> None:
        """From now on, calls on handle ``token`` (only function ``name`` if given) raise NVML error ``code``."""
        self._faults.append((token, name, code))

    @staticmethod
    def _ser(obj: Any) -> Any:
        if isinstance(obj, _Handle):
            return {"__handle__": obj.token}
        return obj

    def _call(self, name: str, args: tuple[Any, ...]) -> Any:
        self.log.append(name)
        for token, fname, code in self._faults:
            if (fname is None or fname == name) and args and isinstance(args[0], _Handle) and args[0].token == token:
                raise ReplayNVMLError(code, f"injected NVML error {code}")
        key = json.dumps([name, [self._ser(a) for a in args]], sort_keys=True)
        results = self._calls.get(key)
        if results is None and self._version < 2 and name in ADDED_IN_V2:
            raise ReplayNVMLError(_NOT_SUPPORTED, "not in this version-1 capture")
        if results is None and self._version < 3 and name in ADDED_IN_V3:
            raise ReplayNVMLError(_NOT_SUPPORTED, "not in this version-2 capture")
        if results is None and name in SINCE_ARG:
            # Asked since a time the capture never asked (the backend reads on its own cadence now): the GPU's
            # recorded answers in the order they were recorded, then the last one again.
            key, results = self._since_any(name, args)
        if results is None:
            raise ReplayMiss(f"call not in the NVML fixture: {key}")
        i = self._pos.get(key, 0)
        self._pos[key] = i + 1
        result = results[min(i, len(results) - 1)]
        if isinstance(result, dict) and "__error__" in result:
            raise ReplayNVMLError(int(result["__error__"]), str(result.get("message", "")))
        return _deser(result)

    def _since_any(self, name: str, args: tuple[Any, ...]) -> tuple[str, list[Any] | None]:
        handle = json.dumps(self._ser(args[0]), sort_keys=True) if args else ""
        merged = self._since.get((name, handle))
        if merged is None:
            found = []
            for key, results in self._calls.items():
                k_name, k_args = json.loads(key)
                if k_name == name and k_args and json.dumps(k_args[0], sort_keys=True) == handle:
                    found.append((k_args[-1] if len(k_args) > 1 else 0, results))
            merged = [r for _since, results in sorted(found, key=lambda f: f[0]) for r in results] or None
            if merged is not None:
                self._since[(name, handle)] = merged
        return f"{name} {handle} since any", merged

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            return self._call(name, args)

        return call


def load_fixture(path: Path) -> dict[str, Any]:
    """Read a fixture written by ``record``."""
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def materialize(fixture: dict[str, Any], root: Path) -> tuple[Path, Path]:
    """Write the fixture's recorded sysfs and procfs files under ``root``; returns (sysfs_root, proc_root)."""
    sysfs, proc = root / "sys", root / "proc"
    for base, files in ((sysfs, fixture.get("sysfs", {})), (proc, fixture.get("proc", {}))):
        base.mkdir(parents=True, exist_ok=True)
        for rel, text in files.items():
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return sysfs, proc


# -- the record command --------------------------------------------------------------------------------------------


def _read_files(root: Path, rels: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for rel in rels:
        try:
            out[rel] = read_text(root / rel)
        except OSError:
            continue
    return out


def record(out: Path, polls: int, interval: float) -> dict[str, Any]:
    """Run the NVML backend ``polls`` times through the recorder and write the fixture to ``out``."""
    import pynvml

    from amdtop.report import snapshot_json
    from amdtop.telemetry.base import BackendOptions
    from amdtop.telemetry.nvml import NvmlBackend

    rec = RecordingNvml(pynvml)
    options = BackendOptions()
    backend = NvmlBackend(rec, options)
    if len(backend.topology().gpus) < 2:
        # The backend asks for NVLinks only between pairs; record what one GPU's links say anyway, so tests that
        # clone this GPU into a pair replay real NVLink answers.
        backend.record_nvlinks()
    snap = backend.sample()
    for _ in range(polls - 1):
        time.sleep(interval)
        snap = backend.sample()
    meta = {
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml": pynvml.nvmlSystemGetNVMLVersion(),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hostname": snap.hostname,
        "polls": polls,
    }
    backend.close()
    node_dir = Path("devices/system/node")
    rels = []
    for node in snap.topology.numa_nodes:
        rels += [str(node_dir / f"node{node.id}" / "cpulist"), str(node_dir / f"node{node.id}" / "meminfo")]
    rels += [f"bus/pci/devices/{g.bdf}/numa_node" for g in snap.topology.gpus]
    pids = sorted({p.pid for s in snap.gpus for p in s.processes})
    doc = {
        "version": FIXTURE_VERSION,
        "meta": meta,
        "constants": {"NVML_NVLINK_MAX_LINKS": int(pynvml.NVML_NVLINK_MAX_LINKS)},
        "sysfs": _read_files(options.sysfs_root, rels),
        "proc": _read_files(options.proc_root, [f"{pid}/comm" for pid in pids]),
        "calls": rec.calls,
        "expected_snapshot": snapshot_json(snap),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def main(argv: list[str] | None = None) -> int:
    """``python -m amdtop.telemetry.nvml_replay record --out FILE``."""
    parser = argparse.ArgumentParser(prog="amdtop.telemetry.nvml_replay")
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record the NVML backend's calls into a fixture")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--polls", type=int, default=3)
    r.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args(argv)
    doc = record(args.out, args.polls, args.interval)
    sys.stderr.write(f"recorded {sum(len(v) for v in doc['calls'].values())} NVML results into {args.out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
