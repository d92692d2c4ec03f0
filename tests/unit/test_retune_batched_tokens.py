"""Retune gains max-num-batched-tokens (the ramp's compute advice), with vLLM's own lower bound."""

from __future__ import annotations

import re

import pytest
import tomlkit

from amdtop.errors import InputError
from amdtop.supervisor.retune import apply_changes, render_diff

DOC = """# kept comment
[[worker]]
name = "a"
model = "/m"
gpus = [0]
[worker.args]
max-num-seqs = 64
"""


def test_max_num_batched_tokens_is_retunable() -> None:
    doc = tomlkit.parse(DOC)
    changed = apply_changes(doc, "a", {"max_num_batched_tokens": "8192"})
    assert changed == [("max-num-batched-tokens", None, 8192)]
    assert doc["worker"][0]["args"]["max-num-batched-tokens"] == 8192
    assert "# kept comment" in tomlkit.dumps(doc)
    assert "args.max-num-batched-tokens: (unset) -> 8192" in render_diff("a", changed)


@pytest.mark.parametrize(
    ("changes", "why"),
    [({"max-num-batched-tokens": "32"}, "below max-num-seqs 64; give at least 64"),
     ({"max-num-batched-tokens": "128", "max-num-seqs": "256"}, "below max-num-seqs 256"),
     ({"max-num-batched-tokens": "0"}, "outside 1..2147483647"),
     ({"max-num-batched-tokens": str(2**31)}, "outside 1..2147483647"),
     ({"max-num-batched-tokens": "4k"}, "is not an integer")],
)  # fmt: skip
def test_bad_values_name_the_field(changes: dict[str, str], why: str) -> None:
    with pytest.raises(InputError, match=re.escape("worker[a].args.max-num-batched-tokens")) as exc:
        apply_changes(tomlkit.parse(DOC), "a", changes)
    assert why in str(exc.value)
