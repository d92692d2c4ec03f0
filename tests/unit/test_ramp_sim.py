"""The ramp against the simulated server: known knee, and every failure path ends with partial results."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from amdtop.cli.main import main
from amdtop.errors import AmdtopError
from amdtop.ramp import Ramp, RampConfig
from tests.unit.simproc import simserver

pytestmark = pytest.mark.timeout(90)


def _cfg(port: int, **kw: object) -> RampConfig:
    base: dict[str, object] = dict(
        url=f"http://127.0.0.1:{port}", concurrencies=(1, 2, 4, 8), step_seconds=1.0, warmup_seconds=0.3,
        input_len=8, output_len=8, request_timeout_s=5.0,
    )  # fmt: skip
    base.update(kw)
    return RampConfig(**base)  # type: ignore[arg-type]


@pytest.mark.quiet  # throughput against a simulated server: its margins assume the CPU is not shared
@pytest.mark.parametrize(("port", "capacity"), [(18110, 3), (18111, 6)])
def test_knee_found_within_one_step_of_capacity(tmp_path: Path, port: int, capacity: int) -> None:
    with simserver(port, "--capacity", str(capacity), "--tokens-per-s", "100", "--ttft-ms", "10"):
        result = asyncio.run(Ramp(_cfg(port), tmp_path).run())
    doc = result.to_json()
    assert doc["aborted"] is None and doc["finished"]
    assert abs(doc["recommended_max_num_seqs"] - capacity) <= 1, doc["knee"]
    by_c = {s["concurrency"]: s for s in doc["steps"]}
    # Below capacity throughput grows with concurrency; above it the total saturates at capacity x one stream.
    one = by_c[1]["output_throughput"]
    assert one == pytest.approx(100, rel=0.25)
    assert by_c[8]["output_throughput"] == pytest.approx(capacity * one, rel=0.15)
    assert by_c[8]["mean_ttft_ms"] > 2 * by_c[1]["mean_ttft_ms"]  # queueing above capacity shows in TTFT
    assert any(s["refined"] for s in doc["steps"])
    saved = json.loads(next((tmp_path / "ramp").glob("*.json")).read_text())
    assert saved["recommended_max_num_seqs"] == doc["recommended_max_num_seqs"]
    assert (tmp_path / "ramp").glob("*.csv")


def test_cli_json_stdout_and_contract_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with simserver(18112, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "5"):
        rc = main(["ramp", "--url", "http://127.0.0.1:18112", "--concurrency", "1,2", "--step-seconds", "0.5",
                   "--input-len", "4", "--output-len", "4", "--no-refine", "--json", "-", "--state-dir", str(tmp_path)])  # fmt: skip
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"url", "model", "steps", "knee", "recommended_max_num_seqs"} <= doc.keys()
    assert doc["model"] == "sim"
    step = doc["steps"][0]
    for key in ("concurrency", "completed", "failed", "duration", "request_throughput", "output_throughput",
                "total_token_throughput"):  # fmt: skip
        assert key in step
    for m in ("ttft", "tpot", "itl", "e2el"):
        for p in ("mean", "median", "p99"):
            assert isinstance(step[f"{p}_{m}_ms"], float)
    assert step["total_output_tokens"] == 4 * step["completed"]


def test_endpoint_down_is_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["ramp", "--url", "http://127.0.0.1:18199", "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("amdtop: error: --url: cannot reach") and err.count("\n") == 1
    with pytest.raises(AmdtopError):
        asyncio.run(Ramp(_cfg(18199), tmp_path).run())


def test_bad_input_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    # The URL is checked while the arguments are parsed (ramp/target.py): argparse's exit 2, one error line.
    with pytest.raises(SystemExit) as exc:
        main(["ramp", "--url", "localhost:1", "--concurrency", "1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("amdtop: error: argument --url:") and err.count("\n") == 1


def test_http_500_aborts_with_partial_results(tmp_path: Path) -> None:
    with simserver(18113, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "5", "--fail-after", "30"):
        result = asyncio.run(Ramp(_cfg(18113, step_seconds=1.0), tmp_path).run())
    doc = result.to_json()
    assert doc["aborted"] is not None and "error rate" in doc["aborted"]
    assert doc["steps"], "the steps before the failures are kept"
    assert sum(s["errors"].get("http_500", 0) for s in doc["steps"]) > 0
    assert json.loads(next((tmp_path / "ramp").glob("*.json")).read_text())["aborted"] == doc["aborted"]


def test_error_chunk_in_200_stream_is_a_failure(tmp_path: Path) -> None:
    with simserver(18114, "--capacity", "4", "--tokens-per-s", "200", "--ttft-ms", "5", "--error-chunk-after", "0"):
        result = asyncio.run(Ramp(_cfg(18114, concurrencies=(2,)), tmp_path).run())
    step = result.to_json()["steps"][0]
    assert step["completed"] == 0 and step["failed"] > 0
    assert set(step["errors"]) == {"stream_error"}
    assert result.aborted is not None


def test_server_killed_mid_step_stops_ramp(tmp_path: Path) -> None:
    async def scenario() -> dict[str, object]:
        with simserver(18115, "--capacity", "4", "--tokens-per-s", "100", "--ttft-ms", "5") as proc:
            ramp = Ramp(_cfg(18115, concurrencies=(2, 4, 8), step_seconds=2.0), tmp_path)
            task = asyncio.create_task(ramp.run())
            await asyncio.sleep(3.5)  # inside the second step
            proc.kill()
            result = await asyncio.wait_for(task, 30)
        return result.to_json()

    doc = asyncio.run(scenario())
    assert doc["aborted"] is not None
    steps = doc["steps"]
    assert isinstance(steps, list) and steps[0]["concurrency"] == 2 and steps[0]["completed"] > 0
    assert steps[-1]["failed"] > 0
    saved = json.loads(next((tmp_path / "ramp").glob("*.json")).read_text())
    assert len(saved["steps"]) == len(steps)


def test_user_abort_stops_within_the_step(tmp_path: Path) -> None:
    async def scenario() -> tuple[object, float]:
        with simserver(18116, "--capacity", "4", "--tokens-per-s", "100"):
            ramp = Ramp(_cfg(18116, concurrencies=(2, 4), step_seconds=30.0), tmp_path)
            task = asyncio.create_task(ramp.run())
            await asyncio.sleep(1.0)
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            ramp.abort()
            result = await asyncio.wait_for(task, 10)
            return result.aborted, loop.time() - t0

    aborted, _ = asyncio.run(scenario())
    assert aborted == "stopped by user"
