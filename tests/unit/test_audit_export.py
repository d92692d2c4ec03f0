"""The audit in the exporter (``amdtop_audit_findings``) and in ``snapshot --json`` (``audit``), from one frame."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from amdtop.audit.model import AuditReport, Finding, Fix
from amdtop.exporter import Exporter
from amdtop.pipeline import NodePipeline
from amdtop.report import frame_json
from amdtop.telemetry.sim import SimBackend

REPORT = AuditReport(
    findings=(
        Finding(
            "aiter_off", "warn", "worker", "AITER off", ("e",), "i", "s", Fix("profile_env", (("env.X", "1"),)), "a"
        ),
        Finding("aiter_off", "warn", "worker", "AITER off", ("e",), "i", "s", worker="b"),
        Finding("vram_orphaned", "error", "gpu", "GPU 3 orphan", ("e",), "i", "s", gpus=(3,)),
        Finding("vram_orphaned", "error", "gpu", "GPU 4 orphan", ("e",), "i", "s", gpus=(4,)),
    ),
    checked=("aiter_off", "vram_orphaned"),
    locality=(("a", 97.5),),
)


def frame():  # type: ignore[no-untyped-def]
    return replace(NodePipeline(SimBackend(seed=1), discover=False).tick(), audit=REPORT)


def test_exporter_counts_findings_by_severity_id_and_worker() -> None:
    state = frame()
    text = Exporter(lambda: state, "127.0.0.1:0").render().decode()
    (fam,) = [f for f in text_string_to_metric_families(text) if f.name == "amdtop_audit_findings"]
    got = {(s.labels["severity"], s.labels["id"], s.labels["worker"]): s.value for s in fam.samples}
    assert got == {("warn", "aiter_off", "a"): 1, ("warn", "aiter_off", "b"): 1, ("error", "vram_orphaned", ""): 2}


def test_snapshot_json_carries_the_audit() -> None:
    doc = frame_json(frame())
    assert doc["audit"]["checked"] == ["aiter_off", "vram_orphaned"]
    assert doc["audit"]["findings"][0]["fix"] == {"kind": "profile_env", "changes": {"env.X": "1"}}
    assert doc["audit"]["counts"] == {"error": 2, "warn": 2, "info": 0}
