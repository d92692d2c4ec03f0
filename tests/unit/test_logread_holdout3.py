"""The logs of the third holdout (session 22, job families) that the reader missed at first sight, read after their
families were added to the catalog from the emitters' sources (NCCL's proxy.cc and socket.cc, ROCr's fault line,
Ray's memory monitor, hipRTC's findIsa, SGLang's health check, vLLM's worker monitor and ensure_divisibility) and
after the watchdog verdict stopped comparing SeqNums that may belong to several process groups. Each test names what
the log's own lines give and checks the incident says it, and no more. The captures and their sources are in
tests/fixtures/failure_corpus/<family>/<slug>.{log,toml}."""

from __future__ import annotations

from amdtop.logread.catalog import load_catalog
from amdtop.logread.match import Matcher
from tests.unit.corpus_read import entry_of as _entry_of
from tests.unit.corpus_read import incidents as _incidents
from tests.unit.corpus_read import kinds as _kinds


def test_socket_closed_by_remote_peer_without_the_peer_is_still_a_lost_peer() -> None:
    inc = _incidents("nccl/nccl_1486_socketprogress_closed_by_remote_peer_title.log")
    assert _kinds(inc) == ["peer_lost"]
    assert inc[0]["summary"] == "peer connection closed"  # no peer named: none is made up
    # the full line still names its peer
    line = "gpu004:1:2 [3] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer h<55693>"
    assert _entry_of(line) == "nccl.socket.closed_by_peer"


def test_proxy_poll_recv_failure_alone_is_a_failed_init_with_no_first_cause() -> None:
    inc = _incidents("nccl/rccl_1454_proxy_socket_recv_failed_p2p_setup.log")
    assert _kinds(inc) == ["comm_init_failed"]
    assert inc[0]["devices"] == [0]
    assert inc[0]["cause"].startswith("no first cause was printed")


def test_proxy_poll_recv_failure_after_a_closed_peer_joins_the_lost_peer() -> None:
    inc = _incidents("nccl/nccl_tests_166_socket_closed_by_remote_peer_during_init.log")
    assert _kinds(inc) == ["peer_lost"]
    assert inc[0]["devices"] == [3]
    assert "gpu004.ds-a4-r02.abc.com<55693>" in inc[0]["summary"]
    assert "proxy connection lost" in inc[0]["summary"]


def test_proxy_service_thread_and_fd_calls_are_read() -> None:
    assert _entry_of("h:1:2 [0] proxy.cc:1485 NCCL WARN [Service thread] Error encountered progressing operation=Connect, res=3, closing connection") == "nccl.proxy.service_thread"
    assert _entry_of("h:1:2 [0] NCCL WARN [Service thread] Could not receive type from localRank 0, res=3, closed=0") == "nccl.proxy.service_thread"
    assert _entry_of("h:1:2 [0] NCCL WARN ncclProxyClientGetFd call to tpRank 3 handle 0x6 failed : 3") == "nccl.proxy.fd_call_failed"
    # the numbered proxy service line keeps its own entry
    assert _entry_of("h:1:2 [0] NCCL WARN [Proxy Service 3] Failed to execute operation Connect from rank 3, retcode 3") == "nccl.proxy.service_failed"


def test_watchdog_lines_without_a_group_and_several_seqnums_per_rank_name_no_laggard() -> None:
    inc = _incidents("pytorch/watchdog_timeouts_several_seqnums_rank0_rank7_pytorch_118369.log")
    assert _kinds(inc) == ["collective_timeout"]
    assert inc[0]["ranks"] == [0, 7]
    assert inc[0]["laggard"] is None
    assert "no laggard can be named" in inc[0]["summary"]
    assert "laggard (" not in inc[0]["summary"]


def test_fault_line_with_a_redacted_agent_handle_is_a_memory_fault_on_its_node() -> None:
    inc = _incidents("runtime/hip_memory_access_fault_nil_title_rocm_5616.log")
    assert _kinds(inc) == ["gpu_memory_fault"]
    assert "GPU node-1" in inc[0]["summary"]  # as ROCr spells it
    assert "(nil)" in inc[0]["summary"]


def test_ray_memory_monitor_names_the_node_and_the_killed_pid_and_is_not_gpu_oom() -> None:
    for rel, ip, pid in (
        ("ray/ray_memory_monitor_killed_rayworkervllm_vllm_2669.log", "169.254.181.2", "308"),
        ("ray/ray_memory_monitor_killed_rayworkerwrapper_vllm_15102.log", "29.45.33.204", "13378"),
    ):
        inc = _incidents(rel)
        assert _kinds(inc) == ["worker_died"], rel
        assert inc[0]["hosts"] == [ip]
        assert f"pid {pid}" in inc[0]["summary"]
    # the newest spelling (Ray 2.4x: "N worker(s) were killed") keeps the node's IP too
    line = (
        "Error: 1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: 10.0.50.112, "
        "ID: 4cb2) was 28.62GB / 30.00GB (0.954017), which exceeds the memory usage threshold of 0.950000"
    )
    m = Matcher(load_catalog()).match(line)
    assert m is not None and m.entry.id == "ray.oom_killed" and m.field("host") == "10.0.50.112"


def test_sglang_health_check_failure_is_a_dead_engine_and_sigterm_is_no_incident() -> None:
    inc = _incidents("serving/sglang_detokenizer_health_check_failed_sigterm_sglang_22511.log")
    assert _kinds(inc) == ["engine_dead"]
    assert "detokenizer for 20 s, last heartbeat at 03:17:38" in inc[0]["summary"]
    assert _entry_of("[2026-04-27 03:20:18] SIGTERM received. signum=None frame=None. Draining requests and shutting down...") == "serving.sglang.sigterm"
    assert load_catalog().entries[[e.id for e in load_catalog().entries].index("serving.sglang.sigterm")].cls == "noise"


def test_hiprtc_without_a_runtime_is_a_start_up_failure() -> None:
    inc = _incidents("serving/vllm_enginecore_hip_runtime_failed_to_load_vllm_36167.log")
    assert _kinds(inc) == ["startup_failed"]
    assert "hip runtime failed to load" in inc[0]["summary"]
    assert "EngineCore_DP0" in inc[0]["summary"]
    assert _entry_of("ISA cannot be found from hip runtime.") == "runtime.hiprtc.no_isa"


def test_parallel_size_assertion_is_the_cause_and_the_terminated_worker_its_consequence() -> None:
    inc = _incidents("serving/vllm_tp3_not_divisible_then_worker_died_15_vllm_6145.log")
    assert _kinds(inc) == ["startup_failed"]
    assert "32768 is not divisible by 3" in inc[0]["summary"]
    assert inc[0]["ranks"] == [0]
    assert "vLLM worker process died" in inc[0]["summary"]  # joined, not a second verdict
    # alone, a worker that died is its own incident
    assert _entry_of("ERROR 07-13 02:56:30 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 7 died, exit code: -9") == "serving.vllm.mp_worker_died"


def test_dist_backend_wrapper_gives_way_to_its_last_error() -> None:
    # PyTorch's "NCCL error in: ..., internal error" only wraps NCCL's last error, printed under "Last error:"
    inc = _incidents("pytorch/dist_backend_internal_error_last_closed_by_peer_nccl_1514.log")
    assert _kinds(inc) == ["peer_lost"]
    assert "user<50260>" in inc[0]["summary"]
    assert "NCCL call failed" in inc[0]["summary"]  # the wrapper joined as a consequence
    assert not inc[0]["cause"].startswith("no first cause")


def test_actor_that_died_in_its_creation_task_names_the_actor_pid_and_node() -> None:
    inc = _incidents("ray/actor_died_creation_task_rocm_7900xtx_raylight_70.log")
    assert _kinds(inc) == ["worker_died"]
    assert "RayCOMMTester.__init__" in inc[0]["summary"]
    assert inc[0]["hosts"] == ["192.168.0.4"]
    assert "pid 15299" in inc[0]["summary"]
