"""The session-21 holdout's misses, fixed at their families (issue 48): each test reads a real public capture of the
failure corpus (its source is in the .toml beside the log) and, where the family has more forms than that capture
shows, lines built from the emitter's format strings (marked built). Every entry's source is in the catalog."""

from __future__ import annotations

from pathlib import Path

from amdtop.logread import read_head
from amdtop.logread.incidents.model import Incident
from amdtop.logread.rccl.files import parse_files
from tests.unit.corpus_read import CORPUS
from tests.unit.corpus_read import entry_of as _entry_of


def _incidents(path: Path) -> tuple[Incident, ...]:
    return parse_files([path]).incidents


# -- 1. NCCL lines without the host:pid:tid [dev] head ---------------------------------------------------------------
def test_bare_nccl_warn_is_read_without_its_head_nccl_902() -> None:
    (i,) = _incidents(CORPUS / "nccl" / "nccl_902_ib_completion_err12_vendor129.log")
    assert i.kind == "net_completion_error"
    assert i.hosts == () and i.ranks == () and i.devices == ()  # the line names none: none is guessed


def test_nccl_head_forms_strip_to_the_same_message() -> None:
    msg = "NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129"
    for line in (  # built: NCCL's ncclDebugLog heads (src/debug.cc) in front of one message
        f"NCCL WARN {msg}",
        f"net_ib.cc:1234 NCCL WARN {msg}",
        f"node1:123:456 [3] NCCL WARN {msg}",
        f"node1:123:456 [3] net_ib.cc:1234 NCCL WARN {msg}",
        f"[rank2]: NCCL WARN {msg}",
    ):
        assert read_head(line).text == msg, line
    assert read_head(f"node1:123:456 [3] NCCL WARN {msg}").dev == 3
    assert read_head(f"NCCL WARN {msg}").dev is None


# -- 2. aws-ofi-nccl resource creation ---------------------------------------------------------------------------------
def test_ofi_endpoint_creation_failure_is_an_init_failure_aws_ofi_nccl_889() -> None:
    (i,) = _incidents(CORPUS / "nccl" / "aws_ofi_nccl_889_endpoint_create_failed_title.log")
    assert i.kind == "comm_init_failed"
    assert "endpoint" in i.summary and "Invalid argument" in i.summary


def test_ofi_resource_family_from_ofiutils() -> None:
    for what in ("create fabric", "create domain", "allocate endpoint", "bind EP-CQ", "enable endpoint", "open AV"):
        # built from src/nccl_ofi_ofiutils.cpp's "Couldn't %s. RC: %d, ERROR: %s"
        line = f"host:1:2 [0] NCCL WARN NET/OFI Couldn't {what}. RC: -22, ERROR: Invalid argument"
        assert _entry_of(line) == "nccl.plugin.ofi_resource_failed", line


# -- 3. NVRM Xid lines whose PCI address was cut ---------------------------------------------------------------------
def test_xid_with_elided_pci_address_is_read_device_unknown_nccl_2241() -> None:
    from amdtop.logread.kernel.parser import parse_lines

    log = CORPUS / "nvidia" / "nccl_2241_xid145_xid137_nvlink_b200.log"
    events = parse_lines(log.read_text().splitlines())
    assert [e.xid for e in events] == [145, 137]
    assert all(e.bdf is None for e in events)  # the address is elided: stated unknown, never guessed
    incidents = _incidents(log)
    assert [i.kind for i in incidents] == ["xid", "xid"]
    assert "does not name" in incidents[0].summary and "145" in incidents[0].summary
    assert incidents[0].devices == ()


def test_xid_with_full_pci_address_still_names_it() -> None:
    from amdtop.logread.kernel.parser import parse_lines

    # built from the driver's "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ..." with and without the function
    (a,) = parse_lines(["NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."])
    (b,) = parse_lines(["NVRM: Xid (PCI:0000:3B:00.1): 13, Graphics Exception"])
    (c,) = parse_lines(["NVRM: Xid (PCI:<redacted>): 48, An uncorrectable double bit error"])
    assert (a.bdf, b.bdf, c.bdf) == ("0000:3b:00.0", "0000:3b:00.1", None)
    assert c.xid == 48


# -- 4. PyTorch's heartbeat monitor losing the TCPStore ----------------------------------------------------------------
def test_dump_flag_store_read_failure_is_peer_lost_on_rank_1_pytorch_128680() -> None:
    (i,) = _incidents(CORPUS / "pytorch" / "pytorch_128680_dump_flag_store_connection_reset.log")
    assert i.kind == "peer_lost"
    assert i.ranks == (1,)
    assert "Connection reset by peer" in i.summary
    assert "no first cause was printed" in i.cause  # a consequence: the store's host died first, unseen


def test_every_monitor_store_read_form_is_one_entry() -> None:
    for line in (  # built from ProcessGroupNCCL.cpp's heartbeat monitor strings, v2.3 .. HEAD
        "[rank1]:[E614 11:14:03.086670611 ProcessGroupNCCL.cpp:1319] [PG 0 Rank 1] Failed to get timeout rank ID "
        "from the global store.Connection reset by peer",
        "[rank3]:[W825 07:38:02.806977494 ProcessGroupNCCL.cpp:1662] [PG ID 0 PG GUID 0(default_pg) Rank 3] Failed to "
        'check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: '
        "failed to recv, got 0 bytes",
        "[PG ID 0 PG GUID 0 Rank 2] Failed to get timeout rank ID from TCPStore.Broken pipe",
        "[PG ID 0 PG GUID 0 Rank 2] Failed to check the signal remote_error:0 on TCPStore, Broken pipe",
    ):
        assert _entry_of(line) == "pytorch.heartbeat.store_read_failed", line


# -- 5. HIP's missing code object, every ROCm's form -----------------------------------------------------------------
def test_old_hip_no_binary_guarantee_is_a_startup_failure_tf_upstream_1106() -> None:
    (i,) = _incidents(CORPUS / "runtime" / "tf_upstream_1106_no_binary_for_gpu_title.log")
    assert i.kind == "startup_failed" and "hipErrorNoBinaryForGpu" in i.summary


def test_every_no_binary_form_is_one_entry() -> None:
    for line in (  # ROCm 3.x-4.0 guarantee (sic), ROCm 4.x DevLogError, ROCm 5+ LogPrintfError (built)
        '/src/external/hip-on-vdi/rocclr/hip_code_object.cpp:120: guarantee(false && "hipErrorNoBinaryForGpu: '
        "Coudn't find binary for current devices!\")",
        ":1:hip_code_object.cpp      :120 : 42 us: hipErrorNoBinaryForGpu: Coudn't find binary for current devices!",
        ":1:hip_fatbin.cpp           :456 : 42 us: hipErrorNoBinaryForGpu: Unable to find code object for all "
        "current devices!",
    ):
        assert _entry_of(line) == "runtime.hip.no_binary", line


# -- 6. SGLang's sigquit line, every version's spelling ----------------------------------------------------------------
def test_old_sigquit_spelling_is_the_engine_dying_sglang_3685() -> None:
    (i,) = _incidents(CORPUS / "serving" / "sglang_3685_sigquit_from_child_logging_error.log")
    assert i.kind == "engine_dead"


def test_both_sigquit_spellings_are_one_entry() -> None:
    for line in (  # sglang v0.4.x server.py (sic) and later engine.py, built from the logger.error strings
        "[2025-01-20 19:10:07] Received sigquit from a child proces. It usually means the child failed.",
        "[2026-04-15 07:45:17] Received sigquit from a child process. It usually means the child failed.",
    ):
        assert _entry_of(line) == "serving.sglang.sigquit", line


# -- 7. SGLang's scope head as printed ---------------------------------------------------------------------------------
def test_bare_sglang_tp_head_names_the_scope_and_rank_sglang_26265() -> None:
    (i,) = _incidents(CORPUS / "serving" / "sglang_26265_scheduler_exception_kv_pool_tp0.log")
    assert i.kind == "engine_dead"
    assert "TP0" in i.summary and i.ranks == (0,)


def test_dated_sglang_tp_head_names_the_scope_recall_43() -> None:
    (i,) = _incidents(CORPUS / "serving" / "recall_43_sglang_scheduler_exception_tp2.log")
    assert "TP2" in i.summary and i.ranks == (2,)


def test_sglang_head_forms() -> None:
    # built from configure_logger's "[%(asctime)s{prefix}] %(message)s", both datefmts, and the bare head
    dated = read_head("[2025-04-23 21:31:41 TP2] Scheduler hit an exception: Traceback (most recent call last):")
    short = read_head("[12-05 10:00:01 DP0 TP2 EP2] Scheduler hit an exception: Traceback (most recent call last):")
    bare = read_head("[TP0] Scheduler hit an exception: Traceback (most recent call last):")
    main = read_head("[12-05 10:00:01] Received sigquit from a child process. It usually means the child failed.")
    assert (dated.label, dated.rank, dated.time is not None) == ("TP2", 2, True)
    assert (short.label, short.rank, short.time is not None) == ("DP0 TP2 EP2", 2, True)
    assert (bare.label, bare.rank, bare.time) == ("TP0", 0, None)
    assert (main.label, main.rank, main.text[:8]) == (None, None, "Received")
    assert read_head("[1] not a scope").text == "[1] not a scope"


# -- 8. amdgpu init failures name the IP block and its code ------------------------------------------------------------
def test_ip_block_hw_init_failure_names_the_block_and_code_drm_kmod_211() -> None:
    (i,) = _incidents(CORPUS / "amdgpu" / "drm_kmod_211_uvd_hw_init_failed.log")
    assert i.kind == "gpu_init_failed"
    assert "hw_init of IP block <uvd_v6_0> failed -60" in i.summary
    assert "uvd_v6_0" in i.cause and "-60" in i.cause
    assert dict(i.detail)["ip_blocks"] == ("hw_init of IP block <uvd_v6_0> failed -60",)


def test_ip_block_family_entries() -> None:
    lines = {  # built from amdgpu_device.c's "%s of IP block <%s> failed %d\n" per phase
        "[drm:amdgpu_device_init [amdgpu]] *ERROR* sw_init of IP block <gmc_v8_0> failed -2": "amdgpu.init.ip_block",
        "amdgpu 0000:03:00.0: amdgpu: late_init of IP block <smu> failed -62": "amdgpu.init.ip_block",
        "[drm:amdgpu_device_fw_loading [amdgpu]] *ERROR* resume of IP block <psp> failed -62": (
            "amdgpu.reset.ip_block_resume_failed"
        ),
        "[drm:amdgpu_device_ip_suspend_phase2 [amdgpu]] *ERROR* suspend of IP block <smu> failed -62": (
            "amdgpu.reset.ip_block_suspend_failed"
        ),
    }
    for line, want in lines.items():
        assert _entry_of(line) == want, line


# -- 9. corrected PCIe errors, AER and APEI GHES -----------------------------------------------------------------------
def test_corrected_pcie_errors_name_each_port_rocm_2927() -> None:
    (i,) = _incidents(CORPUS / "amdgpu" / "rocm_2927_aer_corrected_root_port_mi100.log")
    assert i.kind == "correctable_errors"
    assert dict(i.detail)["devices"] == ("0000:00:01.1", "0000:20:03.1")
    assert "APEI GHES: root port" in i.summary and "AER: Data Link Layer, Receiver ID" in i.summary


def test_corrected_aer_beside_a_failed_init_coreboot_4() -> None:
    kinds = {i.kind: i for i in _incidents(CORPUS / "amdgpu" / "aer_corrected_then_mes_kiq_init_failed_coreboot_4.log")}
    assert set(kinds) == {"gpu_init_failed", "correctable_errors"}
    assert dict(kinds["correctable_errors"].detail)["devices"] == ("0000:01:00.0", "0000:00:01.0")
    assert dict(kinds["correctable_errors"].detail)["reports"] == (1, 1)  # "received from" + its own lines: one


def test_an_uncorrectable_cper_aer_report_is_not_counted() -> None:
    from amdtop.logread.kernel.pcie_corrected import CorrectedPcie

    c = CorrectedPcie()
    for line in (  # built from cper_print_aer's lines: aer_uncor_severity follows only an uncorrectable report
        "pcieport 0000:00:01.1: AER: aer_status: 0x00004000, aer_mask: 0x00000000",
        "pcieport 0000:00:01.1: AER: aer_layer=Transaction Layer, aer_agent=Requester ID",
        "pcieport 0000:00:01.1: AER: aer_uncor_severity: 0x00462030",
        "{7}[Hardware Error]: event severity: fatal",
        "{7}[Hardware Error]:  Error 0, type: fatal",
        "{7}[Hardware Error]:   section_type: PCIe error",
        "{7}[Hardware Error]:   device_id: 0000:20:03.1",
    ):
        c.feed(line)
    assert c.incident() is None
