"""SGLang workers: profiles with ``engine = "sglang"``, their argv, scheduler titles, and discovery of hand-started ones.

The command lines are real ones quoted in SGLang's issue tracker (named at each use); the process titles are the ones
SGLang's source sets (sglang 0.5.23 ``srt/managers/scheduler.py``: ``sglang::scheduler`` + ``_DP<d>``, ``_PP<p>``,
``_TP<t>``, ``_EP<e>``; ``detokenizer_manager.py``: ``sglang::detokenizer``); the trees around them are built.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from amdtop.analysis import discover_vllm
from amdtop.errors import InputError
from amdtop.layout import WorkerLayout
from amdtop.sglang_procs import args_from_argv, global_ranks, is_sglang_argv, layout_from_args, scheduler_ranks
from amdtop.supervisor.launchspec import build_argv, build_env, tracks_load
from amdtop.supervisor.profiles import Profile, parse_document, profiles_from_document, resolve_numa, validate_profiles
from amdtop.telemetry.sim import SimBackend

TOPO = SimBackend().topology()  # GPUs 0-3 on NUMA node 0, 4-7 on node 1

# https://github.com/sgl-project/sglang/issues/9799 (TP=2) and #6555 (DP attention over TP=8)
TP2_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "./q14", "--port", "8080", "--host", "0.0.0.0",
            "--tool-call-parser", "qwen25", "--tp", "2"]  # fmt: skip
DPA_ARGV = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/DeepSeek-R1", "--served-model-name",
            "DeepSeek-R1", "--host", "0.0.0.0", "--port", "8000", "--trust-remote-code", "--context-length", "131072",
            "--tp", "8", "--attention-backend", "fa3", "--mem-fraction-static", "0.9", "--enable-dp-attention",
            "--dp-size", "2", "--enable-metrics", "--reasoning-parser", "deepseek-r1"]  # fmt: skip


def parse(text: str) -> list[Profile]:
    return profiles_from_document(parse_document(text))


def sglang_worker(gpus: str = "[0, 1]", args: str = "", extra: str = "") -> str:
    return f'[[worker]]\nname = "sg"\nengine = "sglang"\nmodel = "/m"\ngpus = {gpus}\nport = 30000\n{extra}' + (
        f"[worker.args]\n{args}" if args else ""
    )


def test_sglang_profile_launches_launch_server_with_metrics_and_tp() -> None:
    [p] = parse(sglang_worker(args="mem-fraction-static = 0.85\nchunked-prefill-size = 4096\n"))
    assert p.engine == "sglang" and p.command == ("python3", "-m", "sglang.launch_server") and p.tp_size == 2
    assert build_argv(p, 0) == [
        "numactl", "--cpunodebind=0", "--membind=0",
        "python3", "-m", "sglang.launch_server", "--model-path", "/m", "--tp-size", "2", "--port", "30000",
        "--host", "127.0.0.1", "--enable-metrics", "--mem-fraction-static", "0.85", "--chunked-prefill-size", "4096",
    ]  # fmt: skip
    assert not tracks_load(p)  # no --enable-server-load-tracking: vLLM's flag
    [v] = parse(sglang_worker().replace('engine = "sglang"\n', ""))
    assert v.engine == "vllm" and v.command == ("vllm", "serve")


def test_sglang_api_key_stays_in_argv_and_out_of_the_env() -> None:
    # SGLang reads its key only from --api-key (srt/arg_groups/fields/serving.py); VLLM_API_KEY would do nothing.
    [p] = parse(sglang_worker(args='api-key = "sekrit"\n'))
    assert build_argv(p, None)[-2:] == ["--api-key", "sekrit"]
    assert "VLLM_API_KEY" not in build_env(p, {}, vendor="AMD", marker="m")


def test_sglang_own_numa_flag_replaces_numactl() -> None:
    [p] = parse(sglang_worker(gpus="[3, 4]", args="numa-node = [0, 1]\n"))
    assert resolve_numa(p, TOPO) is None  # GPUs span nodes 0 and 1, but SGLang pins each rank itself
    assert build_argv(p, None)[:3] == ["python3", "-m", "sglang.launch_server"]


@pytest.mark.parametrize(
    ("gpus", "args", "message"),
    [
        ("[0, 1]", "tp-size = 4\n", "worker[sg].args.tp-size: TP4 needs 4 GPUs but the profile lists 2; use dp-size x "
         "pp-size x tp-size = 2 (with DP attention: tp-size = 2)"),
        ("[0, 1, 2, 3]", "dp-size = 3\ntp-size = 2\n",
         "worker[sg].args.tp-size: DP3xTP2 needs 6 GPUs but the profile lists 4; use dp-size x pp-size x tp-size = 4 "
         "(with DP attention: tp-size = 4)"),
        ("[0, 1]", "tp-size = 0\n", "worker[sg].args.tp-size: 0 is not a positive integer; e.g. tp-size=2"),
        ("[0, 1]", 'model-path = "/x"\n', "worker[sg].args.model-path: set by amdtop from the worker's model; drop it from "
         "[worker.args]"),
        ("[0, 1, 2, 3]", "tp-size = 4\ndp-size = 3\nenable-dp-attention = true\n",
         "worker[sg].args.dp-size: DP attention of 3 does not divide tp-size 4; use a dp-size that divides 4"),
    ],
)  # fmt: skip
def test_sglang_parallel_flags_are_checked_when_read(gpus: str, args: str, message: str) -> None:
    with pytest.raises(InputError) as exc:
        validate_profiles(parse(sglang_worker(gpus=gpus, args=args)), TOPO)
    assert str(exc.value) == message


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(
        InputError, match=r'worker\[sg\]\.engine: \'trt\' is not an engine amdtop launches; use "vllm" or'
    ):
        parse(sglang_worker().replace('"sglang"', '"trt"'))


def test_dp_attention_is_one_tp_group_and_replicas_are_several() -> None:
    [p] = parse(
        sglang_worker(
            gpus="[0, 1, 2, 3, 4, 5, 6, 7]",
            args="tp-size = 8\ndp-size = 2\nenable-dp-attention = true\n",
            extra='numa_node = "none"\n',
        )
    )
    assert p.layout == WorkerLayout(dp=1, tp=8)
    validate_profiles([p], TOPO)
    [q] = parse(sglang_worker(gpus="[0, 1, 2, 3]", args="dp-size = 2\n"))
    assert q.layout == WorkerLayout(dp=2, tp=2)


def test_scheduler_titles() -> None:
    assert scheduler_ranks("sglang::scheduler") == {}
    assert scheduler_ranks("sglang::scheduler_TP1") == {"TP": 1}
    assert scheduler_ranks("sglang::scheduler_DP1_TP5_EP5") == {"DP": 1, "TP": 5, "EP": 5}
    assert scheduler_ranks("sglang::scheduler_DP0_PP1_MOE_DP1_TP0") == {"DP": 0, "PP": 1, "MOE_DP": 1, "TP": 0}
    assert scheduler_ranks("sglang::detokenizer") is None and scheduler_ranks("VLLM::Worker_TP0") is None
    assert scheduler_ranks("sglang::schedulerx") is None


def test_ranks_of_replicas_and_of_dp_attention() -> None:
    replicas = {10: {"DP": 0, "TP": 0}, 11: {"DP": 0, "TP": 1}, 12: {"DP": 1, "TP": 0}, 13: {"DP": 1, "TP": 1}}
    assert global_ranks(replicas, WorkerLayout(dp=2, tp=2)) == [(0, 10), (1, 11), (2, 12), (3, 13)]
    # DP attention: the TP rank in the title is global already (log prefixes "DP0 TP3", sgl-project/sglang#6555)
    attn = {20 + t: {"DP": t // 4, "TP": t} for t in range(8)}
    assert global_ranks(attn, WorkerLayout(tp=8)) == [(t, 20 + t) for t in range(8)]


def test_command_lines() -> None:
    assert is_sglang_argv(TP2_ARGV) and is_sglang_argv(["sglang", "serve", "--model-path", "m"])
    assert not is_sglang_argv(["vllm", "serve", "m"]) and not is_sglang_argv([])
    args = args_from_argv(DPA_ARGV)
    assert args["tp-size"] == "8" and args["dp-size"] == "2" and args["enable-dp-attention"] is True
    assert layout_from_args(args, 8) == WorkerLayout(dp=1, tp=8)
    assert layout_from_args(args_from_argv(TP2_ARGV), 2) == WorkerLayout(tp=2)


def proc(root: Path, pid: int, ppid: int, argv: list[str], env: dict[str, str] | None = None) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    comm = Path(argv[0]).name[:15]
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 1000 0 0\n")
    (d / "status").write_text(f"Name:\t{comm}\nCpus_allowed_list:\t0-1\nMems_allowed_list:\t0\n")
    (d / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in (env or {}).items()))


def test_hand_started_tp2_server_is_discovered(tmp_path: Path) -> None:
    proc(tmp_path, 1, 0, ["/sbin/init"])
    proc(tmp_path, 101769, 1, TP2_ARGV, {"HIP_VISIBLE_DEVICES": "4,5"})
    proc(tmp_path, 101870, 101769, ["sglang::scheduler_TP0"])
    proc(tmp_path, 101871, 101769, ["sglang::scheduler_TP1"])
    proc(tmp_path, 101872, 101769, ["sglang::detokenizer"])
    [w] = discover_vllm(tmp_path)
    assert w.name == "sglang-101769" and w.engine_kind == "sglang" and w.source == "discovered"
    assert w.port == 8080 and w.url == "http://127.0.0.1:8080"
    assert w.gpus == (4, 5) and w.rank_pids == ((0, 101870), (1, 101871))
    assert w.pids == (101769, 101872, 101870, 101871)


def test_hand_started_dp_attention_server_is_one_tp_group_of_eight(tmp_path: Path) -> None:
    proc(tmp_path, 1, 0, ["/sbin/init"])
    proc(tmp_path, 500, 1, DPA_ARGV)
    proc(tmp_path, 501, 500, ["sglang::data_parallel_controller"])
    for t in range(8):
        proc(tmp_path, 510 + t, 501, [f"sglang::scheduler_DP{t // 4}_TP{t}"])
    proc(tmp_path, 520, 500, ["sglang::detokenizer"])
    proc(tmp_path, 600, 1, ["VLLM::EngineCore"])  # a vLLM engine beside it is not SGLang's
    found = [w for w in discover_vllm(tmp_path) if w.engine_kind == "sglang"]
    [w] = found
    assert w.gpus == tuple(range(8)) and [r for r, _ in w.rank_pids] == list(range(8))
    assert w.layout == WorkerLayout(dp=1, tp=8, expert_parallel=False) or w.layout is None
    assert w.port == 8000 and 501 in w.pids and 520 in w.pids


def test_readiness_asks_model_info_then_the_older_route() -> None:
    from amdtop.supervisor.observe import sglang_ready

    class Prober:
        def __init__(self, answers: dict[str, int | None]) -> None:
            self.answers, self.asked = answers, []  # type: list[str]

        def status(self, url: str, path: str) -> int | None:
            self.asked.append(path)
            return self.answers.get(path)

    new = Prober({"/model_info": 200})
    assert sglang_ready(new, "u") == 200 and new.asked == ["/model_info"]  # type: ignore[arg-type]
    old = Prober({"/model_info": 404, "/get_model_info": 200})
    assert sglang_ready(old, "u") == 200 and old.asked == ["/model_info", "/get_model_info"]  # type: ignore[arg-type]
    down = Prober({})
    assert sglang_ready(down, "u") is None  # type: ignore[arg-type]


def test_retune_takes_sglang_keys_for_sglang_workers_only() -> None:
    from amdtop.supervisor.retune import apply_changes, retune_words

    doc = parse_document(
        sglang_worker(args="mem-fraction-static = 0.85\n")
        + '\n[[worker]]\nname = "v"\nmodel = "m"\ngpus = [2]\nport = 18002\n'
    )
    changed = apply_changes(doc, "sg", {"mem-fraction-static": "0.8", "max_running_requests": "128",
                                        "chunked-prefill-size": "-1", "cuda-graph-max-bs": "64"})  # fmt: skip
    assert changed == [("mem-fraction-static", 0.85, 0.8), ("max-running-requests", None, 128),
                       ("chunked-prefill-size", None, -1), ("cuda-graph-max-bs", None, 64)]  # fmt: skip
    [p, _] = profiles_from_document(doc)
    assert "mem-fraction-static=0.8" in retune_words(p) and "max-running-requests=128" in retune_words(p)
    with pytest.raises(InputError) as exc:
        apply_changes(doc, "sg", {"max-num-seqs": "64"})
    assert str(exc.value) == (
        "worker[sg].max-num-seqs: not a flag of sglang, which this worker runs (its nearest: max-running-requests); "
        "use one of mem-fraction-static, max-running-requests, chunked-prefill-size, cuda-graph-max-bs, numa_node, "
        "env.NAME"
    )
    with pytest.raises(InputError, match=r"worker\[v\]\.mem-fraction-static: not a flag of vllm"):
        apply_changes(doc, "v", {"mem-fraction-static": "0.8"})
    for change, message in (
        ({"mem-fraction-static": "1.5"}, "worker[sg].args.mem-fraction-static: 1.5 is outside (0, 1]; e.g. "
                                         "mem-fraction-static=0.9"),
        ({"chunked-prefill-size": "0"}, "worker[sg].args.chunked-prefill-size: 0 is not a chunk size; give a token "
                                        "count (e.g. 8192) or -1 to disable it"),
        ({"max-running-requests": "0"}, "worker[sg].args.max-running-requests: 0 is outside 1..65536; e.g. "
                                        "max-running-requests=64"),
    ):  # fmt: skip
        with pytest.raises(InputError) as exc:
            apply_changes(doc, "sg", change)
        assert str(exc.value) == message
    with pytest.raises(InputError, match=r"mem-fraction-static: 2\.0 is outside"):
        parse(sglang_worker(args="mem-fraction-static = 2.0\n"))  # the same rule when the file loads


def test_attention_heads_split_over_the_attention_tp_of_dp_attention(tmp_path: Path) -> None:
    # Built config.json: 12 heads do not divide over TP 8, but do over DP attention's 8 / 2 = 4 ranks per DP group.
    (tmp_path / "config.json").write_text('{"num_attention_heads": 12}')

    def text(args: str) -> str:
        return sglang_worker("[0, 1, 2, 3, 4, 5, 6, 7]", args, 'numa_node = "none"\n').replace('"/m"', f'"{tmp_path}"')

    validate_profiles(parse(text("tp-size = 8\ndp-size = 2\nenable-dp-attention = true\n")), TOPO)
    with pytest.raises(InputError, match="tensor-parallel size 8 does not divide the model's 12 attention heads"):
        validate_profiles(parse(text("tp-size = 8\n")), TOPO)


@pytest.mark.parametrize(
    ("log", "line"),
    [
        ("sglang-0.5.23-cpu-no-vllm.log", "ModuleNotFoundError: No module named 'vllm'"),
        ("sglang-0.5.23-cpu-engine-no-sgl-kernel.log", "- ModuleNotFoundError: No module named 'common_ops'"),
    ],
)
def test_real_sglang_crash_logs_give_their_error_line(log: str, line: str) -> None:
    # Real SGLang 0.5.23 failing to start on this repo's CPU VM (the fixtures' first lines say how): the crashed worker's
    # error line is SGLang's own.
    from amdtop.logread.crashlog import crash_summary

    lines = (Path(__file__).resolve().parents[1] / "fixtures" / "sglang_logs" / log).read_text().splitlines()
    assert lines[0].startswith("# source: this repo's CPU VM")
    assert crash_summary(lines[1:]) == line
