"""Rejoin records a terminal wrapped over several lines (a log copied from a terminal or a ticket).

A wrapped record's continuation does not start the way a record does (a ``host:pid:tid [dev]`` head, a bracket, a
process prefix, a level word, indentation), and the line before it is as long as the terminal: either exactly the
widest line (a hard wrap, cut mid-word) or so long that the continuation's first word would not have fitted after it
(a soft wrap at a word). The continuation is appended to the line before and its own line left empty, so line
numbers still match the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

MIN_WIDTH = 80
"""Narrower widest lines are not a terminal's width: nothing is rejoined."""
_RECORD_START = re.compile(
    r"(?:\s|$|[\[({<#*!|=+-]|[\w.-]+:\d+:\d+ |[\w.-]+ \[|[\w.-]+\s+\| |[IWEF]\d{4} \d\d:|\d{4}-\d\d-\d\d|\d\d:\d\d"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|NCCL|RCCL|Traceback|File|frame|Exception|terminate|Fatal|Stack)\b"
    # ROCr/HIP write their fault reports straight to stderr, headless: a record of their own, never a continuation
    r"|Memory access fault by GPU|HW Exception by GPU|Callback: Queue|hipErrorNoBinaryForGpu)"
)


_TEAR = re.compile(r"\((?:[^()]*?)pid=\d+(?:, ip=[^)\s]+)?\) ")
"""A process prefix inside a line: where another process's whole line was written into this one."""


def untear(lines: Sequence[str], text: str | None = None) -> Sequence[str]:
    """Lines where another process's line (behind its ``(Worker pid=N) `` prefix) was written into the middle of an
    RCCL/NCCL record, the record's rest landing on the next line: the record rejoined, the intruding line after it
    (the same number of lines; ``lines`` itself when nothing was torn). A torn record whose rest cannot be found is
    dropped rather than read cut short (a value cut mid-word is worse than none). ``text``: the raw text the lines
    were split from, where the caller has it (searched instead of joining the lines again)."""
    if "pid=" not in (text if text is not None else "\n".join(lines)):
        return lines  # one C search over the batch: most RCCL logs have no process prefix at all
    found = [i for i, line in enumerate(lines) if "pid=" in line and " NCCL " in line]
    out: list[str] | None = None
    for i in found:
        line = lines[i] if out is None else out[i]
        mark = line.find(" NCCL ")
        m = _TEAR.search(line, mark + 6)
        if m is None:
            continue
        if out is None:
            out = list(lines)
        head, intruder = line[: m.start()], line[m.start() :]
        nxt = out[i + 1] if i + 1 < len(out) else ""
        if nxt and not _RECORD_START.match(nxt):
            out[i], out[i + 1] = head + nxt, intruder
        else:
            out[i] = intruder
    return lines if out is None else out


def unwrap(lines: Sequence[str]) -> Sequence[str]:
    """``lines`` with wrapped continuations appended to their record (the same number of lines; ``lines`` itself
    when nothing was wrapped)."""
    if len(lines) < 2:
        return lines
    lengths = list(map(len, lines))
    width = max(lengths)
    if width >= MIN_WIDTH and lines[lengths.index(width)][:1] == "#":
        # a fixture's ``#`` source note is no terminal line: the widest of the others is the width
        width = max((n for n, x in zip(lengths, lines, strict=True) if x[:1] != "#"), default=0)
    if width < MIN_WIDTH:
        return lines
    near = width - 48  # a continuation's first word is rarely longer than this
    out: list[str] | None = None
    head = -1  # index (in out) of the record the last continuation went to
    last = -2
    for i in [k + 1 for k, n in enumerate(lengths[:-1]) if n >= near]:
        if i != last + 1:
            head = -1  # a run of continuations ends where a short line came between
        last = i
        line = lines[i]
        if not line or _RECORD_START.match(line):
            head = -1
            continue
        word = line.split(" ", 1)[0]
        if lines[i - 1][:1] == "#" or (len(word) >= 3 and lines[i - 1].startswith(word)):
            # a ``#`` comment (a fixture's source note) takes no continuation; the same leading token as the line
            # before (a container or host prefix) starts a record of its own
            head = -1
            continue
        plen = lengths[i - 1]
        hard = plen == width
        if not hard and len(lines[i - 1].rstrip()) + 1 + len(word) <= width:
            head = -1
            continue
        if out is None:
            out = list(lines)
        target = head if head >= 0 else i - 1
        prev = out[target]
        out[target] = prev + line if hard or prev.endswith(" ") else f"{prev} {line}"
        out[i] = ""
        head = target
    return lines if out is None else out
