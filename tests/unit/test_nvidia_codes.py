"""NVIDIA's Xid and NVSwitch SXid codes as data (catalog/nvidia.toml [xid_catalog], [sxid_catalog]): every documented
code has a row, and the kernel reader's verdicts name a code and its fix from that row.

The code lists below are typed from the documents, independently of the TOML: NVIDIA's Xid catalog
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Table 1: codes 1 to 172) and the Fabric Manager user
guide DU-09883-001_v1.3, appendix D.4-D.7 (the SXids below)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.logread.kernel.events import FaultCause
from amdtop.logread.kernel.incidents import KernelVerdicts
from amdtop.logread.kernel.monitor import KernelFaultMonitor
from amdtop.logread.kernel.xid import CHANNEL_XIDS, xid_cause, xid_fix
from amdtop.logread.nvidia_codes import nvidia_codes, parse_codes
from amdtop.model import Topology
from amdtop.telemetry.base import BackendOptions
from amdtop.telemetry.sysfs import open_backend
from tests.fixtures.sysfs_tree import build_mi300x_8

DOC_XIDS = set(range(1, 173))
DOC_SXIDS = {
    # D.4 non-fatal
    11004, 11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057, 19059, 19062, 19065, 19068,
    19071, 24001, 24002, 24003, 20001, 12028, 19084, 20012, 22013,
    # D.5 fatal
    11001, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12022, 12024, 12025, 12026, 12027, 12030, 12031, 12032,
    14017, 15001, 15006, 15009, 15010, 15012, 15013, 19047, 19048, 19054, 19056, 19058, 19060, 19061, 19063, 19064,
    19066, 19067, 19069, 19070, 20034, 22012, 24004, 24005, 24006, 24007,
    # D.6 always fatal
    12020, 22003, 22011, *range(23001, 23018),
    # D.7 other notable
    10001, 10002, 10003, 10004, 10005,
}  # fmt: skip


def test_every_documented_xid_has_a_row_with_a_cause_a_class_and_a_fix() -> None:
    codes = nvidia_codes()
    assert set(codes.xid) == DOC_XIDS
    assert "docs.nvidia.com/deploy/xid-errors" in codes.xid_source
    for x in codes.xid.values():
        FaultCause(x.cause)  # a value the kernel reader knows
        assert x.cls in ("cause", "consequence", "noise")
        assert x.name and x.mnemonic and x.fix, x
    # the doc's own words for a few codes
    assert codes.xid[79].mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert codes.xid[79].immediate == "RESTART_BM" and "reboot the node" in codes.xid[79].fix
    assert codes.xid[95].immediate == "RESET_GPU"
    assert codes.xid[56].unused and not codes.xid[48].unused


def test_every_documented_sxid_has_a_row_with_its_section_impact_and_recovery() -> None:
    codes = nvidia_codes()
    assert set(codes.sxid) == DOC_SXIDS
    assert "fabric-manager-user-guide" in codes.sxid_source
    assert codes.sxid[24007].family == "fatal" and codes.sxid[24007].name == "sourcetrack timeout error"
    assert codes.sxid[22013].family == "non_fatal" and codes.sxid[22013].cls == "noise"
    assert codes.sxid[23001].family == "always_fatal" and "restart the host" in codes.sxid[23001].recovery
    assert all(s.impact and s.recovery for s in codes.sxid.values())


def test_the_kernel_reader_takes_names_causes_and_channel_xids_from_the_table() -> None:
    assert xid_cause(46) == (FaultCause.HANG, "GPU stopped processing")
    assert xid_cause(140) == (FaultCause.UNCORRECTABLE, "unrecovered ECC error")
    assert xid_cause(13) == (FaultCause.APP_EXCEPTION, "graphics engine exception")
    assert xid_cause(9999) == (FaultCause.DRIVER, "Xid 9999")  # newer than the catalog: named by number
    assert xid_fix(9999) is None
    assert {13, 31, 32, 43, 45, 68, 69, 94, 95, 109} == CHANNEL_XIDS


def test_a_bucket_the_table_does_not_spell_out_is_refused_naming_the_row() -> None:
    text = (
        '[xid_catalog]\nsource = "s"\nrows = [{ code = 8, cause = "hang", class = "cause", name = "n", '
        'mnemonic = "M", description = "d", immediate = "REBOOT_MOON" }]\n[xid_catalog.buckets]\n'
        '[sxid_catalog]\nsource = "s"\nrows = []\n'
    )
    with pytest.raises(InputError, match=r"row 8 names bucket 'REBOOT_MOON'"):
        parse_codes(text)


# Xid lines BUILT from kernel_rc.c krcReportXid's format ("NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s"):
# codes no fixture here shows; the verdict's words must be the table's.
XID46 = "[  812.1] NVRM: Xid (PCI:0000:18:00): 46, pid=2231, name=python3, Ch 00000008"
XID140 = "[  813.5] NVRM: Xid (PCI:0000:18:00): 140, pid='<unknown>', name=<unknown>, Unrecovered ECC error"


@pytest.fixture(scope="module")
def topology(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    tree = build_mi300x_8(tmp_path_factory.mktemp("mi300x"))
    return open_backend(BackendOptions(sysfs_root=tree.root)).topology()


@pytest.mark.parametrize("line,code", [(XID46, 46), (XID140, 140)])
def test_a_flag_for_an_xid_gives_the_tables_name_and_fix(
    line: str, code: int, tmp_path: Path, topology: Topology
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(line + "\n")
    mon = KernelFaultMonitor(log, worker_logs=False)
    try:
        flags = mon.poll(topology).flags
    finally:
        mon.close()
    (flag,) = [f for f in flags if dict(f.extra).get("xid") == code]
    row = nvidia_codes().xid[code]
    assert row.fix in flag.message
    assert row.name.lower() in flag.message.lower() or FaultCause(row.cause).value in dict(flag.extra)["cause"]


def test_an_xid_45_chain_gives_the_named_xids_fix_from_the_table() -> None:
    v = KernelVerdicts()
    v.feed("[  900.0] NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 95")
    (chain,) = [i for i in v.incidents(lambda _b: (None, ())) if i.kind == "xid_chain"]
    assert "Xid 95 (uncontained ECC error)" in chain.summary
    assert nvidia_codes().xid[95].fix in chain.fix


def test_an_sxid_incident_gives_the_guides_name_impact_and_recovery() -> None:
    # the SXid line is the capture quoted in nvidia.toml's nvidia.sxid.any entry (gpud#338)
    v = KernelVerdicts()
    v.feed(
        "[ 1234.5] nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, 0x00000500, "
        "0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, 0x00000000}"
    )
    (inc,) = [i for i in v.incidents(lambda _b: (None, ())) if i.kind == "nvswitch_error"]
    row = nvidia_codes().sxid[12028]
    assert "egress nonposted PRIV error" in inc.summary
    assert row.impact in inc.cause and row.recovery in inc.fix
