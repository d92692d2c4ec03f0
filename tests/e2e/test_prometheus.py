"""A real Prometheus scrapes ``amdtop export --demo``; promtool checks and unit-tests the shipped alert rules."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

QUIET = False
"""No vLLM here, no timing against a shared CPU: the parallel step runs it (tests/conftest.py)."""
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "amdtop-rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "amdtop.json"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "tests" / "amdtop-rules.test.yml"
EXPORT_PORT = 19420
PROM_PORT = 19421

prometheus = shutil.which("prometheus") or ("/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None)
promtool = shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(prometheus is None, reason="prometheus not installed (run-tests installs it)")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool not installed (Debian package prometheus)")


def wait_for(url: str, deadline_s: float, proc: subprocess.Popen[bytes]) -> bytes:
    """GET ``url`` until it answers 200 or ``proc`` dies or the deadline passes."""
    end = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return bytes(resp.read())
        except (urllib.error.URLError, ConnectionError) as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer: {last}")


def query(expr: str) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{PROM_PORT}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success"
    return list(doc["data"]["result"])


def stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    argv = [sys.executable, "-m", "amdtop", "export", "--demo", "--listen", f"127.0.0.1:{EXPORT_PORT}"]
    argv += ["--config", str(tmp_path / "none.toml"), "--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{EXPORT_PORT}/metrics", 30, proc)
        yield proc
    finally:
        stop(proc)


@needs_prometheus
def test_prometheus_scrapes_demo_node(exporter: subprocess.Popen[bytes], tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        "scrape_configs:\n  - job_name: amdtop\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{EXPORT_PORT}']\n"
    )
    argv = [
        str(prometheus),
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{PROM_PORT}",
        "--log.level=warn",
    ]
    prom = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(f"http://127.0.0.1:{PROM_PORT}/-/ready", 60, prom)
        end = time.monotonic() + 60
        result: list[dict[str, object]] = []
        while time.monotonic() < end:
            result = query("gpu_gfx_activity")
            if len(result) == 8:
                break
            time.sleep(0.5)
        assert len(result) == 8, result
        labels = result[0]["metric"]
        assert isinstance(labels, dict)
        assert labels["job"] == "amdtop" and labels["hostname"] == "amdtop-demo"
        assert labels["card_model"] == "AMD Instinct MI300X"
        assert {r["metric"]["gpu_id"] for r in result} == {str(i) for i in range(8)}  # type: ignore[index]
        assert len(query("amdtop_link_info")) == 28
        if importlib.util.find_spec("amdtop.supervisor") is not None:
            # The demo profiles come through the supervisor: stopped until someone launches them.
            stopped = query('amdtop_worker_state{state="stopped"} == 1')
            assert stopped and all(r["metric"]["hostname"] == "amdtop-demo" for r in stopped)  # type: ignore[index]
        assert query('up{job="amdtop"}')[0]["value"][1] == "1"  # type: ignore[index]
        used = query("gpu_used_vram / gpu_total_vram")
        assert len(used) == 8 and all(0 < float(r["value"][1]) < 0.95 for r in used)  # type: ignore[index]
        with urllib.request.urlopen(f"http://127.0.0.1:{PROM_PORT}/api/v1/rules", timeout=5) as resp:
            groups = json.load(resp)["data"]["groups"]
        assert {r["name"] for g in groups for r in g["rules"]} >= {"AmdtopGpuVramHigh", "AmdtopRcclErrors"}
        # Every dashboard query is valid PromQL for this Prometheus (query() asserts status success).
        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel.get("targets", []):
                query(target["expr"].replace("$host", ".*"))
        assert query('count by (hostname) (gpu_total_vram{hostname=~".*"})')[0]["value"][1] == "8"  # type: ignore[index]
    finally:
        stop(prom)
    assert stop(exporter) == 0  # SIGTERM ends the exporter cleanly


@needs_promtool
def test_promtool_check_rules() -> None:
    done = subprocess.run([str(promtool), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout


@needs_promtool
def test_promtool_alert_unit_tests() -> None:
    done = subprocess.run(
        [str(promtool), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_promtool_case() -> None:
    alerts = set(re.findall(r"^\s*- alert: (\w+)", RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert len(alerts) == 8 and alerts == tested
