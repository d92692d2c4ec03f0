"""Fake of ``amdsmi.amdsmi_interface`` (7.0.2) backed by a sysfs fixture tree instead of ``libamd_smi.so``.

Names, signatures, return dicts, units and errors follow the real wheel: handles are fresh ``c_void_p`` objects
(compare ``.value``), wrong argument types raise ``AmdSmiParameterException``, failures raise
``AmdSmiLibraryException(code)``, max-uint values come back as ``"N/A"``. Units: memory total/usage bytes,
``vram_usage`` MB, power W (``power_cap_info`` µW), temperature °C, clocks MHz.

The tree is ``$AMDTOP_FAKE_AMDSMI_SYSFS`` (and ``$AMDTOP_FAKE_AMDSMI_PROC`` for process names), read at
``amdsmi_init``. As in rocm_smi, a sysfs file that does not exist gives NOT_SUPPORTED (ENOENT maps to it).
This is an independent re-implementation of the library's rules (it does not use amdtop's code), so tests that
compare the amdsmi backend with the sysfs backend check two readings of the same tree.
Test hook (not in the real API): ``_FAKE_FAIL[(function_name, bdf or None)] = err_code`` makes a call fail.
"""

# ruff: noqa: N802, UP031, UP032  (names and formatting as in the real module)

import ctypes
import os
import re
import struct
from enum import IntEnum
from pathlib import Path

from . import amdsmi_wrapper
from .amdsmi_exception import AmdSmiBdfFormatException, AmdSmiLibraryException, AmdSmiParameterException

processor_handle = ctypes.c_void_p
AMDSMI_MAX_NUM_XGMI_LINKS = 8
_HANDLE_BASE = 0x5A000000
_FAKE_FAIL: dict = {}
_state: dict = {}


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = amdsmi_wrapper.AMDSMI_INIT_ALL_PROCESSORS
    INIT_AMD_CPUS = amdsmi_wrapper.AMDSMI_INIT_AMD_CPUS
    INIT_AMD_GPUS = amdsmi_wrapper.AMDSMI_INIT_AMD_GPUS
    INIT_AMD_APUS = amdsmi_wrapper.AMDSMI_INIT_AMD_APUS
    INIT_NON_AMD_CPUS = amdsmi_wrapper.AMDSMI_INIT_NON_AMD_CPUS
    INIT_NON_AMD_GPUS = amdsmi_wrapper.AMDSMI_INIT_NON_AMD_GPUS


class AmdSmiMemoryType(IntEnum):
    VRAM = amdsmi_wrapper.AMDSMI_MEM_TYPE_VRAM
    VIS_VRAM = amdsmi_wrapper.AMDSMI_MEM_TYPE_VIS_VRAM
    GTT = amdsmi_wrapper.AMDSMI_MEM_TYPE_GTT


class AmdSmiTemperatureType(IntEnum):
    EDGE = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_EDGE
    HOTSPOT = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HOTSPOT
    JUNCTION = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_JUNCTION
    VRAM = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_VRAM
    HBM_0 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_0
    HBM_1 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_1
    HBM_2 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_2
    HBM_3 = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_HBM_3
    PLX = amdsmi_wrapper.AMDSMI_TEMPERATURE_TYPE_PLX


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = amdsmi_wrapper.AMDSMI_TEMP_CURRENT
    MAX = amdsmi_wrapper.AMDSMI_TEMP_MAX
    MIN = amdsmi_wrapper.AMDSMI_TEMP_MIN
    MAX_HYST = amdsmi_wrapper.AMDSMI_TEMP_MAX_HYST
    MIN_HYST = amdsmi_wrapper.AMDSMI_TEMP_MIN_HYST
    CRITICAL = amdsmi_wrapper.AMDSMI_TEMP_CRITICAL


class AmdSmiClkType(IntEnum):
    SYS = amdsmi_wrapper.AMDSMI_CLK_TYPE_SYS
    GFX = amdsmi_wrapper.AMDSMI_CLK_TYPE_GFX
    DF = amdsmi_wrapper.AMDSMI_CLK_TYPE_DF
    DCEF = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCEF
    SOC = amdsmi_wrapper.AMDSMI_CLK_TYPE_SOC
    MEM = amdsmi_wrapper.AMDSMI_CLK_TYPE_MEM
    PCIE = amdsmi_wrapper.AMDSMI_CLK_TYPE_PCIE
    VCLK0 = amdsmi_wrapper.AMDSMI_CLK_TYPE_VCLK0
    VCLK1 = amdsmi_wrapper.AMDSMI_CLK_TYPE_VCLK1
    DCLK0 = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCLK0
    DCLK1 = amdsmi_wrapper.AMDSMI_CLK_TYPE_DCLK1


class AmdSmiLinkType(IntEnum):
    AMDSMI_LINK_TYPE_INTERNAL = amdsmi_wrapper.AMDSMI_LINK_TYPE_INTERNAL
    AMDSMI_LINK_TYPE_XGMI = amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI
    AMDSMI_LINK_TYPE_PCIE = amdsmi_wrapper.AMDSMI_LINK_TYPE_PCIE
    AMDSMI_LINK_TYPE_NOT_APPLICABLE = amdsmi_wrapper.AMDSMI_LINK_TYPE_NOT_APPLICABLE
    AMDSMI_LINK_TYPE_UNKNOWN = amdsmi_wrapper.AMDSMI_LINK_TYPE_UNKNOWN


class AmdSmiGpuBlock(IntEnum):
    INVALID = amdsmi_wrapper.AMDSMI_GPU_BLOCK_INVALID
    UMC = amdsmi_wrapper.AMDSMI_GPU_BLOCK_UMC
    SDMA = amdsmi_wrapper.AMDSMI_GPU_BLOCK_SDMA
    GFX = amdsmi_wrapper.AMDSMI_GPU_BLOCK_GFX
    MMHUB = amdsmi_wrapper.AMDSMI_GPU_BLOCK_MMHUB
    ATHUB = amdsmi_wrapper.AMDSMI_GPU_BLOCK_ATHUB
    PCIE_BIF = amdsmi_wrapper.AMDSMI_GPU_BLOCK_PCIE_BIF
    HDP = amdsmi_wrapper.AMDSMI_GPU_BLOCK_HDP
    XGMI_WAFL = amdsmi_wrapper.AMDSMI_GPU_BLOCK_XGMI_WAFL
    DF = amdsmi_wrapper.AMDSMI_GPU_BLOCK_DF
    SMN = amdsmi_wrapper.AMDSMI_GPU_BLOCK_SMN
    SEM = amdsmi_wrapper.AMDSMI_GPU_BLOCK_SEM
    MP0 = amdsmi_wrapper.AMDSMI_GPU_BLOCK_MP0
    MP1 = amdsmi_wrapper.AMDSMI_GPU_BLOCK_MP1
    FUSE = amdsmi_wrapper.AMDSMI_GPU_BLOCK_FUSE
    MCA = amdsmi_wrapper.AMDSMI_GPU_BLOCK_MCA
    VCN = amdsmi_wrapper.AMDSMI_GPU_BLOCK_VCN
    JPEG = amdsmi_wrapper.AMDSMI_GPU_BLOCK_JPEG
    IH = amdsmi_wrapper.AMDSMI_GPU_BLOCK_IH
    MPIO = amdsmi_wrapper.AMDSMI_GPU_BLOCK_MPIO
    RESERVED = amdsmi_wrapper.AMDSMI_GPU_BLOCK_RESERVED


# ----------------------------------------------------------------------------------------------- fixture reading


def _props(path):
    out = {}
    for line in Path(path).read_text().splitlines():
        k, _, v = line.partition(" ")
        out[k] = int(v)
    return out


def _links(node_dir, kind):
    d = node_dir / kind
    return [_props(d / n / "properties") for n in sorted(os.listdir(d), key=int)] if d.is_dir() else []


def _scan(root):
    topo = root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    if not topo.is_dir():
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_DRIVER_NOT_LOADED)
    nodes = {}
    for n in sorted(os.listdir(topo), key=int):
        nd = topo / n
        nodes[int(n)] = {
            "gpu_id": int((nd / "gpu_id").read_text()),
            "props": _props(nd / "properties"),
            "io": _links(nd, "io_links"),
            "p2p": _links(nd, "p2p_links"),
        }
    gpus = []
    drm = root / "class" / "drm"
    for name in sorted((n for n in os.listdir(drm) if re.fullmatch(r"card\d+", n)), key=lambda n: int(n[4:])):
        dev = Path(os.path.realpath(drm / name / "device"))
        if (dev / "vendor").read_text().strip() != "0x1002":
            continue
        bdf = dev.name
        node = next(
            (
                i
                for i, nd in nodes.items()
                if nd["gpu_id"]
                and "%04x:%02x:%02x.%x"
                % (
                    nd["props"]["domain"],
                    nd["props"]["location_id"] >> 8,
                    nd["props"]["location_id"] >> 3 & 31,
                    nd["props"]["location_id"] & 7,
                )
                == bdf
            ),
            None,
        )
        hw_root = dev / "hwmon"
        hw = hw_root / sorted(os.listdir(hw_root))[0]
        gpus.append({"bdf": bdf, "dev": dev, "hw": hw, "node": node, "card": int(name[4:])})
    return nodes, gpus


def _gpu(handle, fn):
    if not isinstance(handle, amdsmi_wrapper.amdsmi_processor_handle):
        raise AmdSmiParameterException(handle, amdsmi_wrapper.amdsmi_processor_handle)
    if not _state:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_INIT)
    idx = (handle.value or 0) - _HANDLE_BASE
    if not 0 <= idx < len(_state["gpus"]):
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INVAL)
    gpu = _state["gpus"][idx]
    for key in ((fn, gpu["bdf"]), (fn, None)):
        if key in _FAKE_FAIL:
            raise AmdSmiLibraryException(_FAKE_FAIL[key])
    return gpu


def _read(path):
    try:
        return Path(path).read_text().strip()
    except FileNotFoundError:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED) from None
    except OSError:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_IO) from None


def _hw_label(gpu, prefix, label):
    try:
        names = os.listdir(gpu["hw"])
    except OSError:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED) from None
    for n in names:
        m = re.fullmatch(prefix + r"(\d+)_label", n)
        if m and _read(gpu["hw"] / n) == label:
            return int(_read(gpu["hw"] / f"{prefix}{m.group(1)}_input"))
    raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)


def _opt_hw(gpu, name):
    try:
        return int(_read(gpu["hw"] / name))
    except AmdSmiLibraryException:
        return None


# ------------------------------------------------------------------------------------------------------ the API


def amdsmi_init(flag=AmdSmiInitFlags.INIT_AMD_GPUS):
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    root = os.environ.get("AMDTOP_FAKE_AMDSMI_SYSFS")
    if not root:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_DRIVER_NOT_LOADED)
    nodes, gpus = _scan(Path(root))
    _state.clear()
    _state.update(
        nodes=nodes, gpus=gpus, proc=Path(os.environ.get("AMDTOP_FAKE_AMDSMI_PROC", "/proc")), root=Path(root)
    )


def amdsmi_shut_down():
    _state.clear()


def amdsmi_get_processor_handles():
    if not _state:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_INIT)
    return [amdsmi_wrapper.amdsmi_processor_handle(_HANDLE_BASE + i) for i in range(len(_state["gpus"]))]


def amdsmi_get_processor_handle_from_bdf(bdf):
    if not isinstance(bdf, str) or not re.fullmatch(r"([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-1][0-9a-fA-F]\.[0-7]", bdf):
        raise AmdSmiBdfFormatException(bdf)
    full = bdf.lower() if len(bdf) == 12 else "0000:" + bdf.lower()
    for i, g in enumerate(_state.get("gpus", [])):
        if g["bdf"] == full:
            return amdsmi_wrapper.amdsmi_processor_handle(_HANDLE_BASE + i)
    raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_FOUND)


def amdsmi_get_gpu_device_bdf(processor_handle):
    return _gpu(processor_handle, "amdsmi_get_gpu_device_bdf")["bdf"]


def amdsmi_get_gpu_asic_info(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_asic_info")
    props = _state["nodes"][gpu["node"]]["props"] if gpu["node"] is not None else {}
    name = _read(gpu["dev"] / "product_name") if (gpu["dev"] / "product_name").exists() else ""
    serial = _read(gpu["dev"] / "unique_id") if (gpu["dev"] / "unique_id").exists() else ""
    gfx = props.get("gfx_target_version", 0)
    return {
        "market_name": name or "N/A",
        "vendor_id": _read(gpu["dev"] / "vendor"),
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x1002",
        "device_id": hex(int(_read(gpu["dev"] / "device"), 16)),
        "rev_id": "0x00",
        "asic_serial": "0x{:016X}".format(int(serial, 16)) if serial else "N/A",
        "oam_id": gpu["card"] - 1,
        "num_compute_units": props.get("simd_count", 0) // 4 or "N/A",
        "target_graphics_version": "gfx%d%d%x" % (gfx // 10000, gfx // 100 % 100, gfx % 100),
        "subsystem_id": "0x0c34",
    }


def amdsmi_get_gpu_device_uuid(processor_handle):
    # Shape only (dashed hex from device id + ASIC serial); the exact byte layout of the C library is not modelled.
    info = amdsmi_get_gpu_asic_info(processor_handle)
    serial = int(info["asic_serial"], 16) if info["asic_serial"] != "N/A" else 0
    dev = int(info["device_id"], 16)
    return "%08x-%04x-%04x-%04x-%012x" % (
        dev << 16 | 0xFF00 | serial >> 56,
        serial >> 40 & 0xFFFF,
        serial >> 24 & 0xFFFF,
        serial >> 8 & 0xFFFF,
        serial & 0xFF,
    )


def amdsmi_get_gpu_kfd_info(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_kfd_info")
    if gpu["node"] is None:
        return {"kfd_id": "N/A", "node_id": "N/A", "current_partition_id": "N/A"}
    return {"kfd_id": _state["nodes"][gpu["node"]]["gpu_id"], "node_id": gpu["node"], "current_partition_id": 0}


def amdsmi_get_gpu_enumeration_info(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_enumeration_info")
    gpu_nodes = [i for i, nd in _state["nodes"].items() if nd["gpu_id"]]
    node = gpu["node"]
    return {
        "drm_render": _state["nodes"][node]["props"]["drm_render_minor"] if node is not None else "N/A",
        "drm_card": gpu["card"],
        "hsa_id": node if node is not None else "N/A",
        "hip_id": gpu_nodes.index(node) if node in gpu_nodes else "N/A",
        "hip_uuid": "GPU-" + amdsmi_get_gpu_asic_info(processor_handle)["asic_serial"][2:].lower(),
    }


def amdsmi_get_gpu_activity(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_activity")
    gfx = int(_read(gpu["dev"] / "gpu_busy_percent"))
    try:
        umc = int(_read(gpu["dev"] / "mem_busy_percent"))
    except AmdSmiLibraryException:
        umc = 0xFFFF
    out = {"gfx_activity": gfx, "umc_activity": umc, "mm_activity": 0xFFFF}
    return {k: "N/A" if v == 0xFFFF else v for k, v in out.items()}


def _mem(processor_handle, mem_type, fn, which):
    gpu = _gpu(processor_handle, fn)
    if not isinstance(mem_type, AmdSmiMemoryType):
        raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)
    name = {AmdSmiMemoryType.VRAM: "vram", AmdSmiMemoryType.VIS_VRAM: "vis_vram", AmdSmiMemoryType.GTT: "gtt"}[mem_type]
    return int(_read(gpu["dev"] / f"mem_info_{name}_{which}"))


def amdsmi_get_gpu_memory_total(processor_handle, mem_type):
    return _mem(processor_handle, mem_type, "amdsmi_get_gpu_memory_total", "total")


def amdsmi_get_gpu_memory_usage(processor_handle, mem_type):
    return _mem(processor_handle, mem_type, "amdsmi_get_gpu_memory_usage", "used")


def amdsmi_get_gpu_vram_usage(processor_handle):
    _gpu(processor_handle, "amdsmi_get_gpu_vram_usage")
    total = amdsmi_get_gpu_memory_total(processor_handle, AmdSmiMemoryType.VRAM)
    used = amdsmi_get_gpu_memory_usage(processor_handle, AmdSmiMemoryType.VRAM)
    return {"vram_total": total // (1024 * 1024), "vram_used": used // (1024 * 1024)}


def amdsmi_get_power_info(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_power_info")
    _read(gpu["dev"] / "gpu_busy_percent")  # a vanished device fails as a whole
    cur, avg, cap = _opt_hw(gpu, "power1_input"), _opt_hw(gpu, "power1_average"), _opt_hw(gpu, "power1_cap")
    cur_w = 0xFFFF if cur is None else cur // 1_000_000
    avg_w = 0xFFFF if avg is None else avg // 1_000_000
    out = {
        "socket_power": cur_w if cur is not None else avg_w,
        "current_socket_power": cur_w,
        "average_socket_power": avg_w,
        "gfx_voltage": 0xFFFF,
        "soc_voltage": 0xFFFF,
        "mem_voltage": 0xFFFF,
        "power_limit": 0xFFFF if cap is None else cap // 1_000_000,
    }
    return {k: "N/A" if v == 0xFFFF else v for k, v in out.items()}


def amdsmi_get_power_cap_info(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_power_cap_info")
    cap = int(_read(gpu["hw"] / "power1_cap"))
    top = _opt_hw(gpu, "power1_cap_max") or cap
    return {"power_cap": cap, "default_power_cap": top, "dpm_cap": 0, "min_power_cap": 0, "max_power_cap": top}


def amdsmi_get_temp_metric(processor_handle, sensor_type, metric):
    gpu = _gpu(processor_handle, "amdsmi_get_temp_metric")
    if not isinstance(sensor_type, AmdSmiTemperatureType):
        raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
    if not isinstance(metric, AmdSmiTemperatureMetric):
        raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
    label = {0: "edge", 1: "junction", 2: "mem"}.get(int(sensor_type))
    if label is None or metric != AmdSmiTemperatureMetric.CURRENT:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return _hw_label(gpu, "temp", label) // 1000  # the C library divides m°C by 1000


def amdsmi_get_clock_info(processor_handle, clock_type):
    gpu = _gpu(processor_handle, "amdsmi_get_clock_info")
    if not isinstance(clock_type, AmdSmiClkType):
        raise AmdSmiParameterException(clock_type, AmdSmiClkType)
    label = {AmdSmiClkType.GFX: "sclk", AmdSmiClkType.MEM: "mclk"}.get(clock_type)
    if label is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    mhz = _hw_label(gpu, "freq", label) // 1_000_000
    return {
        "clk": mhz,
        "min_clk": 100 if label == "sclk" else 900,
        "max_clk": 2100 if label == "sclk" else 1300,
        "clk_locked": False,
        "clk_deep_sleep": 0,
    }


def amdsmi_get_gpu_process_list(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_process_list")
    if gpu["node"] is None:
        return []
    gpu_id = _state["nodes"][gpu["node"]]["gpu_id"]
    base = _state["root"] / "class" / "kfd" / "kfd" / "proc"
    result = []
    for pid in sorted(os.listdir(base)) if base.is_dir() else []:
        f = base / pid / f"vram_{gpu_id}"
        if not f.exists():
            continue
        vram = int(f.read_text())
        comm = _state["proc"] / pid / "comm"
        name = comm.read_text().strip() if comm.exists() else ""
        result.append(
            {
                "name": name or "N/A",
                "pid": int(pid),
                "mem": vram,
                "engine_usage": {"gfx": 0, "enc": 0},
                "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": vram},
                "cu_occupancy": "N/A",
            }
        )
    return result


def amdsmi_get_gpu_topo_numa_affinity(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_topo_numa_affinity")
    return int(_read(gpu["dev"] / "numa_node"))


def _cpu_link(node):
    cpus = {i for i, nd in _state["nodes"].items() if not nd["gpu_id"]}
    links = [lk for lk in _state["nodes"][node]["io"] if lk["node_to"] in cpus]
    return min(links, key=lambda lk: lk["weight"]) if links else None


def amdsmi_topo_get_numa_node_number(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_topo_get_numa_node_number")
    link = _cpu_link(gpu["node"]) if gpu["node"] is not None else None
    if link is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return link["node_to"]


def _pair(a, b, fn):
    ga, gb = _gpu(a, fn), _gpu(b, fn)
    if ga["node"] is None or gb["node"] is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    if ga is gb:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_INVAL)
    nd = _state["nodes"][ga["node"]]
    direct = next((lk for lk in nd["p2p"] + nd["io"] if lk["node_to"] == gb["node"] and lk["type"] == 11), None)
    return ga, gb, direct


def _pcie_path(ga, gb):
    la, lb = _cpu_link(ga["node"]), _cpu_link(gb["node"])
    if la is None or lb is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    if la["node_to"] == lb["node_to"]:
        return 2, la["weight"] + lb["weight"]
    cross = next((lk for lk in _state["nodes"][la["node_to"]]["io"] if lk["node_to"] == lb["node_to"]), None)
    if cross is None:
        return 4, la["weight"] + lb["weight"] + 10
    return 3, la["weight"] + lb["weight"] + cross["weight"]


def amdsmi_topo_get_link_type(processor_handle_src, processor_handle_dst):
    ga, gb, direct = _pair(processor_handle_src, processor_handle_dst, "amdsmi_topo_get_link_type")
    if direct is not None:
        return {"hops": 1, "type": amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI}
    return {"hops": _pcie_path(ga, gb)[0], "type": amdsmi_wrapper.AMDSMI_LINK_TYPE_PCIE}


def amdsmi_topo_get_link_weight(processor_handle_src, processor_handle_dst):
    ga, gb, direct = _pair(processor_handle_src, processor_handle_dst, "amdsmi_topo_get_link_weight")
    return direct["weight"] if direct is not None else _pcie_path(ga, gb)[1]


def amdsmi_get_minmax_bandwidth_between_processors(processor_handle_src, processor_handle_dst):
    _ga, _gb, direct = _pair(
        processor_handle_src, processor_handle_dst, "amdsmi_get_minmax_bandwidth_between_processors"
    )
    if direct is None:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return {"min_bandwidth": direct["min_bandwidth"], "max_bandwidth": direct["max_bandwidth"]}


def amdsmi_is_P2P_accessible(processor_handle_src, processor_handle_dst):
    ga, gb = (
        _gpu(processor_handle_src, "amdsmi_is_P2P_accessible"),
        _gpu(processor_handle_dst, "amdsmi_is_P2P_accessible"),
    )
    return ga is gb or (ga["node"] is not None and gb["node"] is not None)


# ------------------------------------------------------------------------------- gpu_metrics-backed calls (MI300)
# The library reads these from the binary gpu_metrics table. Offsets are those of the kernel's gpu_metrics_v1_4/5/6
# (kgd_pp_interface.h), worked out here on their own so this fake does not share amdtop's parser.
_XGMI_READ_OFFSET = {4: 104, 5: 176, 6: 200}  # xgmi_read_data_acc[8]; xgmi_write_data_acc[8] follows
_RESIDENCY_OFFSET = 104  # v1.6: accumulation_counter then prochot/ppt/socket_thm/vr_thm/hbm_thm residency (u32 each)
_U64_MAX = 0xFFFFFFFFFFFFFFFF


def _metrics_table(gpu):
    try:
        data = (gpu["dev"] / "gpu_metrics").read_bytes()
    except OSError:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED) from None
    if len(data) < 4:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_UNEXPECTED_SIZE)
    size, frev, crev = struct.unpack_from("<HBB", data)
    if frev != 1 or len(data) < size:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    return crev, data


def _xgmi_peers(gpu):
    """BDFs of the GPUs this one's XGMI io_links lead to, in link order."""
    if gpu["node"] is None:
        return []
    by_node = {g["node"]: g["bdf"] for g in _state["gpus"]}
    return [by_node.get(lk["node_to"]) for lk in _state["nodes"][gpu["node"]]["io"] if lk["type"] == 11]


def amdsmi_get_link_metrics(processor_handle):
    if not isinstance(processor_handle, amdsmi_wrapper.amdsmi_processor_handle):
        raise AmdSmiParameterException(processor_handle, amdsmi_wrapper.amdsmi_processor_handle)
    gpu = _gpu(processor_handle, "amdsmi_get_link_metrics")
    crev, data = _metrics_table(gpu)
    if crev not in _XGMI_READ_OFFSET:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    off = _XGMI_READ_OFFSET[crev]
    reads = struct.unpack_from("<8Q", data, off)
    writes = struct.unpack_from("<8Q", data, off + 64)
    peers = _xgmi_peers(gpu)
    links = []
    for i in range(AMDSMI_MAX_NUM_XGMI_LINKS):
        peer = peers[i] if i < len(peers) else None
        links.append(
            {
                "bdf": peer or "0000:00:00.0",
                "bit_rate": 32 if peer else 0,
                "max_bandwidth": 64 if peer else 0,
                "link_type": amdsmi_wrapper.AMDSMI_LINK_TYPE_XGMI if peer else amdsmi_wrapper.AMDSMI_LINK_TYPE_UNKNOWN,
                "read": reads[i] if reads[i] != _U64_MAX else 0,
                "write": writes[i] if writes[i] != _U64_MAX else 0,
            }
        )
    return {"num_links": len(peers), "links": links}


def amdsmi_get_violation_status(processor_handle):
    if not isinstance(processor_handle, amdsmi_wrapper.amdsmi_processor_handle):
        raise AmdSmiParameterException(processor_handle, amdsmi_wrapper.amdsmi_processor_handle)
    gpu = _gpu(processor_handle, "amdsmi_get_violation_status")
    crev, data = _metrics_table(gpu)
    if crev < 6:
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    acc, prochot, ppt, socket, vr, hbm = struct.unpack_from("<6I", data, _RESIDENCY_OFFSET)

    def v(x):
        return "N/A" if x == 0xFFFFFFFF else x

    # The per_* percentages and active_* flags are the library's own deltas between calls; not modelled here.
    out = {
        "reference_timestamp": "N/A",
        "violation_timestamp": "N/A",
        "acc_counter": v(acc),
        "acc_prochot_thrm": v(prochot),
        "acc_ppt_pwr": v(ppt),
        "acc_socket_thrm": v(socket),
        "acc_vr_thrm": v(vr),
        "acc_hbm_thrm": v(hbm),
        "acc_gfx_clk_below_host_limit": "N/A",
    }
    for name in ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm", "gfx_clk_below_host_limit"):
        out["per_" + name] = "N/A"
        out["active_" + name] = "N/A"
    return out


# ------------------------------------------------------------------------------------------------ ECC (RAS files)


def _ras_counts(gpu, block):
    text = _read(gpu["dev"] / "ras" / (block.name.lower() + "_err_count"))
    counts = {}
    for line in text.splitlines():
        k, _, val = line.partition(":")
        counts[k.strip()] = int(val)
    return {
        "correctable_count": counts.get("ce", 0),
        "uncorrectable_count": counts.get("ue", 0),
        "deferred_count": counts.get("de", 0),
    }


def amdsmi_get_gpu_ecc_enabled(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_ecc_enabled")
    ras = gpu["dev"] / "ras"
    if not ras.is_dir():
        raise AmdSmiLibraryException(amdsmi_wrapper.AMDSMI_STATUS_NOT_SUPPORTED)
    mask = 0
    for block in AmdSmiGpuBlock:
        named = block not in (AmdSmiGpuBlock.INVALID, AmdSmiGpuBlock.RESERVED)
        if named and (ras / (block.name.lower() + "_err_count")).exists():
            mask |= block.value
    return mask


def amdsmi_get_gpu_ecc_count(processor_handle, block):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_ecc_count")
    if not isinstance(block, AmdSmiGpuBlock):
        raise AmdSmiParameterException(block, AmdSmiGpuBlock)
    return _ras_counts(gpu, block)


def amdsmi_get_gpu_total_ecc_count(processor_handle):
    gpu = _gpu(processor_handle, "amdsmi_get_gpu_total_ecc_count")
    total = {"correctable_count": 0, "uncorrectable_count": 0, "deferred_count": 0}
    for block in AmdSmiGpuBlock:
        if block in (AmdSmiGpuBlock.INVALID, AmdSmiGpuBlock.RESERVED):
            continue
        try:
            counts = _ras_counts(gpu, block)
        except AmdSmiLibraryException:
            continue
        for k in total:
            total[k] += counts[k]
    return total
