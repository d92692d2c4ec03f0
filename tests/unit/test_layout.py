"""WorkerLayout / TpGroupLayout: vLLM's rank-to-device order (amdtop/layout.py cites vllm/v1/engine/utils.py)."""

from __future__ import annotations

from amdtop.layout import WorkerLayout, args_from_argv, global_ranks, layout_from_args, title_ranks
from amdtop.model import WorkerState, WorkerStatus


def test_dp2_tp4_on_eight_gpus_is_two_groups_of_four_dp_major() -> None:
    lay = layout_from_args({"data-parallel-size": 2}, 8)
    assert (lay.dp, lay.tp, lay.gpus_needed, lay.summary()) == (2, 4, 8, "DP2xTP4")
    groups = lay.groups("moe", (0, 1, 2, 3, 4, 5, 6, 7))
    assert [(g.dp_rank, g.gpus, g.first_rank, g.label) for g in groups] == [
        (0, (0, 1, 2, 3), 0, "moe"),
        (1, (4, 5, 6, 7), 4, "moe/dp1"),
    ]
    assert groups[0].suffixed == "moe/dp0"


def test_device_list_order_is_kept_not_sorted() -> None:
    # vLLM indexes the visible device list by position: a profile listing 7,6,5,4,3,2,1,0 gets DP0 on 7-4.
    groups = WorkerLayout(dp=2, tp=4).groups("w", (7, 6, 5, 4, 3, 2, 1, 0))
    assert [g.gpus for g in groups] == [(7, 6, 5, 4), (3, 2, 1, 0)]


def test_plain_tp_and_mismatched_lists_are_one_group() -> None:
    assert [g.gpus for g in WorkerLayout(tp=4).groups("w", (0, 1, 2, 3))] == [(0, 1, 2, 3)]
    # A discovered server whose devices are only partly known: one group of what is known, never a wrong split.
    assert [g.gpus for g in WorkerLayout(dp=2, tp=4).groups("w", (0, 1, 2))] == [(0, 1, 2)]
    assert WorkerLayout(dp=2, tp=4).groups("w", ()) == ()


def test_pipeline_stages_split_inside_a_replica() -> None:
    groups = WorkerLayout(dp=2, tp=2, pp=2).groups("w", tuple(range(8)))
    assert [(g.dp_rank, g.pp_rank, g.gpus) for g in groups] == [
        (0, 0, (0, 1)), (0, 1, (2, 3)), (1, 0, (4, 5)), (1, 1, (6, 7)),
    ]  # fmt: skip
    assert groups[1].label == "w/dp0.pp1"


def test_layout_from_args_flags_and_short_forms() -> None:
    lay = layout_from_args({"dp": "2", "tp": "2", "enable-expert-parallel": True, "api-server-count": 4}, 4)
    assert lay == WorkerLayout(dp=2, tp=2, pp=1, expert_parallel=True, api_servers=4)
    assert lay.summary() == "DP2xTP2+EP"
    assert layout_from_args({}, 0) == WorkerLayout()
    assert layout_from_args({}, 4).tp == 4


def test_args_from_argv_reads_every_spelling() -> None:
    argv = ("vllm", "serve", "/m", "-dp", "2", "--tensor-parallel-size=4", "--enable-expert-parallel", "--port", "8000")
    assert args_from_argv(argv) == {
        "data-parallel-size": "2",
        "tensor-parallel-size": "4",
        "enable-expert-parallel": True,
    }
    assert args_from_argv(("vllm", "serve", "/m", "--api_server_count", "3")) == {"api-server-count": "3"}


def test_title_ranks_and_global_ranks() -> None:
    assert title_ranks("VLLM::Worker_DP1_TP3") == {"DP": 1, "TP": 3}
    assert title_ranks("VLLM::Worker") == {}
    assert title_ranks("VLLM::EngineCore_DP0") is None
    titled = {11: {"DP": 0, "TP": 0}, 12: {"DP": 0, "TP": 1}, 21: {"DP": 1, "TP": 0}, 22: {"DP": 1, "TP": 1}}
    assert global_ranks(titled) == [(0, 11), (1, 12), (2, 21), (3, 22)]
    # With the layout known, a dead highest rank does not shift the others.
    assert global_ranks({21: {"DP": 1, "TP": 0}}, WorkerLayout(dp=2, tp=4)) == [(4, 21)]


def test_worker_status_tp_groups_default_to_one_group() -> None:
    w = WorkerStatus("w", WorkerState.READY, (0, 1))
    assert [g.gpus for g in w.tp_groups()] == [(0, 1)]


def test_busy_when_idle_only_for_expert_parallel_replicas() -> None:
    assert WorkerLayout(dp=2, tp=4, expert_parallel=True).busy_when_idle
    assert not WorkerLayout(dp=2, tp=4).busy_when_idle
    assert not WorkerLayout(tp=8, expert_parallel=True).busy_when_idle
