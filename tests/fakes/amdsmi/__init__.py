"""Fake ``amdsmi`` package (7.0.2 API subset used by amdtop) for tests; see ``amdsmi_interface``."""

# ruff: noqa: F401  (re-exports, as the real package does)

from .amdsmi_exception import (
    AmdSmiBdfFormatException,
    AmdSmiException,
    AmdSmiKeyException,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiRetryException,
    AmdSmiTimeoutException,
)
from .amdsmi_interface import (
    AmdSmiClkType,
    AmdSmiGpuBlock,
    AmdSmiInitFlags,
    AmdSmiLinkType,
    AmdSmiMemoryType,
    AmdSmiTemperatureMetric,
    AmdSmiTemperatureType,
    amdsmi_get_clock_info,
    amdsmi_get_gpu_activity,
    amdsmi_get_gpu_asic_info,
    amdsmi_get_gpu_device_bdf,
    amdsmi_get_gpu_device_uuid,
    amdsmi_get_gpu_ecc_count,
    amdsmi_get_gpu_ecc_enabled,
    amdsmi_get_gpu_enumeration_info,
    amdsmi_get_gpu_kfd_info,
    amdsmi_get_gpu_memory_total,
    amdsmi_get_gpu_memory_usage,
    amdsmi_get_gpu_process_list,
    amdsmi_get_gpu_topo_numa_affinity,
    amdsmi_get_gpu_total_ecc_count,
    amdsmi_get_gpu_vram_usage,
    amdsmi_get_link_metrics,
    amdsmi_get_minmax_bandwidth_between_processors,
    amdsmi_get_power_cap_info,
    amdsmi_get_power_info,
    amdsmi_get_processor_handle_from_bdf,
    amdsmi_get_processor_handles,
    amdsmi_get_temp_metric,
    amdsmi_get_violation_status,
    amdsmi_init,
    amdsmi_is_P2P_accessible,
    amdsmi_shut_down,
    amdsmi_topo_get_link_type,
    amdsmi_topo_get_link_weight,
    amdsmi_topo_get_numa_node_number,
)

__version__ = "7.0.2"
