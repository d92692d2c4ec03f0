"""Known line prefixes: what they say (time, host, pid, rank, device, actor) and where the message starts.

Every prefix here is printed by a known program, so the matcher sees the emitter's own text:
- NCCL/RCCL ``host:pid:tid [dev] NCCL WARN`` (src/include/debug.h ``ncclDebugLog``: ``"%s:%d:%d [%d] NCCL %s "``);
- PyTorch ``[rank3]:`` (torch/distributed/elastic's per-rank prefix), glog ``[E1205 10:00:00.123456 1234
  ProcessGroupNCCL.cpp:616]`` (c10/util/Logging), and ProcessGroupNCCL's ``[Rank 3]`` / ``[PG ID 0 PG GUID 0(default_pg)
  Rank 3]`` (``logPrefix()``);
- Ray's ``(RayWorkerWrapper pid=123, ip=10.0.0.1)`` and ``(raylet, ip=10.0.0.1)`` (python/ray/_private/log_monitor.py);
- vLLM's ``INFO 12-05 10:00:00 [file.py:12]`` and ``(VllmWorker TP1 pid=7)`` (vllm/logger.py, multiproc executor),
  SGLang's ``[2025-01-01 10:00:00 TP3]`` (sglang/srt/utils.py ``configure_logger``);
- ISO timestamps, kernel ``[  12.345678]`` stamps and syslog ``Dec  5 10:00:00 host kernel:`` heads.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass

_NCCL = re.compile(
    r"(?:^|[\s)\]>]|(?<=<stdout>):|(?<=<stderr>):)(?P<host>[^\s:\[\]()]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:\S+ )?"
    r"NCCL (?:INFO|WARN|TRACE|ERROR) "
)
"""``host:pid:tid [dev] NCCL WARN``; with NCCL_DEBUG_FILE-less WARNs of NCCL 2.x and plugins, ``file.cc:66`` or
``func:line`` sits between the device and ``NCCL`` (``ncclDebugLog``'s ``"%s:%d:%d [%d] %s:%d NCCL WARN "``)."""
_NCCL_SHORT = re.compile(
    r"(?:^|[\s)\]>]|(?<=<stdout>):|(?<=<stderr>):)(?P<host>[^\s:\[\]()]+) \[(?P<dev>\d+)\] (?:\S+ )?NCCL (?:INFO|WARN|TRACE|ERROR) "
)
_NCCL_BARE = re.compile(r"^(?:[\w.<>~-]+:\d+ )?NCCL (?:INFO|WARN|TRACE|ERROR) ")
"""NCCL's level word without the ``host:pid:tid [dev]`` head: the message pasted alone (an issue title, a quoted
line) or after another tool's prefix, with or without the ``func:line`` that ``ncclDebugLog`` puts before ``NCCL WARN``
for WARNs (src/debug.cc: ``"%s:%d:%d [%d] %s:%d NCCL WARN "``). The host, pid and device it would name are unknown."""
_RAY = re.compile(
    r"^\((?:(?P<actor>[^()=,]+?)\s+)?pid=(?P<pid>\d+)(?:,\s*ip=(?P<ip>[^)\s,]+))?[^)]*\)\s*"
    r"|^\((?P<actor2>raylet|gcs_server|dashboard[\w-]*|autoscaler|monitor)(?:,\s*ip=(?P<ip2>[^)\s,]+))?\)\s*"
)
_TORCH_RANK = re.compile(r"^\[(?:rank|Rank |default)(?P<rank>\d+)\]:?\s*")
_GLOG = re.compile(
    r"^\[?(?P<lvl>[IWEF])(?P<mo>\d\d)(?P<d>\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?\s+\d+\s+[\w./-]+:\d+\]\s*"
)
_GLOG_NODATE = re.compile(r"^\[(?P<lvl>[IWEF]) [\w./-]+:\d+\]\s*")
"""glog's head of PyTorch 2.0-2.2 (``[E ProcessGroupNCCL.cpp:1316]``): no date, no time."""
_PG = re.compile(r"^\[(?:PG (?:ID )?(?P<pg>[^\]]*?) )?Rank (?P<rank>\d+)\]\s*")
_ISO = re.compile(
    r"^\[?(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r"(?: (?P<tp>(?:TP|DP|PP|EP)\d+[^\]]*))?\]?\s*(?:[-|:]\s*)?"
)
_SGLANG_SCOPE = r"(?:TP|DP|PP|EP|CP|[A-Z]+_(?:DP|TP|CP))\d+(?: (?:TP|DP|PP|EP|CP|[A-Z]+_(?:DP|TP|CP))\d+)*"
_SGLANG = re.compile(
    r"^\[(?:(?P<mo>\d\d)-(?P<d>\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?(?: (?P<tp>" + _SGLANG_SCOPE + r"))?"
    r"|(?P<tp2>" + _SGLANG_SCOPE + r"))\]\s*"
)
"""SGLang's ``configure_logger`` head (python/sglang/srt/utils/common.py: ``f"[%(asctime)s{prefix}] %(message)s"``,
the prefix built in scheduler.py ``run_scheduler_process`` as `` DP{dp_rank}`` `` TP{tp_rank}`` `` EP{ep_rank}``
`` PP{pp_rank}``): ``datefmt="%m-%d %H:%M:%S"`` since 2025 (the dated form is :data:`_ISO`'s), or the bare ``[TP0]``
where the time was cut or a logging config printed none."""
_VLLM = re.compile(
    r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<mo>\d\d)-(?P<d>\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
    r"(?:\[[^\]]*\]\s*)?"
)
_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\s*(?::\s*|-\s+)?")
_KERNEL = re.compile(r"^(?:<\d+>)?\[\s*(?P<up>\d+\.\d+)\]\s*")
_SYSLOG = re.compile(
    r"^(?P<mon>[A-Z][a-z]{2}) +(?P<d>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d) (?P<host>\S+) (?P<prog>[^:\[\s]+)(?:\[\d+\])?:\s*"
)
_TP = re.compile(r"(?:\bTP|Worker_TP|VllmWorker-|VllmWorker TP|\btp_rank=?)(\d+)")
_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}


@dataclass(frozen=True, slots=True)
class Head:
    """What a line's prefixes say, and the message after them."""

    text: str
    """The message after the known prefixes (the emitter's own text)."""
    time: float | None = None
    """Seconds on the log's own clock (epoch for dated stamps; uptime for kernel stamps), where a prefix says."""
    host: str | None = None
    pid: int | None = None
    rank: int | None = None
    """The rank the prefix names (PyTorch ``[rank3]:``, ``[Rank 3]``, a ``TP3`` tag), never NCCL's ``[dev]``."""
    dev: int | None = None
    """The local device of an NCCL/RCCL line head (``[N]``)."""
    actor: str | None = None
    """Ray actor / process name of a Ray or vLLM prefix (``RayWorkerWrapper``, ``raylet``, ``VllmWorker TP1``)."""
    group: str | None = None
    """Process group of a ProcessGroupNCCL prefix (``0(default_pg)``)."""
    label: str | None = None
    """The parallel scope as the emitter printed it (SGLang's ``TP2``, ``DP0 TP2 EP2``): a verdict names it as is."""


def _hms(hms: str) -> float:
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def _yearless(mo: int, d: int, hms: str) -> float:
    # month-day stamps (glog, vLLM, syslog) carry no year: order within one log is all they must give
    return ((mo * 31 + d) * 86400) + _hms(hms)


def read_head(line: str) -> Head:
    """Strip the known prefixes of ``line`` (any order, any nesting of launchers) and say what they named."""
    text = line.strip()
    t: float | None = None
    host = actor = group = label = None
    pid = rank = dev = None
    for _ in range(8):  # a prefix per launcher: Ray over vLLM over PyTorch over NCCL, at most a handful
        c = text[:1]
        if c == "(":
            m = _RAY.match(text)
            if m:
                actor = (m.group("actor") or m.group("actor2") or actor or "").strip() or actor
                pid = int(m.group("pid")) if m.group("pid") else pid
                host = m.group("ip") or m.group("ip2") or host
                tp = _TP.search(actor or "")
                if tp and rank is None:
                    rank = int(tp.group(1))
                text = text[m.end() :]
                continue
            break
        if c.isdigit() or (c == "[" and text[1:2].isdigit() and text[1:5].isdigit()):
            m = _ISO.match(text)
            if m:
                try:
                    t = calendar.timegm(time.strptime(f"{m.group('date')} {m.group('hms')}", "%Y-%m-%d %H:%M:%S"))
                    t += float("0." + m.group("frac")[1:]) if m.group("frac") else 0.0
                except ValueError:
                    pass
                if m.group("tp"):
                    label = label or m.group("tp").strip()
                    tp = _TP.search(m.group("tp"))
                    if tp and rank is None:
                        rank = int(tp.group(1))
                text = text[m.end() :]
                continue
        if c == "[" or c == "<":
            m = _SGLANG.match(text)
            if m:
                if m.group("hms"):
                    t = _yearless(int(m.group("mo")), int(m.group("d")), m.group("hms"))
                scope = m.group("tp") or m.group("tp2")
                label = label or scope
                tp = _TP.search(scope or "")
                if tp and rank is None:
                    rank = int(tp.group(1))
                text = text[m.end() :]
                continue
            m = _TORCH_RANK.match(text)
            if m:
                rank = int(m.group("rank"))
                text = text[m.end() :]
                continue
            m = _GLOG.match(text)
            if m:
                t = _yearless(int(m.group("mo")), int(m.group("d")), m.group("hms"))
                text = text[m.end() :]
                continue
            m = _GLOG_NODATE.match(text)
            if m:
                text = text[m.end() :]
                continue
            m = _PG.match(text)
            if m:
                # torchrun's ``[rank4]:`` is the global rank; ``[PG 5 Rank 0]`` the rank within that group
                rank = int(m.group("rank")) if rank is None else rank
                group = m.group("pg") or group
                text = text[m.end() :]
                continue
            m = _KERNEL.match(text)
            if m:
                t = float(m.group("up")) if t is None else t
                text = text[m.end() :]
                continue
            break
        if c.isupper():
            m = _VLLM.match(text)
            if m:
                t = _yearless(int(m.group("mo")), int(m.group("d")), m.group("hms"))
                text = text[m.end() :]
                continue
            m = _SYSLOG.match(text)
            if m and m.group("mon") in _MONTHS:
                t = _yearless(_MONTHS[m.group("mon")], int(m.group("d")), m.group("hms"))
                host = host or m.group("host")
                text = text[m.end() :]
                continue
        break
    m = (_NCCL.search(text) or _NCCL_SHORT.search(text)) if " NCCL " in text else None
    if m:
        host = m.group("host").split(".")[0]
        dev = int(m.group("dev"))
        if "pid" in m.groupdict():
            pid = int(m.group("pid"))
        text = text[m.end() :]
    else:
        m = _NCCL_BARE.match(text) or _LEVEL.match(text)
        if m:
            text = text[m.end() :]
    return Head(text=text, time=t, host=host, pid=pid, rank=rank, dev=dev, actor=actor, group=group, label=label)
