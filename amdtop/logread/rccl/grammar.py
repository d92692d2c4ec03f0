"""Regular expressions and cheap string tests for RCCL/NCCL log lines (amd.md §6).

The parser checks cheap substrings first (``str.find`` runs in C) and reaches for these only on the few lines that
carry facts, which keeps a 1M-line log fast.
"""

from __future__ import annotations

import re
from functools import lru_cache

from amdtop.logread.catalog import Catalog, load_catalog
from amdtop.logread.match import Match, Matcher

INFO_MARK = " NCCL INFO "
WARN_MARK = " NCCL WARN "
TRACE_MARK = " NCCL TRACE "
MAX_LINE = 16384
"""Longer lines are counted as unknown and not matched: a MB-long junk line must not cost regex time."""

# ``host:pid:tid [dev]`` at the end of the text before the NCCL marker; launcher prefixes simply sit before it.
HEADER_SHORT = re.compile(r"(?:^|[\s)\]>])([^\s:\[\]()]+) \[(\d+)\](?: (.*))?$")
"""``host [dev]`` without pid and tid (RCCL builds and launchers that print only ``node [0]``)."""
HEADER = re.compile(r"(?:^|[\s)\]>])([^\s:\[\]()]+):(\d+):(\d+) \[(\d+)\](?: (.*))?$")
COMM_INIT = re.compile(
    r"comm (0x[0-9a-fA-F]+) rank (\d+) nranks (\d+) cudaDev (\d+)(?: nvmlDev \d+)? busId ([0-9a-fA-F]+)"
)
COMM_ID = re.compile(r"commId (0x[0-9a-fA-F]+)")
COMM_NODES = re.compile(r"^comm (0x[0-9a-fA-F]+) rank (\d+) nRanks (\d+) nNodes (\d+)")
CHANNEL = re.compile(  # used with match(line, pos): no ^ (it would only match at 0)
    r"Channel (\d+)(?:/(\d+))? : (\d+)\[([0-9a-fA-F]+)\] -> (\d+)\[([0-9a-fA-F]+)\]"
    # a plugin's name may hold spaces (``NET/AWS Libfabric/1/GDRDMA``): a NET name runs on to its next ``/``
    r"(?: \[(send|receive)\])? via (NET/[^/\s]+(?: [^/\s]+)*/\S*|P2P/direct pointer\S*|\S+)"
    r"(?: comm (0x[0-9a-fA-F]+) nRanks (\d+))?"
)
COMM_SUFFIX = re.compile(r" comm (0x[0-9a-fA-F]+) nRanks (\d+)(?: busId ([0-9a-fA-F]+))?")
TREE_RANK = re.compile(r"->(\d+)->")
TIMINGS = re.compile(r"rank (\d+) nranks (\d+) total ([\d.]+)")
COLL_CHANNELS = re.compile(r"^(\d+) coll channels")
ENV_SET = re.compile(r"^([A-Z][A-Z0-9_]*) set by environment to (.*)$")
NCCL_VERSION = re.compile(r"NCCL version:? ?(\d+\.\d+\.\d+)")
RCCL_VERSION = re.compile(r"RCCL version\s*:?\s*(\d+\.\d+\.\d+)")
BANNER_CONT = re.compile(r"^(HIP|ROCm) version\s*:\s*(\S+)")
TRAIL = re.compile(r"(\S+?):(\d+) -> (\d+)(?: \[Async thread\])?\s*$")
WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(\d+), OpType=(\w+)"
    r"(?:, NumelIn=(\d+), NumelOut=(\d+))?, Timeout\(ms\)=(\d+)\) ran for (\d+) milliseconds"
)
TORCH_RANK = re.compile(r"\[Rank (\d+)\]|^\[rank(\d+)\]")
VLLM_NCCL = re.compile(r"vLLM is using nccl==(\S+)")
WARN_SOURCE = re.compile(r"(?:^|\s)(\S+\.(?:cc|cu|cpp|c|h)):(\d+)$")

NET_USING = re.compile(r"^(NET/[^:]+?) ?: Using (.*)$")
"""``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ...`` and ``NET/Socket : Using [0]eth0:10.0.0.1<0> ...``."""
NET_DEVICE = re.compile(r"\[(\d+)\]([^\s:\[\]]+)")
OFI_NIC = re.compile(r"^NET/OFI NIC group \d+ device #\d+ (\S+)")
OFI_PROVIDER = re.compile(r"^NET/OFI Selected Provider is (\S+)(?: \(found (\d+) nics\))?")
INIT_NIC = re.compile(r"^(?:(NET/[^:]+?) ?: ?)?Initializing NIC:? (?:#?\d+:? )?([^\s,;()]+)")
"""``[NET/<plugin> : ]Initializing NIC [<index>] <device>``: no public capture or source text of this line was found
(issue 27 names it); the form is assumed, so only the device token after an optional index is taken."""
USING_NETWORK = re.compile(r"^Using network (.+?)\s*$")
FATAL_MARK = "[FATAL ERROR]"


@lru_cache(maxsize=1)
def _fatal_matcher() -> Matcher:
    return Matcher(Catalog(tuple(e for e in load_catalog().entries if e.ends_communicator)))


@lru_cache(maxsize=1)
def _torch_nccl_error() -> Matcher:
    return Matcher(Catalog((load_catalog().by_id("pytorch.cuda_nccl_error"),)))


def torch_nccl_error(text: str) -> Match | None:
    """PyTorch's ``NCCL Error <result>: <text>`` (torch.cuda.nccl's throw_nccl_error), read by its catalog entry."""
    return _torch_nccl_error().match(text)


def ends_communicator(text: str) -> bool:
    """Whether a WARN's text is one after which the communicator cannot work, even when no return-code trail
    follows it: the catalog entries marked ``ends_communicator`` (IPC handles, reverse paths, proxy calls, GPU
    runtime calls in nccl.toml) say which."""
    return _fatal_matcher().match(text) is not None


RESULTS = {
    "1": "unhandled cuda error",
    "2": "unhandled system error",
    "3": "internal error",
    "4": "invalid argument",
    "5": "invalid usage",
    "6": "remote error",
    "7": "in progress",
}


def bus_id_of_bdf(bdf: str) -> str:
    """RCCL/NCCL's printed bus id of a PCI address: ``0000:c1:00.0`` -> ``c1000`` (hex digits as one number)."""
    digits = bdf.replace(":", "").replace(".", "")
    try:
        return f"{int(digits, 16):x}"
    except ValueError:
        return bdf.lower()


@lru_cache(maxsize=4096)  # a node has a few bus ids, printed on every Init, Trees and Connected line
def norm_bus_id(text: str) -> str:
    """Canonical form of a printed bus id (lowercase, no leading zeros)."""
    try:
        return f"{int(text, 16):x}"
    except ValueError:
        return text.lower()


def short_file(path: str) -> str:
    """Drop RCCL's long packaging build path: keep from the last ``src/`` on."""
    i = path.rfind("/src/")
    return path[i + 1 :] if i >= 0 else path


# -- incident facts (amdtop.logread.rccl.incidents) ----------------------------------------------------------------------------
LINE_NUMBER = re.compile(r"\[\d+\] ")
"""A log viewer's line-number prefix (``[80746] ``): all digits, unlike dmesg's ``[  12.345]`` or a date."""
REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
"""Ray's dedup suffix: never part of the line's message (nor of an environment value)."""
APP_PREFIX = re.compile(r"\((?P<name>[^()]*?)\s*pid=(?P<pid>\d+)(?:, ip=(?P<ip>[^)\s]+))?\) ")
"""``(RayWorkerWrapper pid=24036, ip=10.0.0.1) `` / ``(VllmWorker TP1 pid=2) `` / ``(Worker_TP1 pid=6987) ``."""
TP_RANK = re.compile(r"TP[_ ]?(\d+)")
PG_RANK = re.compile(
    r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s(\]]+))?(?: ?\((?P<name>[^)]*)\))? Rank (?P<rank>\d+)\]"
)
"""``[PG 1 Rank 0]``, ``[PG 0 (default_pg) Rank 12]`` (PyTorch 2.4-2.5), ``[PG ID 0 PG GUID 0(default_pg) Rank 1]``."""
TORCH_PROGRESS = re.compile(
    r"(?:at work|Timeout at NCCL work): (?P<at>\d+), last enqueued NCCL work: (?P<enq>-?\d+), "
    r"last completed NCCL work: (?P<done>-?\d+)"
)
TORCH_RECORD = re.compile(r"\[rank\d+\]:|\[(?:PG [^\]]*?)?Rank \d+\]")
"""Where a c10d record starts (torchrun's ``[rank3]:``, ProcessGroupNCCL's ``[Rank 3]`` / ``[PG ID 0 ... Rank 3]``):
in a line two processes wrote into each other, a match belongs to the record whose start is the last one before it."""
DESYNC_LAGGARDS = re.compile(
    r"^-? ?\[(?P<ranks>[\d, -]+)\] (?:joined but didn't finish collective #(?P<seq>\d+)|finished collective #\d+, "
    r"but didn't join collective #(?P<next>\d+))|ranks \[(?P<never>[\d, -]+)\] are the lagging ranks that caused this "
    r"timeout"
)
"""PyTorch's desync report (torch/csrc/distributed/c10d/TraceUtils.h ``retrieveDesyncReport``): ``[%s] joined but
didn't finish collective #%d (count from 1)``, ``[%s] finished collective #%d, but didn't join collective #%d (count
from 1)`` and ``ranks [%s] are the lagging ranks that caused this timeout. They never joined any collectives``."""
TORCH_TIME = re.compile(r"\[[EWI](?P<mo>\d\d)(?P<day>\d\d) (?P<h>\d\d):(?P<m>\d\d):(?P<s>\d\d(?:\.\d+)?) ")
"""glog's ``[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607]``: month, day and time of a c10d line."""
IB_COMPLETION = re.compile(
    r"Got completion (?:from peer (?P<peer>\S+) )?with (?:error |status=)(?:\w+\()?(?P<status>\d+)\)?,? "
    r"opcode[ =]?(?:\w+\()?(?P<opcode>\d+)\)?,? (?:len[ =]?(?P<len>\d+),? )?vendor[ _]err[ =]?(?P<vendor>\d+)"
    r"(?: \((?P<dir>\w+)\))?"
)
"""``NET/IB : Got completion from peer 10.0.0.2<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) ...``
(NCCL 2.19+) and the older ``Got completion with error 12, opcode 1, len 0, vendor err 129``."""


@lru_cache(maxsize=1)
def _signal_matcher() -> Matcher:
    return Matcher(Catalog(tuple(e for e in load_catalog().entries if e.id.startswith("pytorch.signal."))))


def signal_line(text: str) -> Match | None:
    """A process that died of a signal: abseil's (Ray's) failure handler, torchelastic, faulthandler, a supervisor,
    and tvm_ffi's backtrace handler (``!!!!!!! Segfault encountered !!!!!!!``: vLLM's stack loads it, and it replaces
    faulthandler's). The catalog's ``pytorch.signal.*`` entries say which lines these are; the match's ``sig`` (or
    ``what``, named by :data:`SIGNAL_OF`) and ``pid`` fields are the death's."""
    return _signal_matcher().match(text)


VLLM_WORKER_DIED = re.compile(
    r"Worker proc VllmWorker-(?P<rank>\d+) died unexpectedly(?: \(exit code: (?P<code>-?\d+|None)\))?"
)
"""vLLM's executor on a rank that vanished: ``VllmWorker-N`` is TP rank N; a negative exit code is the signal."""
SIGNAL_OF = {
    "Segmentation fault": "SIGSEGV",
    "Segfault": "SIGSEGV",
    "Aborted": "SIGABRT",
    "Bus error": "SIGBUS",
    "Floating point exception": "SIGFPE",
    "Illegal instruction": "SIGILL",
}
