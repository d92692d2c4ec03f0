"""Throttle reasons, violation counters and ECC from the NVML backend, replayed from real H200 captures.

``tests/fixtures/nvml/h200_health_replay.json`` was recorded on the lent H200 (driver 580.159.04) with
``python -m amdtop.telemetry.nvml_replay record --polls 11 --interval 1.0`` while a bf16 16384^3 matmul loop held the
GPU at its 700 W cap (bench/h200_health_run.sh); ``h200_health_idle_replay.json`` just before the load started.
NVLink counters are exercised on a synthetic two-GPU answer set (the lent machine has one GPU and no NVLink).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from amdtop.health.throttle import throttle_flags, throttle_shares
from amdtop.health.traffic import fabric_traffic
from amdtop.model import EccCount, FlagKind, NodeSnapshot
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.nvml import ECC_EVERY_POLLS, VIOLATION_EVERY_POLLS, NvmlBackend
from amdtop.telemetry.nvml_replay import ReplayNvml, load_fixture, materialize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"


def _polls(name: str, tmp_path: Path, n: int) -> tuple[list[NodeSnapshot], ReplayNvml]:
    fixture = load_fixture(FIXTURES / name)
    sysfs, proc = materialize(fixture, tmp_path)
    nv = ReplayNvml(fixture)
    backend = NvmlBackend(nv, BackendOptions(sysfs_root=sysfs, proc_root=proc))
    snaps = [backend.sample() for _ in range(n)]
    # Replay runs in microseconds: put the snapshots back 1 s apart, the recording's interval.
    return [dataclasses.replace(s, timestamp=1000.0 + k) for k, s in enumerate(snaps)], nv


def test_power_capped_h200_under_load(tmp_path: Path) -> None:
    snaps, _ = _polls("h200_health_replay.json", tmp_path, 11)
    s = snaps[-1].gpus[0]
    assert s.throttle_active == ("power_cap",)  # nvmlClocksEventReasonSwPowerCap, what nvidia-smi showed
    assert s.throttle_acc is not None and [r for r, _ in s.throttle_acc] == [
        "power_cap",
        "thermal",
        "board_limit",
        "reliability",
    ]
    assert s.ecc == (EccCount("total", 0, 0), EccCount("dram", 0, 0), EccCount("sram", 0, 0))
    assert s.xgmi_links is None  # one GPU, no NVLink
    (share,) = throttle_shares(snaps, 10.0)
    assert share.source == "counters"
    assert 0.95 <= dict(share.shares)["power_cap"] <= 1.0
    assert dict(share.shares)["thermal"] == 0.0
    (flag,) = throttle_flags(snaps, 10.0)
    assert flag.kind is FlagKind.GPU_THROTTLED and flag.gpus == (0,)
    assert flag.message.startswith("GPU 0 power-capped ") and flag.message.endswith("% of the last 10 s")


def test_idle_h200_is_not_throttled(tmp_path: Path) -> None:
    snaps, _ = _polls("h200_health_idle_replay.json", tmp_path, 3)
    assert snaps[-1].gpus[0].throttle_active == ("idle",)
    assert throttle_flags(snaps, 10.0) == []


def test_slow_counters_read_every_n_polls(tmp_path: Path) -> None:
    snaps, nv = _polls("h200_health_replay.json", tmp_path, 11)
    assert ECC_EVERY_POLLS == 10 and VIOLATION_EVERY_POLLS == 5
    assert nv.log.count("nvmlDeviceGetTotalEccErrors") == 2 * 2  # ce + ue, at polls 1 and 11
    # The perf-policy counters (~1 ms of CPU a read) at polls 1, 6 and 11; the reasons bitmask every poll.
    assert len({s.gpus[0].throttle_clock for s in snaps}) == 3
    assert nv.log.count("nvmlDeviceGetCurrentClocksEventReasons") == 11


def test_version1_capture_answers_not_supported_for_new_fields(tmp_path: Path) -> None:
    snaps, _ = _polls("h200_replay.json", tmp_path, 2)
    s = snaps[-1].gpus[0]
    assert (s.throttle_active, s.throttle_acc, s.ecc, s.xgmi_links) == (None, None, None, None)
    assert s.util_pct is not None


class _TwoGpuNvlink:
    """Synthetic NVML answers for two GPUs joined by two NVLinks (no capture of this exists here)."""

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

    NVML_NVLINK_MAX_LINKS = 4

    def __init__(self) -> None:
        self.kib = {0: 0, 1: 0}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml"):
            return lambda *a: self._unsupported()
        raise AttributeError(name)

    def _unsupported(self) -> Any:
        raise self.NVMLError(3)

    def nvmlInit(self) -> None:  # noqa: N802
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:  # noqa: N802
        return SimpleNamespace(busId=f"00000000:0{h + 1}:00.0")

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:  # noqa: N802
        if link >= 2:
            raise self.NVMLError(2)
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:  # noqa: N802
        return SimpleNamespace(busId=f"00000000:0{2 - h}:00.0")

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:  # noqa: N802
        return 0  # GPU

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[Any]) -> list[Any]:  # noqa: N802
        if not isinstance(ids[0], tuple):
            raise self.NVMLError(3)  # the perf-policy counters: not part of this answer set
        self.kib[h] += 1_000_000
        return [
            SimpleNamespace(
                fieldId=f, scopeId=link, nvmlReturn=0, value=SimpleNamespace(ullVal=self.kib[h] * (f - 137))
            )
            for f, link in ids
        ]


def test_nvlink_counters_become_pair_traffic(tmp_path: Path) -> None:
    nv = _TwoGpuNvlink()
    backend = NvmlBackend(nv, BackendOptions(sysfs_root=tmp_path, proc_root=tmp_path))
    a = backend.sample()
    b = dataclasses.replace(backend.sample(), timestamp=a.timestamp + 2.0)
    links = b.gpus[0].xgmi_links
    assert links is not None and [(c.link, c.peer_bdf) for c in links] == [(0, "0000:02:00.0"), (1, "0000:02:00.0")]
    t = fabric_traffic(a, b)
    assert t is not None
    p = t.pair(0, 1)
    # Per link per poll: RX grows 2e6 KiB, TX 1e6 KiB; two links over 2 s, KiB -> bytes.
    assert p is not None and p.read_bps == 2 * 2_000_000 * 1024 / 2 and p.write_bps == 2 * 1_000_000 * 1024 / 2
