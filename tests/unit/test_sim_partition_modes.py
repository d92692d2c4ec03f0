"""Issue 23 item 13: the simulator offers only the compute/memory pairs MI300X offers, with the HBM split as the driver
splits it (``amdgpu_amdkfd_xcp_memory_size``: the memory partition over the compute partitions sharing it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amdtop.telemetry.sim import MI300X_MODES, SimBackend, parse_partition

VALID = "SPX/NPS1, DPX/NPS1, QPX/NPS1, QPX/NPS4, CPX/NPS1, CPX/NPS4"


@pytest.mark.parametrize("bad", ["SPX/NPS4", "DPX/NPS4", "CPX/NPS2", "QPX/NPS8", "NPS2/NPS8"])
def test_pairs_mi300x_does_not_offer_are_refused(bad: str) -> None:
    with pytest.raises(ValueError) as exc:
        parse_partition(bad)
    message = str(exc.value)
    assert "\n" not in message and message.endswith(f"MI300X offers {VALID}"), message


@pytest.mark.parametrize("pair", [f"{c}/{m}" for c, modes in MI300X_MODES.items() for m in modes])
def test_every_offered_pair_holds_the_whole_hbm(pair: str) -> None:
    topo = SimBackend(partition=pair).topology()
    compute, memory = pair.split("/")
    for gpu in topo.gpus:
        assert (gpu.compute_partition, gpu.memory_partition) == (compute, memory)
        assert gpu.vram_total_bytes is not None
        if gpu.partitions:
            sizes = {p.mem_bytes for p in gpu.partitions}
            assert sizes == {gpu.vram_total_bytes // len(gpu.partitions)}, (pair, sizes)


def test_dpx_partitions_hold_half_the_hbm_each() -> None:
    gpu = SimBackend(partition="DPX").topology().gpus[0]
    assert gpu.vram_total_bytes is not None
    assert [p.mem_bytes for p in gpu.partitions] == [gpu.vram_total_bytes // 2] * 2
    cpx = SimBackend(partition="CPX/NPS4").topology().gpus[0]
    assert cpx.vram_total_bytes is not None
    assert {p.mem_bytes for p in cpx.partitions} == {cpx.vram_total_bytes // 8}  # 24 GB, not a quarter


@pytest.mark.parametrize("bad", ["SPX/NPS4", "DPX/NPS4", "CPX/NPS8", "NPS2/NPS8"])
def test_cli_refuses_with_one_line_naming_the_pairs(bad: str) -> None:
    cmd = [sys.executable, "-m", "amdtop", "topo", "--json", "--demo", "--demo-partition", bad]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("amdtop: error: argument --demo-partition: ") and out.stderr.count("\n") == 1
    assert VALID in out.stderr


def test_cli_dpx_snapshot_splits_the_hbm() -> None:
    cmd = [sys.executable, "-m", "amdtop", "snapshot", "--json", "--demo", "--demo-partition", "DPX"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
    gpu = json.loads(out.stdout)["gpus"][0]
    assert [p["mem_bytes"] for p in gpu["partitions"]] == [gpu["vram_total_bytes"] // 2] * 2
