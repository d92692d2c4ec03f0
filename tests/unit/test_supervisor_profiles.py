"""Profiles: parsing, every validation error with its exact message, argv and env construction."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from amdtop.errors import InputError
from amdtop.supervisor import launchspec
from amdtop.supervisor.launchspec import MARKER_ENV, build_argv, build_env, preflight, serve_args
from amdtop.supervisor.profiles import Profile, parse_document, profiles_from_document, resolve_numa, validate_profiles
from amdtop.telemetry.sim import SimBackend

TOPO = SimBackend().topology()  # GPUs 0-3 on NUMA node 0, 4-7 on node 1


def parse(text: str) -> list[Profile]:
    return profiles_from_document(parse_document(text))


def worker(name: str = "a", gpus: str = "[0, 1]", port: int = 18001, extra: str = "", args: str = "") -> str:
    return f'[[worker]]\nname = "{name}"\nmodel = "m"\ngpus = {gpus}\nport = {port}\n{extra}' + (
        f"[worker.args]\n{args}" if args else ""
    )


def error_of(text: str) -> str:
    with pytest.raises(InputError) as exc:
        validate_profiles(parse(text), TOPO)
    return str(exc.value)


def test_defaults_and_tp_from_gpus() -> None:
    [p] = parse(worker())
    assert p.command == ("vllm", "serve") and p.numa_node == "auto" and p.tp_size == 2 and p.host == "127.0.0.1"
    assert resolve_numa(p, TOPO) == 0
    [q] = parse(worker(gpus="[5]"))
    assert resolve_numa(q, TOPO) == 1


def test_unknown_gpu() -> None:
    assert error_of(worker(gpus="[0, 9]")) == (
        "worker[a].gpus: GPU 9 does not exist (this node has GPUs 0-7); use an index from 'amdtop topo'"
    )


def test_gpu_used_twice() -> None:
    text = worker("a", "[0, 1]") + "\n" + worker("b", "[1, 2]", port=18002)
    assert error_of(text) == "worker[b].gpus: GPU 1 is already used by worker a; give each worker its own GPUs"


def test_tp_mismatch() -> None:
    assert error_of(worker(gpus="[0, 1, 2, 3]", args="tensor-parallel-size = 2\n")) == (
        "worker[a].args.tensor-parallel-size: 2 does not match the 4 GPUs listed; drop it or list 2 GPUs"
    )


def test_tp_not_dividing_heads(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    text = f'[[worker]]\nname = "a"\nmodel = "{tmp_path}"\ngpus = [0, 1, 2]\nport = 18001\n'
    assert error_of(text) == (
        "worker[a].gpus: tensor-parallel size 3 does not divide the model's 4 attention heads; "
        "use a TP size that divides 4"
    )
    # Readable and divisible: fine; unreadable config.json: not checked.
    validate_profiles(parse(text.replace("[0, 1, 2]", "[0, 1]")), TOPO)
    validate_profiles(parse(text.replace(str(tmp_path), "/nonexistent/model")), TOPO)


def test_numa_node_missing() -> None:
    assert error_of(worker(extra="numa_node = 5\n")) == (
        'worker[a].numa_node: NUMA node 5 does not exist (this node has 0-1); use one of 0-1, "auto" or "none"'
    )


def test_auto_numa_spanning_nodes() -> None:
    assert error_of(worker(gpus="[2, 3, 4, 5]")) == (
        'worker[a].numa_node: "auto" but GPUs 2-5 span NUMA nodes 0-1; set numa_node to one node explicitly or "none"'
    )
    # An explicit node overrides.
    validate_profiles(parse(worker(gpus="[2, 3, 4, 5]", extra="numa_node = 1\n")), TOPO)


def test_port_clash_between_workers() -> None:
    text = worker("a", "[0]") + "\n" + worker("b", "[1]")
    assert error_of(text) == "worker[b].port: port 18001 is also used by worker a; give each worker its own port"


def test_port_already_bound() -> None:
    [p] = parse(worker(port=18003, extra='command = ["true"]\n'))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 18003))
        s.listen()
        with pytest.raises(InputError) as exc:
            preflight(p, None, {"PATH": "/usr/bin:/bin"})
    assert str(exc.value) == (
        "worker[a].port: port 18003 is already in use on this host; stop what holds it or pick another port"
    )


def test_missing_numactl(monkeypatch: pytest.MonkeyPatch) -> None:
    [p] = parse(worker(port=18004, extra='command = ["true"]\n'))
    with pytest.raises(InputError) as exc:
        preflight(p, 0, {"PATH": "/nonexistent"})
    assert str(exc.value) == (
        'worker[a].numa_node: numactl is not installed but pinning to node 0 is asked; install numactl or set numa_node = "none"'
    )


def test_command_not_found() -> None:
    [p] = parse(worker(port=18004, extra='command = ["no-such-vllm-binary", "serve"]\n'))
    with pytest.raises(InputError) as exc:
        preflight(p, None, {"PATH": "/usr/bin:/bin"})
    assert (
        str(exc.value) == "worker[a].command: 'no-such-vllm-binary' not found on PATH; install it or give the full path"
    )
    [q] = parse(worker(port=18004, extra='command = ["/no/such/vllm"]\n'))
    with pytest.raises(InputError, match="'/no/such/vllm' not found"):
        preflight(q, None, {"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(
    ("snippet", "message"),
    [
        (
            '[[worker]]\nmodel = "m"\nport = 1\n',
            "worker[0].name: missing or not a string; give every [[worker]] a name",
        ),
        ('[[worker]]\nname = "a"\nport = 1\n', "worker[a].model: missing or not a string; set the model path or id"),
        ('[[worker]]\nname = "a"\nmodel = "m"\n', "worker[a].port: missing or not a port number; set port = 1..65535"),
        (
            worker(extra='numa_node = "near"\n'),
            'worker[a].numa_node: \'near\' is not a node; use an integer, "auto" or "none"',
        ),
        (
            worker(extra="gpu = [1]\n"),
            "worker[a].gpu: unknown key; use one of args, command, engine, env, gpus, host, model, name, numa_node, port, stop_grace_s (vllm flags go in [worker.args])",
        ),
        (
            worker() + "\n" + worker(port=18002, gpus="[3]"),
            "worker[a].name: declared twice; give every worker a unique name",
        ),
        ("[[worker]\n", None),
    ],
)
def test_parse_errors(snippet: str, message: str | None) -> None:
    with pytest.raises(InputError) as exc:
        parse(snippet)
    if message is not None:
        assert str(exc.value) == message
    else:
        assert str(exc.value).startswith("config: not valid TOML")


def test_argv_every_option() -> None:
    [p] = parse(
        worker(
            gpus="[0, 1, 2, 3]",
            args="max-num-seqs = 64\ngpu-memory-utilization = 0.9\nenforce-eager = true\ndisable-log-stats = false\n"
            'served-model-name = ["a", "b"]\n',
            extra='command = ["/opt/vllm/bin/vllm", "serve"]\n',
        )
    )
    assert serve_args(p) == [
        "/opt/vllm/bin/vllm", "serve", "m", "--tensor-parallel-size", "4", "--port", "18001", "--host", "127.0.0.1",
        "--enable-server-load-tracking", "--max-num-seqs", "64", "--gpu-memory-utilization", "0.9", "--enforce-eager", "--served-model-name", "a", "b",
    ]  # fmt: skip
    # A profile turns the /load tracking off for a vLLM older than its flag (0.8): the flag is then not passed.
    [old] = parse(worker(args="enable-server-load-tracking = false\n"))
    assert "--enable-server-load-tracking" not in serve_args(old)
    assert build_argv(p, 0)[:3] == ["numactl", "--cpunodebind=0", "--membind=0"]
    assert build_argv(p, None)[0] == "/opt/vllm/bin/vllm"
    scoped = build_argv(p, 1, scope_unit="amdtop-a-x")
    assert scoped[:6] == ["systemd-run", "--scope", "--quiet", "--collect", "--unit=amdtop-a-x", "--"]
    assert scoped[6:9] == ["numactl", "--cpunodebind=1", "--membind=1"]


def test_argv_host_and_explicit_tp() -> None:
    [p] = parse(worker(gpus="[]", args='tensor-parallel-size = 2\nhost = "0.0.0.0"\n'))
    argv = serve_args(p)
    assert argv.count("--tensor-parallel-size") == 1 and argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv.count("--host") == 1 and argv[argv.index("--host") + 1] == "0.0.0.0"
    assert p.url == "http://127.0.0.1:18001"


def test_env_amd_nvidia_and_marker() -> None:
    [p] = parse(worker(gpus="[2, 3]", extra="") + '[worker.env]\nNCCL_DEBUG = "INFO"\n')
    base = {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    amd = build_env(p, base, vendor="AMD", marker="a:123")
    assert amd["HIP_VISIBLE_DEVICES"] == "2,3" and "CUDA_VISIBLE_DEVICES" not in amd
    assert amd["NCCL_DEBUG"] == "INFO" and amd[MARKER_ENV] == "a:123" and amd["PATH"] == "/usr/bin"
    nv = build_env(p, {"HIP_VISIBLE_DEVICES": "7"}, vendor="NVIDIA", marker="a:1")
    assert nv["CUDA_VISIBLE_DEVICES"] == "2,3" and "HIP_VISIBLE_DEVICES" not in nv
    # A CPU worker (no GPUs) gets no visibility variable from amdtop.
    [cpu] = parse(worker(gpus="[]"))
    assert "HIP_VISIBLE_DEVICES" not in build_env(cpu, {}, vendor="AMD", marker="a:1")


def test_env_visibility_conflict() -> None:
    [p] = parse(worker(gpus="[2, 3]") + '[worker.env]\nCUDA_VISIBLE_DEVICES = "0,1"\n')
    with pytest.raises(InputError) as exc:
        build_env(p, {}, vendor="AMD", marker="a:1")
    assert str(exc.value) == (
        "worker[a].env.CUDA_VISIBLE_DEVICES: '0,1' contradicts gpus = [2, 3]; drop it (amdtop sets GPU visibility from gpus)"
    )
    # Matching values are allowed (vLLM accepts both when identical).
    [q] = parse(worker(gpus="[2, 3]") + '[worker.env]\nCUDA_VISIBLE_DEVICES = "2,3"\n')
    env = build_env(q, {}, vendor="AMD", marker="a:1")
    assert env["CUDA_VISIBLE_DEVICES"] == env["HIP_VISIBLE_DEVICES"] == "2,3"


def test_systemd_detection_false_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(launchspec.shutil, "which", lambda _name: None)
    assert launchspec.systemd_usable() is False


def test_port_in_time_wait_is_free_but_bound_is_not() -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 18005))
    srv.listen()
    client = socket.create_connection(("127.0.0.1", 18005))
    conn, _ = srv.accept()
    conn.close()  # the server side closes first: its end waits in TIME_WAIT, as after a stopped vLLM
    client.close()
    srv.close()
    with socket.socket() as probe, pytest.raises(OSError):
        probe.bind(("127.0.0.1", 18005))  # a plain bind still fails here...
    assert not launchspec.port_in_use(18005)  # ...but the server (SO_REUSEADDR) can bind it
    # A dead server whose client still holds the connection: the server's end sits in FIN_WAIT2.
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 18007))
    srv.listen()
    client = socket.create_connection(("127.0.0.1", 18007))
    conn, _ = srv.accept()
    conn.close()
    srv.close()
    try:
        with socket.socket() as probe, pytest.raises(OSError):
            probe.bind(("127.0.0.1", 18007))
        assert not launchspec.port_in_use(18007)
    finally:
        client.close()
    with socket.socket() as held:
        held.bind(("127.0.0.1", 18006))  # bound, not listening: vLLM pre-binds its port while loading
        assert launchspec.port_in_use(18006)
