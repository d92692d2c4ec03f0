"""The kernel-log parser on real lines from public reports (tests/fixtures/kernel/, source URL on each first line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.logread.kernel.events import FaultCause, Suspect
from amdtop.logread.kernel.parser import KernelLogParser, parse_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kernel"


def events(name: str):  # type: ignore[no-untyped-def]
    return parse_lines((FIXTURES / name).read_text().splitlines()[1:])  # line 1 names the source


def test_every_fixture_names_its_source() -> None:
    for path in FIXTURES.glob("*.log"):
        first = path.read_text().splitlines()[0]
        assert first.startswith(("# source: https://", "# source: captured on ", "# BUILT, not a capture")), path.name
        assert path.name.startswith("BUILT") == first.startswith("# BUILT"), path.name


def test_vm_fault_with_process_inline_two_faults_and_an_orphan_continuation() -> None:
    got = events("amdgpu_page_fault_rocm_amdgpu_150.log")
    # Three headers; the 8b lines whose header the report cut are continuation lines of nothing and add no fault.
    assert [(e.cause, e.bdf, e.pasid, e.pid, e.process, e.address) for e in got] == [
        (FaultCause.PAGE_FAULT, "0000:88:00.0", 32768, 846049, "ipython3", "0x00007fe99dff7000"),
        (FaultCause.PAGE_FAULT, "0000:88:00.0", 32768, 846049, "ipython3", "0x00007fe99dff8000"),
        (FaultCause.PAGE_FAULT, "0000:88:00.0", 32772, 856757, "python3", "0x0000000000000000"),
    ]
    assert got[0].detail == "mmhub0 client 0x12 (VMC)"
    assert got[0].suspect is Suspect.APPLICATION
    assert got[0].line.startswith("[282248.294764] amdgpu 0000:88:00.0: amdgpu: [mmhub0] no-retry page fault")


def test_vm_fault_with_process_on_the_next_line() -> None:
    got = events("amdgpu_page_fault_split_rocm_amdgpu_172.log")
    assert [(e.bdf, e.pasid, e.pid, e.process, e.thread, e.address) for e in got] == [
        ("0000:c6:00.0", 32769, 12924, "pt_main_thread", "pt_main_thread", "0x0000ae8570611000"),
        ("0000:c6:00.0", 32769, 12924, "pt_main_thread", "pt_main_thread", "0x0000ae8570612000"),
    ]


def test_vm_fault_newer_kernel_process_line() -> None:
    (e,) = events("amdgpu_page_fault_process_line_solus_7986.log")
    assert (e.cause, e.bdf, e.pasid, e.pid, e.process, e.address) == (
        FaultCause.PAGE_FAULT,
        "0000:0e:00.0",
        32791,
        15615,
        "python3",
        "0x00007febd6383000",
    )


def test_ring_timeout_then_reset() -> None:
    hang, reset = events("amdgpu_ring_timeout_reset_rocm_6273.log")
    assert (hang.cause, hang.bdf, hang.pid, hang.process, hang.thread) == (
        FaultCause.HANG,
        "0000:c5:00.0",
        1048641,
        "code",
        "code:cs0",
    )
    assert hang.detail == "ring gfx_0.0.0 timeout"
    assert (reset.cause, reset.bdf, reset.pid) == (FaultCause.RESET, "0000:c5:00.0", None)


def test_journal_timeout_without_device_takes_the_next_lines_device() -> None:
    hang, reset = events("amdgpu_ring_timeout_journal_picom_1390.log")
    assert (hang.cause, hang.bdf, hang.pid, hang.process) == (FaultCause.HANG, "0000:0c:00.0", 37593, "picom")
    assert hang.line.startswith("Nov 14 10:46:51 leviathan kernel: [drm:amdgpu_job_timedout [amdgpu]]")
    assert (reset.cause, reset.bdf) == (FaultCause.RESET, "0000:0c:00.0")


def test_uncorrectable_errors_are_hardware() -> None:
    (ue,) = events("amdgpu_uncorrectable_mi300x_rocm_4021.log")  # the ACA records of the other GPUs are not faults
    assert (ue.cause, ue.bdf, ue.detail, ue.suspect) == (
        FaultCause.UNCORRECTABLE,
        "0000:1c:00.0",
        "ERREVENT_ATHUB_INTERRUPT",
        Suspect.HARDWARE,
    )
    ue, reset = events("amdgpu_uncorrectable_reset_mi50_rocm_1886.log")
    assert [(e.cause, e.bdf) for e in (ue, reset)] == [
        (FaultCause.UNCORRECTABLE, "0000:e3:00.0"),
        (FaultCause.RESET, "0000:e3:00.0"),
    ]


def test_built_ras_lines_poison_count_and_the_all_clear() -> None:
    got = events("BUILT_amdgpu_ras_poison.log")
    # The correctable count and "no uncorrectable hardware errors" (the all-clear) are not faults.
    assert [(e.cause, e.bdf, e.detail) for e in got] == [
        (FaultCause.POISON, "0000:26:00.0", "RAS poison"),
        (FaultCause.UNCORRECTABLE, "0000:26:00.0", "2 uncorrectable errors in umc"),
    ]


def test_rocr_hang_and_memory_access_fault_name_the_kfd_node() -> None:
    got = events("rocr_hw_exception_rocm_5259.log")
    assert [(e.cause, e.kfd_node, e.detail) for e in got] == [(FaultCause.HANG, 4, "GPU Hang")] * 4
    maf, kernel = events("rocr_memory_access_fault_rocm_2804.log")
    assert (maf.cause, maf.kfd_node, maf.address) == (FaultCause.PAGE_FAULT, 2, "0x7feea09c5000")
    assert maf.detail == "Page not present or supervisor privilege."
    assert (kernel.bdf, kernel.pasid, kernel.pid, kernel.process) == ("0000:0b:00.0", 32770, 1796, "python")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "nvidia_xid31_chia_301.log",
            [
                (31, FaultCause.PAGE_FAULT, "0000:0a:00.0", 13332, "cuda_plot_k32_v"),
                (62, FaultCause.DRIVER, "0000:0a:00.0", None, None),
                (45, FaultCause.CLEANUP, "0000:0a:00.0", None, None),
            ],
        ),
        (
            "nvidia_xid_gpud_46.log",
            [
                (13, FaultCause.APP_EXCEPTION, "0000:cb:00.0", None, None),
                (13, FaultCause.APP_EXCEPTION, "0000:cb:00.0", None, None),
                (109, FaultCause.HANG, "0000:cb:00.0", 1797828, "pt_main_thread"),
            ],
        ),
        (
            "nvidia_xid62_154_forum.log",
            [(62, FaultCause.DRIVER, "0000:01:00.0", None, None), (154, FaultCause.RESET, "0000:01:00.0", None, None)],
        ),
        (
            "nvidia_xid45_after_nvlink_ogkm_1150.log",
            [
                (45, FaultCause.CLEANUP, "0000:dc:00.0", 1818990, "python3"),
                (45, FaultCause.CLEANUP, "0000:ed:00.0", 1818992, "python3"),
                (45, FaultCause.CLEANUP, "0000:ba:00.0", 1818989, "python3"),
                (45, FaultCause.CLEANUP, "0000:97:00.0", 1818987, "python3"),
            ],
        ),
    ],
)
def test_nvidia_xid_lines(name: str, expected: list[tuple[object, ...]]) -> None:
    assert [(e.xid, e.cause, e.bdf, e.pid, e.process) for e in events(name)] == expected


def test_fallen_off_the_bus_with_and_without_an_xid() -> None:
    multi, xid79 = events("nvidia_fallen_off_bus_nvsentinel_155.log")
    assert (multi.cause, multi.bdf, multi.xid) == (FaultCause.FALLEN_OFF_BUS, "0000:b3:00.0", None)
    assert (xid79.cause, xid79.bdf, xid79.xid, xid79.suspect) == (
        FaultCause.FALLEN_OFF_BUS,
        "0000:44:00.0",
        79,
        Suspect.HARDWARE,
    )


def test_kmsg_records_and_a_fault_split_across_feeds() -> None:
    parser = KernelLogParser()
    # /dev/kmsg messages carry no time prefix; the sources strip the "prio,seq,usec,flags;" header.
    assert (
        parser.feed("amdgpu 0000:c6:00.0: amdgpu: [gfxhub0] no-retry page fault (src_id:0 ring:24 vmid:3 pasid:32769)")
        == []
    )
    assert parser.feed("amdgpu 0000:c6:00.0: amdgpu:  for process python3 pid 77 thread python3 pid 78)") == []
    (e,) = parser.flush()
    assert (e.pid, e.thread, e.number) == (77, "python3", 1)
    assert parser.feed("x" * 100_000) == []  # a huge junk line is cut, not choked on


def test_a_kmsg_record_with_escaped_newlines_and_its_dictionary() -> None:
    from amdtop.logread.kernel.sources import kmsg_message

    # Built: the real multi-line report of NVIDIA/NVSentinel#155 as /dev/kmsg delivers one printk (newlines escaped,
    # the header before ';', the device dictionary after).
    lines = (FIXTURES / "nvidia_fallen_off_bus_nvsentinel_155.log").read_text().splitlines()[1:4]
    message = "\\x0a".join(line.split("] ", 1)[-1].strip() for line in lines)
    record = f"3,1187,1843308145,-;{message}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:b3:00.0\n"
    got = kmsg_message(record)
    # each line behind the record's time since boot, as dmesg prints it (the monitor dates faults by it)
    assert got == [
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "[ 1843.308145] NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "[ 1843.308145] NVRM: fallen off the bus and is not responding to commands.",
    ]
    (e,) = parse_lines(got)
    assert (e.cause, e.bdf) == (FaultCause.FALLEN_OFF_BUS, "0000:b3:00.0")
