"""The ``sysfs`` backend: amdgpu + KFD files only, no ROCm library.

GPU index order: KFD GPU node order (the driver's probe order, which is what HIP, rocm-smi and amdsmi's
``node_id`` follow); GPUs without a KFD node come after, by PCI address. The amdsmi backend sorts its handles the
same way, so both backends number GPUs alike.

Static facts (names, BDFs, NUMA, links, VRAM total, power cap) are read once at open. A poll reads only the few
metric files of each GPU, by pre-resolved path with ``os.open``/``os.read`` (no pathlib, no symlink walks), plus the
KFD per-process VRAM files. A file that existed at open and now fails with ENOENT/ENODEV/ENXIO/EIO makes its GPU
lost (``GpuSample(lost=True)`` + a ``gpu_lost`` flag); the other GPUs keep updating, and a lost GPU whose files come
back is reported again.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from amdtop.errors import BackendUnavailable
from amdtop.gpuprocs.fdinfo import FdinfoEngines, process_util
from amdtop.model import Flag, GpuInfo, GpuProcess, GpuSample, Link, LinkType, NodeSnapshot, Topology
from amdtop.sysread import read_text_or_none
from amdtop.telemetry.base import BackendOptions, ProcessCadence
from amdtop.telemetry.gpu_metrics import read_gpu_metrics, sample_fields
from amdtop.telemetry.hwmon import HwmonFiles, find_hwmon
from amdtop.telemetry.kfd import KfdNode, pair_link, read_kfd_nodes
from amdtop.telemetry.lost import lost_flag
from amdtop.telemetry.numa import cpus_of, read_numa_nodes
from amdtop.telemetry.partitions import partition_gpu_ids, with_partitions
from amdtop.telemetry.plausible import plausible
from amdtop.telemetry.ras import find_ras_files, read_ras

AMD_VENDOR = "0x1002"
_CARD = re.compile(r"card(\d+)$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_GONE = frozenset({errno.ENOENT, errno.ENODEV, errno.ENXIO, errno.EIO})
ECC_EVERY_POLLS = 10


def read_int(path: str) -> int:
    """Read one integer attribute with a single open/read/close (the cheapest way through sysfs)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, 64)
    finally:
        os.close(fd)
    return int(data)


def _text(path: Path) -> str | None:
    return read_text_or_none(path)


@dataclass(frozen=True, slots=True)
class _Metric:
    field: str
    path: str
    divisor: float | None
    """``None``: keep the integer; else divide (µW -> W, m°C -> °C, Hz -> MHz)."""


@dataclass(frozen=True, slots=True)
class _Gpu:
    info: GpuInfo
    gpu_id: int | None
    metrics: tuple[_Metric, ...]
    gpu_metrics: str | None = None
    """Path of the binary ``gpu_metrics`` table, when the device has one."""
    ras: tuple[tuple[str, str], ...] = ()
    """(block, path) of the RAS ``*_err_count`` files."""


@dataclass(frozen=True, slots=True)
class _Card:
    device_dir: Path
    bdf: str


def _bdf_of(device_dir: Path) -> str | None:
    name = device_dir.name.lower()
    if _BDF.match(name):
        return name
    uevent = _text(device_dir / "uevent") or ""
    for line in uevent.splitlines():
        if line.startswith("PCI_SLOT_NAME="):
            return line.partition("=")[2].lower()
    return None


def find_amd_cards(sysfs_root: Path) -> list[_Card]:
    """amdgpu cards (PCI vendor 0x1002) under ``class/drm``, one per PCI device."""
    drm = sysfs_root / "class" / "drm"
    try:
        names = sorted((n for n in os.listdir(drm) if _CARD.match(n)), key=lambda n: int(n[4:]))
    except OSError:
        return []
    cards: list[_Card] = []
    seen: set[str] = set()
    for name in names:
        device_dir = Path(os.path.realpath(drm / name / "device"))
        if (_text(device_dir / "vendor") or "").lower() != AMD_VENDOR:
            continue
        bdf = _bdf_of(device_dir)
        if bdf is None or bdf in seen:
            continue
        seen.add(bdf)
        cards.append(_Card(device_dir, bdf))
    return cards


def _metrics(device_dir: Path, hw: HwmonFiles) -> tuple[_Metric, ...]:
    wanted: list[tuple[str, str | None, float | None]] = [
        ("util_pct", str(device_dir / "gpu_busy_percent"), 1.0),
        ("mem_util_pct", str(device_dir / "mem_busy_percent"), 1.0),
        ("vram_used_bytes", str(device_dir / "mem_info_vram_used"), None),
        ("power_w", hw.power, 1e6),
        ("temp_c", hw.temp, 1e3),
        ("mem_temp_c", hw.mem_temp, 1e3),
        ("sclk_mhz", hw.sclk, 1e6),
        ("mclk_mhz", hw.mclk, 1e6),
    ]
    return tuple(_Metric(f, p, d) for f, p, d in wanted if p is not None and os.path.isfile(p))


def _opt_int(path: Path) -> int | None:
    text = _text(path)
    try:
        return None if text is None else int(text, 0)
    except ValueError:
        return None


class SysfsBackend:
    """amdgpu/KFD sysfs telemetry (see the module doc)."""

    name = "sysfs"

    def __init__(
        self,
        sysfs_root: Path = Path("/sys"),
        proc_root: Path = Path("/proc"),
        *,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        processes_every_s: float = 0.0,
    ) -> None:
        """Read the static node facts under ``sysfs_root``; the KFD process list and the processes' fdinfo engine
        time every ``processes_every_s`` (0: every poll; see :class:`~amdtop.telemetry.base.BackendOptions`).

        Raises:
            BackendUnavailable: no amdgpu card under ``sysfs_root``.
        """
        cards = find_amd_cards(sysfs_root)
        if not cards:
            raise BackendUnavailable(f"no amdgpu card (PCI vendor {AMD_VENDOR}) under {sysfs_root / 'class' / 'drm'}")
        self._clock = clock
        self._hostname = hostname or socket.gethostname()
        self._proc_root = str(proc_root)
        self._kfd_proc = str(sysfs_root / "class" / "kfd" / "kfd" / "proc")
        self._engines = FdinfoEngines(self._proc_root)
        self._cadence = ProcessCadence(processes_every_s, clock)
        self._proc_tuples: dict[int, tuple[GpuProcess, ...]] = {}
        kfd_nodes = read_kfd_nodes(sysfs_root)
        by_bdf = {n.bdf: n for n in kfd_nodes if n.is_gpu}
        cards.sort(key=lambda c: (by_bdf[c.bdf].node if c.bdf in by_bdf else 1 << 30, c.bdf))
        numa = read_numa_nodes(sysfs_root)
        gpus: list[_Gpu] = []
        nodes: list[KfdNode | None] = []
        for index, card in enumerate(cards):
            node = by_bdf.get(card.bdf)
            nodes.append(node)
            gpus.append(self._static(index, card, node, numa))
        gpus = [
            replace(g, info=with_partitions(g.info, c.device_dir, kfd_nodes, sysfs_root))
            for g, c in zip(gpus, cards, strict=True)
        ]
        self._gpus = tuple(gpus)
        self._by_gpu_id = {g.gpu_id: g for g in self._gpus if g.gpu_id}
        # RAS counts: one file per block (eight or more per MI300X), changing rarely; read every ECC_EVERY_POLLS polls.
        self._ecc: dict[int, tuple[Any, int]] = {}
        # A process on a compute partition holds vram_<partition gpu_id>: count it on its physical GPU.
        self._part_of = {kid: (g.gpu_id, part) for g in self._gpus for kid, part in partition_gpu_ids(g.info).items()}
        by_node = {n.node: n for n in kfd_nodes}
        links = []
        for a in range(len(cards)):
            for b in range(a + 1, len(cards)):
                na, nb = nodes[a], nodes[b]
                links.append(
                    Link(a, b, LinkType.UNKNOWN) if na is None or nb is None else pair_link(a, b, na, nb, by_node)
                )
        self._topology = Topology(tuple(g.info for g in self._gpus), tuple(links), numa)

    @staticmethod
    def _static(index: int, card: _Card, node: KfdNode | None, numa: Any) -> _Gpu:
        dev = card.device_dir
        hw = find_hwmon(dev)
        numa_node = _opt_int(dev / "numa_node")
        if numa_node is not None and numa_node < 0:
            numa_node = None
        name = _text(dev / "product_name") or f"AMD GPU {_text(dev / 'device') or '?'}"
        raw = _text(dev / "unique_id")
        try:
            unique = int(raw, 16) if raw else None  # the driver prints %016llx; int(..., 16) also takes a 0x prefix
        except ValueError:
            unique = None
        cap = _opt_int(Path(hw.power_cap)) if hw.power_cap else None
        info = GpuInfo(
            index=index,
            name=name,
            bdf=card.bdf,
            numa_node=numa_node,
            vendor="AMD",
            uuid=None if unique is None else f"0x{unique:016X}",
            vram_total_bytes=_opt_int(dev / "mem_info_vram_total"),
            cpu_affinity=cpus_of(numa, numa_node),
            power_cap_w=None if cap is None else cap / 1e6,
        )
        table = str(dev / "gpu_metrics")
        return _Gpu(
            info,
            node.gpu_id if node else None,
            _metrics(dev, hw),
            table if os.path.isfile(table) else None,
            find_ras_files(str(dev)),
        )

    def topology(self) -> Topology:
        """Return the static topology."""
        return self._topology

    def sample(self) -> NodeSnapshot:
        """Poll every GPU once; a GPU whose files vanished is reported lost."""
        if self._cadence.due():
            # Between readings each GPU repeats the same tuple (a view or the wire tells "unchanged" by identity).
            procs = self._with_engine_time(self._processes())
            self._proc_tuples = {
                gpu_id: tuple(sorted(found, key=lambda p: (p.pid, p.partition or 0))) for gpu_id, found in procs.items()
            }
        samples: list[GpuSample] = []
        flags: list[Flag] = []
        for gpu in self._gpus:
            s = self._sample_gpu(gpu, self._proc_tuples)
            if s.lost:
                flags.append(lost_flag(gpu.info))
            samples.append(plausible(s))
        return NodeSnapshot(
            "sysfs",
            self._hostname,
            self._clock(),
            self._topology,
            tuple(samples),
            tuple(flags),
            processes_at=self._cadence.read_at,
        )

    def request_processes(self) -> None:
        """Read the process lists at the next poll (a worker was launched or stopped); safe from any thread."""
        self._cadence.request()

    def _sample_gpu(self, gpu: _Gpu, procs: dict[int, tuple[GpuProcess, ...]]) -> GpuSample:
        values: dict[str, Any] = {}
        for m in gpu.metrics:
            try:
                raw = read_int(m.path)
            except ValueError:
                values[m.field] = None
                continue
            except OSError as exc:
                if exc.errno in _GONE:
                    return GpuSample(gpu.info.index, lost=True, error=f"{m.path}: {exc.strerror or exc}")
                values[m.field] = None
                continue
            values[m.field] = raw if m.divisor is None else raw / m.divisor
        found = procs.get(gpu.gpu_id, ()) if gpu.gpu_id else ()
        if gpu.gpu_metrics is not None:
            values.update(sample_fields(read_gpu_metrics(gpu.gpu_metrics)))
        if gpu.ras:
            cached, age = self._ecc.get(gpu.info.index, (None, 0))
            if age % ECC_EVERY_POLLS == 0:
                cached, age = read_ras(gpu.ras), 0
            self._ecc[gpu.info.index] = (cached, age + 1)
            values["ecc"] = cached
        return GpuSample(
            gpu.info.index,
            vram_total_bytes=gpu.info.vram_total_bytes,
            processes=found,
            **values,
        )

    def _processes(self) -> dict[int, list[GpuProcess]]:
        """Per-process VRAM from ``class/kfd/kfd/proc/<pid>/vram_<gpu_id>``, keyed by gpu_id."""
        try:
            pids = os.listdir(self._kfd_proc)
        except OSError:
            return {}
        out: dict[int, list[GpuProcess]] = {}
        for pid_text in pids:
            if not pid_text.isdigit():
                continue
            pid_dir = f"{self._kfd_proc}/{pid_text}"
            try:
                entries = os.listdir(pid_dir)
            except OSError:
                continue  # the process exited between the two listings
            name: str | None = None
            named = False
            for entry in entries:
                if not entry.startswith("vram_"):
                    continue
                try:
                    gpu_id = int(entry[5:])
                    vram = read_int(f"{pid_dir}/{entry}")
                except (OSError, ValueError):
                    continue
                owner, part = self._part_of.get(gpu_id, (gpu_id, None))
                if owner not in self._by_gpu_id:
                    continue
                if not named:
                    name, named = self._comm(pid_text), True
                out.setdefault(owner, []).append(GpuProcess(int(pid_text), name, vram, part))
        return out

    def _with_engine_time(self, procs: dict[int, list[GpuProcess]]) -> dict[int, list[GpuProcess]]:
        """Each process's busy share from its DRM fdinfo engine time, on its GPU or partition."""
        clients = self._engines.read({p.pid for found in procs.values() for p in found})
        if not clients:
            return procs
        out: dict[int, list[GpuProcess]] = {}
        for gpu_id, found in procs.items():
            gpu = self._by_gpu_id[gpu_id]
            minors = {part.index: part.render_minor for part in gpu.info.partitions}
            out[gpu_id] = [
                replace(
                    p,
                    gpu_util_pct=process_util(
                        clients.get(p.pid, []), gpu.info.bdf, None if p.partition is None else minors.get(p.partition)
                    ),
                )
                for p in found
            ]
        return out

    def _comm(self, pid: str) -> str | None:
        try:
            with open(f"{self._proc_root}/{pid}/comm", encoding="utf-8", errors="replace") as fh:
                return fh.read().strip() or None
        except OSError:
            return None  # another PID namespace, or exited

    def close(self) -> None:
        """Nothing to release."""


def open_backend(options: BackendOptions) -> SysfsBackend:
    """Open the sysfs backend on ``options.sysfs_root``.

    Raises:
        BackendUnavailable: no amdgpu card there.
    """
    return SysfsBackend(options.sysfs_root, options.proc_root, processes_every_s=options.processes_every_s)
