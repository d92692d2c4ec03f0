"""What vLLM should run on each GPU architecture, with the vLLM versions each rule holds for and its source.

Kept as data so a new vLLM release or GPU is a row, not code. Versions are ``(major, minor, patch)``; ``None`` is
open-ended.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amdtop.audit import sources

Version = tuple[int, int, int]

ARCH_BY_NAME = (
    ("MI300", "gfx942"),
    ("MI308", "gfx942"),
    ("MI325", "gfx942"),
    ("MI350", "gfx950"),
    ("MI355", "gfx950"),
    ("H100", "sm_90"),
    ("H200", "sm_90"),
    ("H800", "sm_90"),
    ("H20", "sm_90"),
)
"""Marketing-name fragments to architectures (gfx942 = CDNA3 MI300-class, gfx950 = CDNA4, sm_90 = Hopper)."""


def arch_of(name: str) -> str | None:
    """The architecture of a GPU from its marketing name (``None`` when not in the table)."""
    for fragment, arch in ARCH_BY_NAME:
        if fragment in name:
            return arch
    return None


def parse_version(text: str | None) -> Version | None:
    """``0.6.4.post2.dev822+g16366ee8b`` -> (0, 6, 4); ``None`` when it does not start with a version."""
    if not text:
        return None
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True, slots=True)
class ArchRules:
    """What one architecture should run."""

    arch: str
    preferred_attention: tuple[str, ...]
    """Attention backends that are the fast path on this GPU."""
    slow_attention: tuple[str, ...]
    """Backends that work but leave speed behind here."""
    slow_moe: tuple[str, ...]
    """Words of a MoE line that mark the slow path here (matched case-insensitively)."""
    aiter: bool
    """AITER kernels exist for it (``VLLM_ROCM_USE_AITER``)."""
    aiter_since: Version | None
    """First vLLM with AITER behind ``VLLM_ROCM_USE_AITER`` on this GPU."""
    custom_ar_since: Version | None
    """First vLLM that runs custom all-reduce on this GPU (before it, vLLM disables it itself)."""
    tunableop: bool
    """PyTorch TunableOp is worth enabling (ROCm hipBLASLt GEMMs)."""
    source: str


ARCH_RULES = {
    "gfx942": ArchRules(
        "gfx942",
        preferred_attention=("ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA"),
        slow_attention=("TRITON_ATTN", "ROCM_ATTN", "ROCmFlashAttention", "TORCH_SDPA", "FLEX_ATTENTION"),
        slow_moe=("triton", "emulation"),
        aiter=True,
        aiter_since=(0, 9, 0),
        custom_ar_since=(0, 8, 3),
        tunableop=True,
        source=f"{sources.VLLM_AITER_DEFAULT_OFF}; {sources.VLLM_ROCM_ATTN_SELECTION}; {sources.VLLM_ROCM_CUSTOM_AR}",
    ),
    "gfx950": ArchRules(
        "gfx950",
        preferred_attention=("ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "ROCM_AITER_MLA", "ROCM_AITER_TRITON_MLA"),
        slow_attention=("TRITON_ATTN", "ROCM_ATTN", "TORCH_SDPA", "FLEX_ATTENTION"),
        slow_moe=("triton", "emulation"),
        aiter=True,
        aiter_since=(0, 10, 0),
        custom_ar_since=(0, 10, 0),
        tunableop=True,
        source=f"{sources.VLLM_AITER_DEFAULT_OFF}; {sources.VLLM_ROCM_ATTN_SELECTION}",
    ),
    "sm_90": ArchRules(
        "sm_90",
        preferred_attention=("FLASH_ATTN", "FLASHINFER", "FLASHMLA", "CUTLASS_MLA"),
        slow_attention=("TRITON_ATTN", "FLEX_ATTENTION", "TORCH_SDPA", "XFORMERS"),
        slow_moe=("emulation",),
        aiter=False,
        aiter_since=None,
        custom_ar_since=(0, 3, 0),
        tunableop=False,
        source="https://github.com/vllm-project/vllm/issues/31683 (sm_90 start-up: FLASH_ATTN, FlashInfer CUTLASS MoE)",
    ),
}


def rules_for(arch: str | None) -> ArchRules | None:
    """The table row of ``arch``."""
    return None if arch is None else ARCH_RULES.get(arch)
