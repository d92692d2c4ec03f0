"""Rejoin records a terminal wrapped over several lines (a log copied from a terminal or a ticket).

A wrapped record's continuation does not start the way a record does (a ``host:pid:tid [dev]`` head, a bracket, a
process prefix, a level word, indentation), and the line before it is as long as the terminal: either exactly the
widest line (a hard wrap, cut mid-word) or so long that the continuation's first word would not have fitted after it
(a soft wrap at a word). The continuation is appended to the line before and its own line left empty, so line
numbers still match the file.
"""

from __future__ import annotations

import re

MIN_WIDTH = 80
"""Narrower widest lines are not a terminal's width: nothing is rejoined."""
_RECORD_START = re.compile(
    r"(?:\s|$|[\[({<#*!|=+-]|[\w.-]+:\d+:\d+ |[\w.-]+ \[|\d{4}-\d\d-\d\d|\d\d:\d\d"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|NCCL|RCCL|Traceback|File|frame|Exception|terminate|Fatal|Stack)\b)"
)


def unwrap(lines: list[str]) -> list[str]:
    """``lines`` with wrapped continuations appended to their record (the same number of lines; ``lines`` itself
    when nothing was wrapped)."""
    if len(lines) < 2:
        return lines
    width = max((len(x) for x in lines if x[:1] != "#"), default=0)  # ``#`` lines: a fixture's source notes
    if width < MIN_WIDTH:
        return lines
    near = width - 48  # a continuation's first word is rarely longer than this
    out: list[str] | None = None
    head = -1  # index (in out) of the record the last continuation went to
    for i in range(1, len(lines)):
        prev = lines[i - 1] if out is None else out[head if head >= 0 else i - 1]
        line = lines[i]
        if len(lines[i - 1]) < near or not line or _RECORD_START.match(line):
            head = -1
            continue
        word = line.split(" ", 1)[0]
        hard = len(lines[i - 1]) == width
        if not hard and len(lines[i - 1].rstrip()) + 1 + len(word) <= width:
            head = -1
            continue
        if out is None:
            out = list(lines)
        target = head if head >= 0 else i - 1
        joined = prev + line if hard or prev.endswith(" ") else f"{prev} {line}"
        out[target] = joined
        out[i] = ""
        head = target
    return lines if out is None else out
