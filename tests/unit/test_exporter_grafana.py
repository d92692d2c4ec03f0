"""The shipped Grafana dashboard: structure, and every query names metrics the exporter really exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from amdtop.exporter import Exporter
from amdtop.telemetry.sim import SimBackend
from tests.unit.test_exporter import full_state

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "amdtop.json"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (functions, label matchers, grouping labels and keywords removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        rest = expr[m.end() :].lstrip()
        if rest.startswith("(") or m.group() in KEYWORDS:
            continue
        if re.fullmatch(r"\d+[smhdwy]", m.group()):
            continue
        names.add(m.group())
    return names


def exported_names() -> set[str]:
    """Sample names on the wire for a demo node where every family has data."""
    state = full_state(SimBackend(seed=2))
    text = Exporter(lambda: state, "127.0.0.1:0").render().decode()
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def load() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def test_metric_name_extraction() -> None:
    expr = 'sum by (gpu_id) (rate(foo_total{a="b", c=~"x|y"}[5m])) / on(hostname) bar_bytes > 0.95'
    assert metric_names(expr) == {"foo_total", "bar_bytes"}
    assert metric_names('count by (hostname) (gpu_total_vram{hostname=~"$host"})') == {"gpu_total_vram"}


def test_every_query_names_exported_metrics() -> None:
    exported = exported_names()
    seen: set[str] = set()
    exprs = [t["expr"] for p in load()["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    for expr in exprs:
        names = metric_names(expr)
        assert names, expr
        assert names <= exported, (expr, names - exported)
        seen |= names
    # The dashboard covers the headline families of each area.
    assert {"gpu_gfx_activity", "gpu_used_vram", "amdtop_tp_spread_percent", "amdtop_rccl_errors"} <= seen
    assert {"amdtop_worker_state", "amdtop_ramp_knee_concurrency", "amdtop_link_info"} <= seen


def test_host_variable_and_one_row_per_node() -> None:
    doc = load()
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    host = variables["host"]
    assert host["type"] == "query" and host["multi"] and host["includeAll"]
    assert metric_names(host["definition"].replace("label_values(", "").split(",")[0]) <= exported_names()
    assert "hostname" in host["definition"]
    rows = [p for p in doc["panels"] if p["type"] == "row"]
    repeated = [r for r in rows if r.get("repeat")]
    assert len(repeated) == 1 and repeated[0]["repeat"] == "host"
    after = doc["panels"][doc["panels"].index(repeated[0]) + 1 :]
    assert after and all(p["type"] != "row" for p in after)
    for panel in after:
        for target in panel["targets"]:
            assert 'hostname=~"$host"' in target["expr"], target["expr"]


def test_structure() -> None:
    doc = load()
    assert doc["uid"] and doc["title"] and doc["schemaVersion"] >= 30
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for panel in doc["panels"]:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${DS}"
            assert panel["targets"] and all(t["refId"] for t in panel["targets"])
