"""How many public failure logs amdtop reads as a person would (issue 48): every tests/fixtures/failure_corpus/*/*.log
goes through ``amdtop logs parse FILE --json`` and its incidents are held against the verdict in the .toml beside it
(CORPUS.md). Prints hits/total per family and overall, and each miss with why.

Usage: .venv/bin/python bench/failure_corpus.py [--json] [--root DIR ...] [--only SUBSTRING] [--timeout 60]

Each log runs in its own ``python -m amdtop`` process (a reader crash or hang is one miss, not the end of the run).
A ``kernel`` log (dmesg/journal) goes through ``logs parse`` too, since one reader must read every family from any
source; while ``logs parse`` reports no incident for it, the bench falls back to the kernel path, ``snapshot --json
--backend none --kernel-log FILE``, and says so (``via kernel-log``). A log is a hit when some incident matches every
verdict field given and no incident of a ``no_incident_kinds`` kind appears:
  kind: the incident's kind is one of them; ranks: equal sets; laggard: equal (-1: the incident's laggard is null);
  devices: all among the incident's; mentions / not_mentions: (case-insensitive) in / not in the incident's summary,
  cause and detail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.failure_corpus.corpus import HERE, Entry, entries  # noqa: E402


def run_amdtop(args: list[str], state: Path, timeout: float) -> tuple[dict[str, Any] | None, str]:
    """One ``python -m amdtop`` run; its JSON document, or None and why."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMDTOP_")}
    env["XDG_STATE_HOME"] = str(state / "state")  # never the user's state dir or profile
    env["XDG_CONFIG_HOME"] = str(state / "config")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "amdtop", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        return None, f"amdtop {args[0]} ran past {timeout:g} s"
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return None, f"amdtop {args[0]} exited {out.returncode}: {tail[:200]}"
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError as e:
        return None, f"amdtop {args[0]} printed no JSON ({e})"
    return (doc, "") if isinstance(doc, dict) else (None, f"amdtop {args[0]} printed {type(doc).__name__}, not a dict")


def flag_kinds(doc: dict[str, Any] | None) -> str:
    """The flags a document raised instead of incidents (``gpu_fault x2, nccl_error``): a miss says what was seen."""
    kinds = Counter(str(f.get("kind")) for f in (doc or {}).get("flags") or [] if isinstance(f, dict))
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(kinds.items()))


def read(entry: Entry, state: Path, timeout: float) -> tuple[list[dict[str, Any]], str, str]:
    """The incidents the reader gives for one log, the path that gave them (``logs`` / ``kernel-log``), and what a
    miss with no incident should say (the run's error, or the flags it raised instead)."""
    doc, err = run_amdtop(["logs", "parse", str(entry.log), "--json"], state, timeout)
    incidents = list(doc.get("incidents") or []) if doc else []
    seen = err or (f"flags only: {flag_kinds(doc)}" if flag_kinds(doc) else "")
    if incidents or entry.input != "kernel":
        return incidents, "logs", seen
    kdoc, kerr = run_amdtop(["snapshot", "--json", "--backend", "none", "--kernel-log", str(entry.log)], state, timeout)
    if kdoc is None:
        return [], "logs", "; ".join(x for x in (err, kerr) if x)
    kseen = f"flags only: {flag_kinds(kdoc)}" if flag_kinds(kdoc) else ""
    return list(kdoc.get("incidents") or []), "kernel-log", kseen


def text_of(incident: dict[str, Any]) -> str:
    """What ``mentions`` look in: summary, cause and detail (the detail as JSON text), lower-cased."""
    detail = incident.get("detail")
    parts = [str(incident.get("summary") or ""), str(incident.get("cause") or "")]
    parts.append(json.dumps(detail, sort_keys=True) if detail else "")
    return "\n".join(parts).lower()


def mismatches(incident: dict[str, Any], verdict: dict[str, Any]) -> list[str]:
    """The verdict fields one incident fails, each with what the incident has."""
    out = []
    kind = incident.get("kind")
    if kind not in verdict["kind"]:
        out.append(f"kind {kind} not in {verdict['kind']}")
    if "ranks" in verdict and sorted(set(incident.get("ranks") or [])) != sorted(set(verdict["ranks"])):
        out.append(f"ranks {incident.get('ranks')} != {verdict['ranks']}")
    if "laggard" in verdict:
        want = None if verdict["laggard"] == -1 else verdict["laggard"]
        if incident.get("laggard") != want:
            out.append(f"laggard {incident.get('laggard')} != {want}")
    if "devices" in verdict:
        missing = set(verdict["devices"]) - set(incident.get("devices") or [])
        if missing:
            out.append(f"devices {incident.get('devices')} lack {sorted(missing)}")
    text = text_of(incident)
    for s in verdict.get("mentions", []):
        if s.lower() not in text:
            out.append(f"does not mention {s!r}")
    for s in verdict.get("not_mentions", []):
        if s.lower() in text:
            out.append(f"claims {s!r}")
    return out


def judge(entry: Entry, incidents: list[dict[str, Any]], error: str) -> tuple[bool, str]:
    """Hit or miss, and why a miss is one."""
    verdict = entry.verdict
    banned = [i.get("kind") for i in incidents if i.get("kind") in verdict.get("no_incident_kinds", [])]
    if not incidents:
        return False, "no incident" + (f" ({error})" if error else "")
    scored = sorted(((mismatches(i, verdict), n) for n, i in enumerate(incidents)), key=lambda t: (len(t[0]), t[1]))
    best, n = scored[0]
    if not best and not banned:
        return True, ""
    why = []
    if banned:
        why.append(f"reports {sorted(set(map(str, banned)))}, which the verdict rules out")
    if best:
        kinds = Counter(str(i.get("kind")) for i in incidents)
        why.append(f"closest of {dict(kinds)}: incident {n} " + "; ".join(best))
    return False, " / ".join(why)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument(
        "--root",
        type=Path,
        action="append",
        metavar="DIR",
        help=f"corpus directory holding <family>/<slug>.log (repeatable; default {HERE.relative_to(ROOT)})",
    )
    p.add_argument("--only", default="", metavar="SUBSTRING", help="only logs whose family/slug contains this")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds one amdtop run may take (default 60)")
    args = p.parse_args()
    roots = args.root or [HERE]
    for r in roots:
        if not r.is_dir():
            p.error(f"--root {r}: no such directory; pass a corpus directory (<family>/<slug>.log inside)")
    chosen = [e for r in roots for e in entries(r) if args.only in e.slug]
    if not chosen:
        p.error("no corpus logs found; check --root and --only")
    results = []
    with tempfile.TemporaryDirectory(prefix="amdtop-corpus-") as tmp:
        for e in chosen:
            incidents, path, error = read(e, Path(tmp), args.timeout)
            hit, why = judge(e, incidents, error)
            results.append(
                {
                    "log": str(e.log.relative_to(ROOT) if e.log.is_relative_to(ROOT) else e.log),
                    "family": e.family,
                    "input": e.input,
                    "hit": hit,
                    "why": why,
                    "via": path,
                    "kinds": sorted({str(i.get("kind")) for i in incidents}),
                    "want": e.verdict.get("kind", []),
                }
            )
    families: dict[str, dict[str, int]] = {}
    for r in results:
        f = families.setdefault(r["family"], {"hits": 0, "total": 0})
        f["total"] += 1
        f["hits"] += int(r["hit"])
    hits = sum(f["hits"] for f in families.values())
    total = len(results)
    doc = {
        "hits": hits,
        "total": total,
        "rate": round(hits / total, 3),
        "families": families,
        "logs": results,
    }
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    for fam, f in sorted(families.items()):
        print(f"{fam:8} {f['hits']:3}/{f['total']:<3} {100 * f['hits'] / f['total']:5.1f} %")
    print(f"{'overall':8} {hits:3}/{total:<3} {100 * hits / total:5.1f} %")
    misses = [r for r in results if not r["hit"]]
    if misses:
        print(f"\nmisses ({len(misses)}):")
        for r in misses:
            via = "" if r["via"] == "logs" else f" (via {r['via']})"
            print(f"  {r['log']}{via}: want {r['want']}: {r['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
