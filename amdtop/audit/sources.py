"""Where each rule's claim comes from (cited in every finding's ``source``)."""

NCCL_ENV = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
ROCM_MI300X_SYSTEM = "https://rocm.docs.amd.com/en/latest/how-to/system-optimization/mi300x.html"
ROCM_WORKLOAD = "https://rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference-optimization/workload.html"
VLLM_AITER_DEFAULT_OFF = "https://github.com/vllm-project/vllm/issues/56945"
VLLM_ROCM_ATTN_SELECTION = "https://github.com/vllm-project/vllm/pull/38627"
VLLM_ROCM_CUSTOM_AR = "https://github.com/vllm-project/vllm/pull/14125"
VLLM_NUMA_BIND_ROCM = "https://github.com/vllm-project/vllm/issues/55416"
VLLM_ORPHANS = "https://github.com/vllm-project/vllm/issues/55510"
AMD_REF_ENV = "docs/cli.md (amdtop audit: RCCL_ENABLE_XGMI is not an RCCL variable)"
KERNEL_PCI_SYSFS = "https://www.kernel.org/doc/Documentation/ABI/testing/sysfs-bus-pci"
AMDGPU_RAS = "https://docs.kernel.org/gpu/amdgpu/ras.html"
AMDGPU_PARTITIONS = "https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/gpu-partitioning/mi300x/overview.html"
CPUFREQ = "https://docs.kernel.org/admin-guide/pm/cpufreq.html"
GPU_INIT_POWER_CYCLE = (
    "https://github.com/ROCm/legacy-rocm-build/issues/4021 (MI300X: after a hang a warm reboot failed to reinitialize "
    "the GPUs: early_init of IP block <psp> failed -22)"
)
