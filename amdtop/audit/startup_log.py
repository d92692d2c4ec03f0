"""What a vLLM start-up log says about the paths vLLM chose: version, platform, attention backend, MoE path, custom
all-reduce, AITER, and the engine config line (``disable_custom_all_reduce=``, ``enforce_eager=``, ``kv_cache_dtype=``).

Lines look like ``(EngineCore pid=934) INFO 07-20 02:58:12 [rocm.py:572] Using TRITON_ATTN backend (selected via
--attention-backend).``; older builds drop the ``(name pid=)`` prefix, terminals add ANSI colours. Only the message
after ``[file.py:line]`` is matched.
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass, field, replace
from typing import BinaryIO

LAUNCH_MARKER = b"=== amdtop launch "
"""The line amdtop writes before each launch: a run's start-up lines follow the last one."""
MAX_READ = 16 * 1024 * 1024
"""How far back from a log's end the last launch marker is looked for."""
START_WINDOW = 2 * 1024 * 1024
"""A run's start-up lines lie in its first 2 MiB (a vLLM start logs a few hundred lines); later lines are not scanned."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\^\[\[[0-9;]*m")
_MSG = re.compile(r"\[?[\w./-]+\.py:\d+\]\s?(.*)$")
_VERSION = (
    re.compile(r"vLLM API server version (\S+)"),
    re.compile(r"Initializing a V\d LLM engine \(v([^)]+)\)"),
    re.compile(r"█\s+version (\d[\w.+-]*)"),
)
_PLATFORM = re.compile(r"Automatically detected platform (\w+)")
_ATTN = re.compile(
    r"Using (?:AttentionBackendEnum\.)?([A-Za-z0-9_]+(?: [A-Za-z0-9_]+)*?) (?:attention )?backend\b(.*)$"
)
_CUSTOM_AR = re.compile(r"(?:Disabled the custom all-reduce kernel|Custom allreduce is disabled) because (.+)$")
_CONFIG_KEYS = ("disable_custom_all_reduce", "enforce_eager", "kv_cache_dtype", "device_config", "tensor_parallel_size")
_CONFIG = re.compile(r"\b(" + "|".join(_CONFIG_KEYS) + r")=([^,\s)]+)")


@dataclass(frozen=True, slots=True)
class StartupFacts:
    """What one run's start-up lines said (``None``/empty where the log had no such line)."""

    version: str | None = None
    platform: str | None = None
    attention: str | None = None
    """Backend name as logged (``ROCM_AITER_FA``, ``TRITON_ATTN``, ``ROCmFlashAttention``...)."""
    attention_by_flag: bool = False
    """The log says the backend was selected via ``--attention-backend``."""
    attention_line: str | None = None
    moe: tuple[str, ...] = ()
    """MoE kernel choices as logged."""
    custom_ar_disabled: str | None = None
    """The line in which vLLM said it disabled custom all-reduce."""
    aiter: tuple[str, ...] = ()
    """Lines naming ``VLLM_ROCM_USE_AITER``/AITER."""
    config: tuple[tuple[str, str], ...] = ()
    """Values from the engine config line."""
    lines: int = 0

    def config_value(self, key: str) -> str | None:
        """A value of the engine config line."""
        return next((v for k, v in self.config if k == key), None)


def message(line: str) -> str:
    """The log message after the ``[file.py:line]`` tag (ANSI colours removed), or the whole line."""
    line = _ANSI.sub("", line).rstrip()
    m = _MSG.search(line)
    return m.group(1) if m else line


def scan(lines: list[str], facts: StartupFacts | None = None) -> StartupFacts:
    """Add what ``lines`` say to ``facts`` (the first value of each kind wins, as start-up lines come once)."""
    f = facts or StartupFacts()
    version, platform = f.version, f.platform
    attention, by_flag, attn_line = f.attention, f.attention_by_flag, f.attention_line
    moe, aiter, custom_ar = list(f.moe), list(f.aiter), f.custom_ar_disabled
    config = dict(f.config)
    for raw in lines:
        if (
            "Using" not in raw
            and "version" not in raw
            and "platform" not in raw
            and "llreduce" not in raw
            and "all-reduce" not in raw
            and "AITER" not in raw
            and "_dtype=" not in raw
        ):
            continue
        msg = message(raw)
        if version is None:
            for rx in _VERSION:
                m = rx.search(msg)
                if m:
                    version = m.group(1)
                    break
        if platform is None:
            m = _PLATFORM.search(msg)
            if m:
                platform = m.group(1)
        if "Initializing a V" in msg and "config" in msg:
            for key, value in _CONFIG.findall(msg):
                config.setdefault(key, value.strip("'\""))
            if platform is None and config.get("device_config"):
                platform = config["device_config"]
        if msg.startswith("Using") and "MoE" in msg:
            if msg not in moe:
                moe.append(msg)
            continue
        if attention is None and msg.startswith("Using") and "vit attention" not in msg and "MMEncoder" not in msg:
            m = _ATTN.match(msg)
            if m and not m.group(2).startswith(" for "):  # "Using EMULATION backend for OCP_MX..." is a GEMM
                attention, attn_line = m.group(1), msg
                by_flag = "--attention-backend" in m.group(2)
        if custom_ar is None:
            m = _CUSTOM_AR.search(msg)
            if m:
                custom_ar = msg
        if "AITER" in msg and len(aiter) < 8 and msg not in aiter:
            aiter.append(msg)
    return replace(
        f,
        version=version,
        platform=platform,
        attention=attention,
        attention_by_flag=by_flag,
        attention_line=attn_line,
        moe=tuple(moe[:8]),
        custom_ar_disabled=custom_ar,
        aiter=tuple(aiter),
        config=tuple(sorted(config.items())),
        lines=f.lines + len(lines),
    )


def parse_text(text: str) -> StartupFacts:
    """Facts of a whole start-up log (the part after the last amdtop launch marker)."""
    cut = text.rfind(LAUNCH_MARKER.decode())
    if cut >= 0:
        text = text[cut:]
    return scan(text.splitlines())


@dataclass
class _Followed:
    inode: int
    offset: int
    """Bytes of the file looked at so far."""
    window_end: int
    """Where this run's start-up window ends: lines past it are only searched for the next launch marker."""
    facts: StartupFacts
    tail: bytes = b""


def _last_marker(fh: BinaryIO, size: int) -> int | None:
    """Offset of the last launch marker in the file's last MAX_READ bytes (a mapped search: nothing copied)."""
    if size == 0:
        return None
    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        at = mm.rfind(LAUNCH_MARKER, max(0, size - MAX_READ))
    return None if at < 0 else at


_KEYWORDS = (b"Using", b"version", b"platform", b"llreduce", b"all-reduce", b"AITER", b"_dtype=")


def candidate_lines(data: bytes) -> list[str]:
    """The lines of ``data`` that hold a keyword the scan looks for (found with ``bytes.find``, so the thousands
    of other lines of a start-up, RCCL INFO among them, are never split or decoded)."""
    starts: set[int] = set()
    for kw in _KEYWORDS:
        at = data.find(kw)
        while at >= 0:
            begin = data.rfind(b"\n", 0, at) + 1
            starts.add(begin)
            end = data.find(b"\n", at)
            if end < 0:
                break
            at = data.find(kw, end)
    out = []
    for begin in sorted(starts):
        end = data.find(b"\n", begin)
        out.append(data[begin : len(data) if end < 0 else end].decode("utf-8", "replace"))
    return out


@dataclass
class StartupLogs:
    """Start-up facts per log file. A run's start-up lines follow its launch marker (or open a log amdtop did not
    write): only the first START_WINDOW bytes of the run are scanned, and later calls only search what was appended
    for a new launch marker, so a long-running worker's log costs a stat and a small read per call."""

    _files: dict[str, _Followed] = field(default_factory=dict)

    def facts(self, path: str) -> StartupFacts:
        """The facts of the last run in ``path``; OSError when the log cannot be read."""
        st = os.stat(path)
        known = self._files.get(path)
        with open(path, "rb") as fh:
            if known is None or known.inode != st.st_ino or st.st_size < known.offset:
                marker = _last_marker(fh, st.st_size)
                start = 0 if marker is None else marker
                known = _Followed(st.st_ino, start, start + START_WINDOW, StartupFacts())
                self._files[path] = known
            if st.st_size == known.offset:
                return known.facts
            fh.seek(known.offset)
            data = fh.read(st.st_size - known.offset)
        base = known.offset
        known.offset = st.st_size
        cut = data.rfind(LAUNCH_MARKER)
        if cut >= 0 and base + cut > known.window_end - START_WINDOW:
            # A new run was appended: its own lines only.
            known.facts, known.tail = StartupFacts(), b""
            known.window_end = base + cut + START_WINDOW
            data, base = data[cut:], base + cut
        if base >= known.window_end:
            return known.facts
        data = known.tail + data[: known.window_end - base]
        head, sep, known.tail = data.rpartition(b"\n")
        if not sep:
            head, known.tail = b"", data
        known.facts = scan(candidate_lines(head), known.facts)
        return known.facts
