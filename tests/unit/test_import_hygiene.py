"""amdtop/ is the UI-free core: importing every core module must not pull in textual or rich."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "amdtop"


def core_modules() -> list[str]:
    mods = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods.append(".".join(parts))
    return mods


def test_core_never_imports_textual_or_rich() -> None:
    mods = core_modules()
    assert "amdtop.model" in mods and len(mods) > 5
    # import-linter (a dev tool) installs click, and with click present httpx loads its rich-based command line on
    # import; the product's own install has no click. Hide click so only amdtop's own imports are judged.
    code = (
        "import importlib, sys\n"
        "sys.modules['click'] = None\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core imported UI modules: {out.stdout.strip()}"


UI_MODULE = re.compile(r"^(tui|widgets|textual|rich)(\.|$)")


def test_core_names_no_ui_module_in_a_string() -> None:
    """import-linter (run by ./run-tests) sees import statements; this sees ``importlib.import_module("tui...")``."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and UI_MODULE.match(node.value):
                found.append(f"{path.relative_to(CORE.parent)}:{node.lineno}: {node.value!r}")
    assert found == [], "the core names UI modules: " + "; ".join(found)
