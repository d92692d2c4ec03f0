"""The six logs of the second holdout (session 21) that the reader missed at first sight, read after their families
were added to the catalog from their emitters' sources: each test names what the log's own lines give (the device,
the address, the pid, the error's name) and checks the incident says it. The captures and their sources are in
tests/fixtures/failure_corpus/<family>/<slug>.{log,toml}."""

from __future__ import annotations

from tests.unit.corpus_read import entry_of as _entry_of
from tests.unit.corpus_read import incidents as _incidents
from tests.unit.corpus_read import kinds as _kinds


def test_nccl_cuda_oom_is_gpu_oom_on_its_device() -> None:
    inc = _incidents("nccl/enqueue_cuda_oom_v100_trtllm_1670.log")
    oom = [i for i in inc if i["kind"] == "gpu_oom"]
    assert len(oom) == 1, _kinds(inc)
    assert oom[0]["devices"] == [2]
    assert "out of memory" in oom[0]["summary"]
    # the OOM line is not read as a failed communicator init any more; the other CUDA failures still are
    assert _entry_of("h:1:2 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'") == "nccl.cuda_failure_oom"
    assert _entry_of("h:1:2 [0] NCCL WARN Cuda failure 2 'out of memory'") == "nccl.cuda_failure_oom"
    assert _entry_of("h:1:2 [2] enqueue.cc:54 NCCL WARN Cuda failure 'invalid resource handle'") == "nccl.cuda_failure"


def test_ray_actor_dead_with_creation_task_exception_is_worker_died() -> None:
    inc = _incidents("ray/actors_dead_creation_task_exception_ray_18586.log")
    assert _kinds(inc) == ["worker_died"]
    assert "creation_task_exception" in inc[0]["summary"]
    # ALIVE is no death
    assert _entry_of("received notification on actor, state: ALIVE, actor_id: c3dc, ip address: 10.0.0.1") is None


def test_ray_raylet_terminated_names_the_node_address() -> None:
    inc = _incidents("ray/raylet_terminated_unexpectedly_ray_45041.log")
    assert _kinds(inc) == ["worker_died"]
    assert "172.17.0.8" in inc[0]["summary"]
    # process_watcher.py logs the same head at INFO when raylet.out shows a SIGTERM: a shutdown, not a death
    assert _entry_of("2024-05-03 18:48:26,722\tINFO process_watcher.py:120 -- Raylet is terminated. Termination is graceful.") is None


def test_ray_old_worker_died_and_glog_sigsegv_keep_the_pid_and_ip() -> None:
    inc = _incidents("ray/worker_sigsegv_redis_async_ray_6103.log")
    assert sorted(_kinds(inc)) == ["worker_crashed", "worker_died"]
    crash = next(i for i in inc if i["kind"] == "worker_crashed")
    assert "SIGSEGV" in crash["summary"]
    assert "2417663" in crash["summary"] and "10.105.145.150" in crash["summary"]


def test_hip_error_invalid_device_function_any_case_is_startup_failed() -> None:
    inc = _incidents("runtime/hip_invalid_device_function_wx5100_rocm_5264.log")
    assert _kinds(inc) == ["startup_failed"]
    assert "Invalid device function" in inc[0]["summary"]
    assert _entry_of("RuntimeError: HIP error: invalid device function") == "runtime.torch.device_error_startup"
    assert _entry_of("RuntimeError: HIP error: hipErrorNoBinaryForGpu") == "runtime.torch.device_error_startup"


def test_vllm_no_kernel_image_names_the_cuda_error_then_the_dead_engine() -> None:
    inc = _incidents("serving/vllm_enginecore_no_kernel_image_gptoss_vllm_22414.log")
    assert _kinds(inc) == ["startup_failed"]
    assert "cudaErrorNoKernelImageForDevice" in inc[0]["summary"]
    assert "lost its engine" in inc[0]["summary"]  # AsyncLLM output_handler failed, joined as its consequence
    # a help line of another error is left to the 'CUDA error:' line before it
    assert _entry_of("Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/x.html for more") is None
