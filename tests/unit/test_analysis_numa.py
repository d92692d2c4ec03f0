"""numa_flags against fake procfs trees and the simulated MI300X topology."""

from __future__ import annotations

from pathlib import Path

from amdtop.analysis import numa_flags, topology_group_flags, worker_binding
from amdtop.model import FlagKind, WorkerState, WorkerStatus
from amdtop.telemetry.sim import SimBackend

TOPO = SimBackend(scenario="mi300x-8").topology()  # node 0: CPUs 0-31,64-95, GPUs 0-3; node 1: the rest
PCIE = SimBackend(scenario="pcie-4").topology()


def fake_proc(root: Path, pid: int, cpus: str, mems: str) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\nPid:\t{pid}\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t{mems}\n")


def balancing(root: Path, value: str) -> None:
    (root / "sys" / "kernel").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "kernel" / "numa_balancing").write_text(value + "\n")


def worker(pids: tuple[int, ...], gpus: tuple[int, ...] = (0, 1, 2, 3), **kw: object) -> WorkerStatus:
    return WorkerStatus("w", WorkerState.READY, gpus, pids=pids, **kw)  # type: ignore[arg-type]


def test_pinned_to_gpu_node_is_clean(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, "0-31,64-95", "0")
    fake_proc(tmp_path, 11, "0-7", "0")
    balancing(tmp_path, "0")
    assert numa_flags(TOPO, [worker((10, 11))], tmp_path) == []


def test_one_process_off_node_is_a_mismatch(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, "0-31", "0")
    fake_proc(tmp_path, 11, "32-40", "0")  # an EngineCore re-pinned to the other socket
    flags = numa_flags(TOPO, [worker((10, 11))], tmp_path)
    assert [f.kind for f in flags] == [FlagKind.NUMA_MISMATCH]
    assert "32-40" in flags[0].message and flags[0].worker == "w"


def test_memory_allowed_off_node_is_a_mismatch(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, "0-31", "0-1")
    flags = numa_flags(TOPO, [worker((10,))], tmp_path)
    assert len(flags) == 1 and "allocate on node(s) 1" in flags[0].message


def test_unpinned_worker_on_two_node_host_is_flagged(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, "0-127", "0-1")
    flags = numa_flags(TOPO, [worker((10,))], tmp_path)
    assert len(flags) == 1 and "unpinned" in flags[0].message


def test_per_rank_binding_checked_against_each_rank_gpu(tmp_path: Path) -> None:
    # TP across both nodes with per-rank binding (vLLM --numa-bind): rank 1 on GPU 4 must sit on node 1.
    fake_proc(tmp_path, 20, "0-31", "0")
    fake_proc(tmp_path, 21, "0-31", "0")
    w = WorkerStatus("t", WorkerState.READY, (0, 4), pids=(20, 21), rank_pids=((0, 20), (1, 21)))
    flags = numa_flags(TOPO, [w], tmp_path)
    assert len(flags) == 1 and "TP rank 1" in flags[0].message


def test_falls_back_to_reported_fields_and_warns_on_balancing(tmp_path: Path) -> None:
    balancing(tmp_path, "1")
    w = worker((), cpu_affinity=tuple(range(32, 64)), mems_allowed=(1,))
    flags = numa_flags(TOPO, [w], tmp_path)
    assert sorted(f.kind.value for f in flags) == ["numa_balancing", "numa_mismatch"]
    assert worker_binding(w, tmp_path).from_procfs is False


def test_group_spanning_pcie_and_two_nodes_is_warned() -> None:
    w = WorkerStatus("p", WorkerState.READY, (1, 2))
    reasons = {g.reason for g in topology_group_flags(PCIE, [w])}
    assert reasons == {"non_direct_link", "spans_numa_nodes"}
    assert topology_group_flags(TOPO, [WorkerStatus("x", WorkerState.READY, (0, 1, 2, 3))]) == []


def test_placement_warnings_become_tp_placement_flags_in_json() -> None:
    from amdtop.analysis import tp_placement_flags
    from amdtop.report import flag_json

    flags = tp_placement_flags(PCIE, [WorkerStatus("p", WorkerState.READY, (1, 2))])
    docs = sorted((flag_json(f) for f in flags), key=lambda d: d["reason"])
    assert [d["kind"] for d in docs] == ["tp_placement", "tp_placement"]
    assert [d["reason"] for d in docs] == ["non_direct_link", "spans_numa_nodes"]
    assert all(d["worker"] == "p" and d["gpus"] == [1, 2] for d in docs)
    # The same group on the all-XGMI node inside one NUMA node raises nothing.
    assert tp_placement_flags(TOPO, [WorkerStatus("x", WorkerState.READY, (0, 1))]) == []


def test_simulated_demo_worker_is_judged_by_its_reported_binding(tmp_path: Path) -> None:
    # The process really runs on this host's node 0, but it stands for a worker of the simulated node 1.
    fake_proc(tmp_path, 300, "0-1", "0")
    node1 = TOPO.numa_nodes[1].cpus
    demo = worker((300,), gpus=(4, 5), cpu_affinity=node1, mems_allowed=(1,), simulated=True)
    assert numa_flags(TOPO, [demo], tmp_path) == []
    real = worker((300,), gpus=(4, 5), cpu_affinity=node1, mems_allowed=(1,))
    assert [f.kind for f in numa_flags(TOPO, [real], tmp_path)] == [FlagKind.NUMA_MISMATCH]
