"""The ``amdsmi`` backend: AMD's Python API (7.x names, units and quirks per amd.md §1).

* Import and init are silenced (Python- and fd-level): the PyPI wheel without ``libamd_smi.so`` prints two lines to
  stdout and raises ``KeyError``; any exception there means "backend unavailable", never a traceback or stray output.
* Handles are fresh ``c_void_p`` objects per call, so they are told apart by ``.value``.
* Every field is read on its own: an ``AmdSmiException`` or an ``"N/A"`` string gives ``None`` for that field only.
* What a GPU supports is probed once at open (HOTSPOT vs EDGE temperature -- EDGE is NOT_SUPPORTED on MI300X --,
  VRAM temperature, clocks); a poll calls only what worked then.
* A GPU whose activity or VRAM query worked at open and now fails (other than RETRY/TIMEOUT) is lost.
* GPU index order = KFD node order (``amdsmi_get_gpu_kfd_info()["node_id"]``), the same order as the sysfs backend.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from amdtop.errors import BackendUnavailable
from amdtop.gpuprocs.engine_time import EngineRates
from amdtop.model import (
    EccCount,
    Flag,
    GpuInfo,
    GpuProcess,
    GpuSample,
    Link,
    LinkType,
    NodeSnapshot,
    Topology,
    XgmiLinkCounters,
)
from amdtop.telemetry.amdsmi_partitions import group_handles, read_facts, tag_processes, with_partitions
from amdtop.telemetry.base import BackendOptions, ProcessCadence
from amdtop.telemetry.lost import lost_flag
from amdtop.telemetry.numa import cpus_of, read_numa_nodes
from amdtop.telemetry.plausible import plausible

_TRANSIENT = frozenset({8, 9})  # AMDSMI_STATUS_TIMEOUT, AMDSMI_STATUS_RETRY
_LINK_TYPES = {1: LinkType.PCIE, 2: LinkType.XGMI}  # AmdSmiLinkType PCIE / XGMI (same numbers as the old IOLINK enum)
# amdsmi_get_violation_status accumulators -> amdtop's throttle reasons; ``acc_counter`` is their clock.
_VIOLATIONS = (
    ("acc_prochot_thrm", "prochot"),
    ("acc_ppt_pwr", "power_cap"),
    ("acc_socket_thrm", "socket_thermal"),
    ("acc_vr_thrm", "vr_thermal"),
    ("acc_hbm_thrm", "hbm_thermal"),
)
_ACTIVE = tuple(("active_" + key[4:], reason) for key, reason in _VIOLATIONS)
# ECC counts change rarely and cost one call per RAS block: read them every this many polls.
ECC_EVERY_POLLS = 10


@contextlib.contextmanager
def _silenced() -> Iterator[None]:
    """Swallow anything written to stdout/stderr, from Python or from C, while the library loads."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    saved: list[tuple[int, int]] = []
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            with contextlib.suppress(OSError):
                saved.append((fd, os.dup(fd)))
                os.dup2(devnull, fd)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def load_amdsmi() -> ModuleType:
    """Import ``amdsmi`` without letting it print.

    Raises:
        BackendUnavailable: the package is missing or cannot load its library.
    """
    try:
        with _silenced():
            import amdsmi
    except ModuleNotFoundError:
        raise BackendUnavailable("amdsmi: Python package not installed") from None
    except KeyError as exc:
        raise BackendUnavailable(f"amdsmi: {exc.args[0] if exc.args else 'libamd_smi.so'} not found") from None
    except Exception as exc:
        raise BackendUnavailable(f"amdsmi: cannot load ({type(exc).__name__}: {_one_line(exc)})") from None
    module: ModuleType = amdsmi
    return module


def _num(value: Any) -> float | None:
    """A number from amdsmi, ``None`` for ``"N/A"`` and anything else that is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Lost(Exception):
    pass


class AmdsmiBackend:
    """Telemetry through amdsmi (see the module doc)."""

    name = "amdsmi"

    def __init__(
        self,
        smi: ModuleType,
        sysfs_root: Path = Path("/sys"),
        *,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        processes_every_s: float = 0.0,
    ) -> None:
        """Initialise the library and read the static facts; the process lists every ``processes_every_s`` (0: every
        poll; see :class:`~amdtop.telemetry.base.BackendOptions`).

        Raises:
            BackendUnavailable: init failed or no GPU was found.
        """
        self._smi = smi
        self._clock = clock
        self._cadence = ProcessCadence(processes_every_s, clock)
        self._procs: dict[int, tuple[GpuProcess, ...]] = {}
        self._hostname = hostname or socket.gethostname()
        self._open = False
        self._engines = EngineRates()
        try:
            with _silenced():
                smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
                self._open = True
                raw = list(smi.amdsmi_get_processor_handles())
        except Exception as exc:
            self.close()
            raise BackendUnavailable(f"amdsmi: init failed ({self._why(exc)})") from None
        unique: dict[int, Any] = {}
        for h in raw:
            unique.setdefault(h.value, h)  # two handle objects for one GPU are not ==; their .value is
        if not unique:
            self.close()
            raise BackendUnavailable("amdsmi: no AMD GPU found")
        handles = list(unique.values())
        node_ids = [_int(self._get(smi.amdsmi_get_gpu_kfd_info, h, key="node_id")) for h in handles]
        order = sorted(range(len(handles)), key=lambda k: (node_ids[k] if node_ids[k] is not None else 1 << 30, k))
        self._handles = [handles[k] for k in order]
        # One handle per compute partition on a partitioned GPU: keep partition 0 of each GPU as the GPU.
        facts = [read_facts(smi, h, self._get) for h in self._handles]
        groups = group_handles(facts)
        self._handles = [g[0].handle for g in groups]
        self._parts = [g if len(g) > 1 else [] for g in groups]
        numa = read_numa_nodes(sysfs_root)
        self._infos = tuple(self._static(i, h, numa) for i, h in enumerate(self._handles))
        self._infos = tuple(
            with_partitions(info, smi, g, facts, self._get) for info, g in zip(self._infos, groups, strict=True)
        )
        self._probe()
        self._topology = Topology(self._infos, self._links(), numa)

    # ------------------------------------------------------------------------------------------------ helpers

    @staticmethod
    def _why(exc: BaseException) -> str:
        info = getattr(exc, "err_info", None)
        return _one_line(info if info else f"{type(exc).__name__}: {exc}")

    def _get(self, fn: Callable[..., Any], *args: Any, key: str | None = None) -> Any:
        """``fn(*args)`` (or its ``[key]``), ``None`` when the library raises for this field."""
        try:
            value = fn(*args)
        except self._smi.AmdSmiException:
            return None
        except UnicodeDecodeError:
            # amdsmi decodes the driver's strings (market_name from product_name) as strict UTF-8: one bad byte
            # there costs that field, not the backend.
            return None
        if key is not None:
            return value.get(key) if isinstance(value, dict) else None
        return value

    def _static(self, index: int, h: Any, numa: Any) -> GpuInfo:
        smi = self._smi
        bdf = self._get(smi.amdsmi_get_gpu_device_bdf, h) or "N/A"
        asic = self._get(smi.amdsmi_get_gpu_asic_info, h) or {}
        name = asic.get("market_name")
        if not isinstance(name, str) or not name or name == "N/A":
            name = f"AMD GPU {asic.get('device_id', '?')}"
        serial = asic.get("asic_serial")
        numa_node = _int(self._get(smi.amdsmi_get_gpu_topo_numa_affinity, h))
        if numa_node is not None and numa_node < 0:
            numa_node = None
        cap = _num(self._get(smi.amdsmi_get_power_cap_info, h, key="power_cap"))  # µW
        return GpuInfo(
            index=index,
            name=name,
            bdf=str(bdf).lower(),
            numa_node=numa_node,
            vendor="AMD",
            uuid=serial if isinstance(serial, str) and serial.startswith("0x") else None,
            vram_total_bytes=_int(self._get(smi.amdsmi_get_gpu_memory_total, h, smi.AmdSmiMemoryType.VRAM)),
            cpu_affinity=cpus_of(numa, numa_node),
            power_cap_w=None if cap is None else cap / 1e6,
        )

    def _probe(self) -> None:
        """Decide once per GPU which sensors to poll (MI300X: HOTSPOT works, EDGE is NOT_SUPPORTED)."""
        smi = self._smi
        cur = smi.AmdSmiTemperatureMetric.CURRENT
        temps = smi.AmdSmiTemperatureType
        self._temp: list[Any] = []
        self._mem_temp: list[bool] = []
        self._clocks: list[tuple[bool, bool]] = []
        self._core: list[set[str]] = []
        self._health: list[set[str]] = []
        self._ecc_blocks: list[list[Any]] = []
        for h in self._handles:
            hot = next(
                (
                    t
                    for t in (temps.HOTSPOT, temps.EDGE)
                    if self._get(smi.amdsmi_get_temp_metric, h, t, cur) is not None
                ),
                None,
            )
            self._temp.append(hot)
            self._mem_temp.append(self._get(smi.amdsmi_get_temp_metric, h, temps.VRAM, cur) is not None)
            gfx = self._get(smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.GFX) is not None
            mem = self._get(smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.MEM) is not None
            self._clocks.append((gfx, mem))
            core = set()
            if self._get(smi.amdsmi_get_gpu_activity, h) is not None:
                core.add("amdsmi_get_gpu_activity")
            if self._get(smi.amdsmi_get_gpu_memory_usage, h, smi.AmdSmiMemoryType.VRAM) is not None:
                core.add("amdsmi_get_gpu_memory_usage")
            self._core.append(core)
            health = {
                name
                for name in ("amdsmi_get_link_metrics", "amdsmi_get_violation_status")
                if hasattr(smi, name) and self._get(getattr(smi, name), h) is not None
            }
            self._health.append(health)
            self._ecc_blocks.append(self._probe_ecc(h))
        self._ecc: list[tuple[EccCount, ...] | None] = [None] * len(self._handles)
        self._ecc_age = [0] * len(self._handles)

    def _probe_ecc(self, h: Any) -> list[Any]:
        """RAS blocks with ECC enabled (``amdsmi_get_gpu_ecc_enabled`` bit mask over ``AmdSmiGpuBlock``)."""
        smi = self._smi
        blocks = getattr(smi, "AmdSmiGpuBlock", None)
        if blocks is None or not hasattr(smi, "amdsmi_get_gpu_ecc_count"):
            return []
        mask = _int(self._get(smi.amdsmi_get_gpu_ecc_enabled, h))
        if not mask:
            return []
        return [b for b in blocks if b.name not in ("INVALID", "RESERVED") and mask & int(b.value)]

    def _links(self) -> tuple[Link, ...]:
        smi = self._smi
        links = []
        for a in range(len(self._handles)):
            for b in range(a + 1, len(self._handles)):
                ha, hb = self._handles[a], self._handles[b]
                lt = self._get(smi.amdsmi_topo_get_link_type, ha, hb)
                if not isinstance(lt, dict):
                    links.append(Link(a, b, LinkType.UNKNOWN))
                    continue
                kind = _LINK_TYPES.get(_int(lt.get("type")) or -1, LinkType.UNKNOWN)
                bw = None
                if kind is LinkType.XGMI:
                    bw = _int(
                        self._get(smi.amdsmi_get_minmax_bandwidth_between_processors, ha, hb, key="max_bandwidth")
                    )
                weight = _int(self._get(smi.amdsmi_topo_get_link_weight, ha, hb))
                links.append(Link(a, b, kind, hops=_int(lt.get("hops")), weight=weight, max_bandwidth_mbs=bw or None))
        return tuple(links)

    # --------------------------------------------------------------------------------------------------- poll

    def topology(self) -> Topology:
        """Return the static topology."""
        return self._topology

    def sample(self) -> NodeSnapshot:
        """Poll every GPU once; a GPU that stopped answering is reported lost."""
        samples: list[GpuSample] = []
        flags: list[Flag] = []
        read = self._cadence.due()
        for i, info in enumerate(self._infos):
            try:
                samples.append(plausible(self._sample_gpu(i, read)))
            except _Lost as lost:
                samples.append(GpuSample(i, lost=True, error=str(lost)))
                flags.append(lost_flag(info))
        if read:
            self._engines.forget_unseen()
        return NodeSnapshot(
            "amdsmi",
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

    def _core_call(self, i: int, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._smi.AmdSmiLibraryException as exc:
            if fn.__name__ in self._core[i] and getattr(exc, "err_code", None) not in _TRANSIENT:
                raise _Lost(f"{fn.__name__}: {self._why(exc)}") from None
            return None
        except self._smi.AmdSmiException:
            return None

    def _sample_gpu(self, i: int, read_procs: bool = True) -> GpuSample:
        smi, h = self._smi, self._handles[i]
        act = self._core_call(i, smi.amdsmi_get_gpu_activity, h)
        used = self._core_call(i, smi.amdsmi_get_gpu_memory_usage, h, smi.AmdSmiMemoryType.VRAM)
        act = act if isinstance(act, dict) else {}
        power = self._get(smi.amdsmi_get_power_info, h) or {}
        # MI300X reports current_socket_power; average_socket_power is the MI200/Navi field.
        watts = _num(power.get("current_socket_power"))
        if watts is None:
            watts = _num(power.get("average_socket_power"))
        cur = smi.AmdSmiTemperatureMetric.CURRENT
        temp = _num(self._get(smi.amdsmi_get_temp_metric, h, self._temp[i], cur)) if self._temp[i] is not None else None
        mem_temp = (
            _num(self._get(smi.amdsmi_get_temp_metric, h, smi.AmdSmiTemperatureType.VRAM, cur))
            if self._mem_temp[i]
            else None
        )
        gfx_ok, mem_ok = self._clocks[i]
        sclk = _num(self._get(smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.GFX, key="clk")) if gfx_ok else None
        mclk = _num(self._get(smi.amdsmi_get_clock_info, h, smi.AmdSmiClkType.MEM, key="clk")) if mem_ok else None
        return GpuSample(
            index=i,
            util_pct=_num(act.get("gfx_activity")),
            vram_used_bytes=_int(used),
            vram_total_bytes=self._infos[i].vram_total_bytes,
            power_w=watts,
            temp_c=temp,
            mem_temp_c=mem_temp,
            sclk_mhz=sclk,
            mclk_mhz=mclk,
            mem_util_pct=_num(act.get("umc_activity")),
            processes=self._gpu_processes(i, h) if read_procs else self._procs.get(i, ()),
            xgmi_links=self._link_metrics(i, h),
            ecc=self._ecc_counts(i, h),
            **self._violations(i, h),
        )

    def _link_metrics(self, i: int, h: Any) -> tuple[XgmiLinkCounters, ...] | None:
        if "amdsmi_get_link_metrics" not in self._health[i]:
            return None
        found = self._get(self._smi.amdsmi_get_link_metrics, h)
        if not isinstance(found, dict) or not isinstance(found.get("links"), list):
            return None
        n = _int(found.get("num_links")) or 0
        out = []
        for k, link in enumerate(found["links"][:n]):
            bdf = link.get("bdf")
            out.append(
                XgmiLinkCounters(
                    k,
                    str(bdf).lower() if isinstance(bdf, str) and bdf not in ("N/A", "0000:00:00.0") else None,
                    _int(link.get("read")),
                    _int(link.get("write")),
                )
            )
        return tuple(out) or None

    def _violations(self, i: int, h: Any) -> dict[str, Any]:
        if "amdsmi_get_violation_status" not in self._health[i]:
            return {}
        v = self._get(self._smi.amdsmi_get_violation_status, h)
        if not isinstance(v, dict):
            return {}
        out: dict[str, Any] = {}
        clock = _num(v.get("acc_counter"))
        acc = [(reason, x) for key, reason in _VIOLATIONS if (x := _num(v.get(key))) is not None]
        if clock is not None and acc:
            out["throttle_clock"] = clock
            out["throttle_acc"] = tuple(acc)
        active = [(reason, v.get(key)) for key, reason in _ACTIVE]
        if any(isinstance(flag, bool) for _, flag in active):
            out["throttle_active"] = tuple(sorted({reason for reason, flag in active if flag is True}))
        return out

    def _ecc_counts(self, i: int, h: Any) -> tuple[EccCount, ...] | None:
        if not self._ecc_blocks[i]:
            return None
        if self._ecc_age[i] % ECC_EVERY_POLLS:
            self._ecc_age[i] += 1
            return self._ecc[i]
        out = []
        for block in self._ecc_blocks[i]:
            c = self._get(self._smi.amdsmi_get_gpu_ecc_count, h, block)
            if isinstance(c, dict):
                out.append(
                    EccCount(
                        block.name.lower(),
                        _int(c.get("correctable_count")),
                        _int(c.get("uncorrectable_count")),
                        _int(c.get("deferred_count")),
                    )
                )
        self._ecc[i] = tuple(out) or None
        self._ecc_age[i] = 1
        return self._ecc[i]

    def _gpu_processes(self, i: int, h: Any) -> tuple[GpuProcess, ...]:
        # Kept per GPU: between readings the sample repeats the same tuple (see BackendOptions.processes_every_s).
        procs = self._procs[i] = self._partition_processes(i) if self._parts[i] else self._processes(h)
        return procs

    def _partition_processes(self, i: int) -> tuple[GpuProcess, ...]:
        out: list[GpuProcess] = []
        for f in self._parts[i]:
            out += tag_processes(self._processes(f.handle), f.partition)
        return tuple(sorted(out, key=lambda p: (p.pid, p.partition or 0)))

    def _processes(self, h: Any) -> tuple[GpuProcess, ...]:
        found = self._get(self._smi.amdsmi_get_gpu_process_list, h)
        out = []
        for p in found if isinstance(found, list) else []:
            pid = _int(p.get("pid"))
            if pid is None:
                continue
            name = p.get("name")
            usage = p.get("memory_usage")
            vram = _int(usage.get("vram_mem")) if isinstance(usage, dict) else _int(p.get("mem"))
            engines = p.get("engine_usage")
            gfx = _int(engines.get("gfx")) if isinstance(engines, dict) else None
            # engine_usage.gfx is the process's cumulative GFX engine time (ns): its delta is the busy share.
            util = None if gfx is None else self._engines.rate((getattr(h, "value", id(h)), pid), gfx, self._clock())
            shown = name if isinstance(name, str) and name and name != "N/A" else None
            out.append(GpuProcess(pid, shown, vram, gpu_util_pct=util))
        return tuple(sorted(out, key=lambda p: p.pid))

    def close(self) -> None:
        """Shut the library down (once)."""
        if self._open:
            self._open = False
            with contextlib.suppress(Exception):
                self._smi.amdsmi_shut_down()


def open_backend(options: BackendOptions) -> AmdsmiBackend:
    """Load amdsmi and open it.

    Raises:
        BackendUnavailable: amdsmi missing, broken, without a driver, or without GPUs.
    """
    return AmdsmiBackend(load_amdsmi(), options.sysfs_root, processes_every_s=options.processes_every_s)
