"""Per-process communicator lines (Init, Trees, Channel, Connected) into :class:`ProcComm` views, and the line
header cache: the communicator half of the parser. :mod:`amdtop.logread.rccl.join` joins the views afterwards.
"""

from __future__ import annotations

from amdtop.logread.rccl import grammar as g
from amdtop.logread.rccl import phases as ph
from amdtop.logread.rccl.state import ProcComm, ProcKey, ThreadKey

Head = tuple[str | None, int | None, int | None, int | None, str]
"""``(host, pid, tid, dev, rest)`` of the text before an NCCL marker."""
Seen = set[tuple[str, str | None, str | None]]
"""``(channel, connIndex, direction)`` seen over one rank pair's transport (a value of :attr:`ProcComm.edges`)."""


class CommLines:
    """Communicator state and the handlers of the lines that feed it; :class:`LogParser` adds the rest."""

    def __init__(self) -> None:
        self.library: str | None = None
        self.procs: list[ProcComm] = []
        self.unknown = 0
        self.transports: dict[str, int] = {}
        self.trail_key: tuple[str, str] | None = None
        self._by_ptr: dict[tuple[str | None, int | None, str], ProcComm] = {}
        self._by_thread: dict[ThreadKey, ProcComm] = {}
        self._proc_last: dict[ProcKey, ProcComm] = {}
        self._base = 0
        self._heads: dict[str, Head] = {}
        self._chan_comm: dict[tuple[str, str | None], ProcComm] = {}
        self._chan_rest: dict[tuple[str, str], tuple[Seen, str, str | None]] = {}

    def header(self, head: str) -> Head:
        """``(host, pid, tid, dev, rest)`` of the text before an NCCL marker (cached: a few heads repeat)."""
        got = self._heads.get(head)
        if got is not None:
            return got
        m = g.HEADER.search(head)
        if m is None:
            short = g.HEADER_SHORT.search(head.rstrip())
            if short is None:
                got = (None, None, None, None, head)
            else:  # ``node [0]``: a host and a device, no pid
                got = (short.group(1).split(".", 1)[0], None, None, int(short.group(2)), short.group(3) or "")
        else:
            got = (m.group(1).split(".", 1)[0], int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5) or "")
        if len(self._heads) > 4096:
            self._heads.clear()
        self._heads[head] = got
        return got

    def _new_comm(self, host: str | None, pid: int | None, tid: int | None, ptr: str | None, seq: int) -> ProcComm:
        pc = ProcComm(host, pid, ptr, seq)
        self.procs.append(pc)
        if ptr is not None:
            self._by_ptr[(host, pid, ptr)] = pc
        self._by_thread[(host, pid, tid)] = pc
        self._proc_last[(host, pid)] = pc
        return pc

    def _comm_for(self, head: str, ptr: str | None, nranks: int | None, lineno: int) -> ProcComm:
        host, pid, tid, dev, _ = self.header(head)
        pc = None
        if ptr is not None:
            pc = self._by_ptr.get((host, pid, ptr))
        if pc is None:
            pc = self._by_thread.get((host, pid, tid)) or self._proc_last.get((host, pid))
            if pc is not None and ptr is not None and pc.ptr is not None and pc.ptr != ptr:
                pc = None  # another pointer: another communicator of this process
        if pc is None:
            pc = self._new_comm(host, pid, tid, ptr, self._base + lineno)
            pc.dev = dev  # the printing thread's device; an Init line, when it comes, says it for sure
        elif ptr is not None and pc.ptr is None:
            pc.ptr = ptr
            self._by_ptr[(host, pid, ptr)] = pc
        if nranks and not pc.nranks:
            pc.nranks = nranks
        return pc

    def current_comm(self, host: str | None, pid: int | None, tid: int | None) -> ProcComm | None:
        """The communicator the thread (else the process) last printed about."""
        return self._by_thread.get((host, pid, tid)) or self._proc_last.get((host, pid))

    def _init(self, head: str, msg: str, lineno: int) -> None:
        self._chan_comm.clear()
        self._chan_rest.clear()
        seq = self._base + lineno
        m = g.COMM_INIT.search(msg)
        if m is None:
            if "Destroy COMPLETE" in msg or "Abort COMPLETE" in msg:
                ptr = msg.split(" ", 2)[1] if msg.startswith("comm ") else None
                self._comm_for(head, ptr, None, lineno).ended = "aborted" if "Abort" in msg else "destroyed"
            return
        host, pid, tid, _dev, _ = self.header(head)
        ptr, rank_s, nranks_s, dev_s, bus = m.groups()
        rank, nranks = int(rank_s), int(nranks_s)
        pc = self._by_ptr.get((host, pid, ptr))
        if pc is None or pc.ended is not None or (pc.rank is not None and pc.rank != rank):
            pc = self._new_comm(host, pid, tid, ptr, seq)  # a pointer reused after teardown is a new communicator
        self._by_thread[(host, pid, tid)] = self._proc_last[(host, pid)] = pc
        pc.rank, pc.nranks = rank, nranks
        pc.dev, pc.bus_id = int(dev_s), g.norm_bus_id(bus)
        idm = g.COMM_ID.search(msg)
        if idm:
            pc.comm_id = idm.group(1)
        if "Init START" in msg:
            pc.started_seq = seq
            pc.phase = max(pc.phase, ph.INIT_START)
        elif "Init COMPLETE" in msg:
            pc.complete_seq = seq
            pc.phase = ph.COMPLETE
        elif "Destroy COMPLETE" in msg or "Abort COMPLETE" in msg:
            pc.ended = "aborted" if "Abort" in msg else "destroyed"

    def _trees(self, head: str, msg: str, lineno: int) -> None:
        # old NCCL prints Trees without the ``comm 0x… nRanks`` suffix: the process's current communicator
        m = g.COMM_SUFFIX.search(msg) if " comm 0x" in msg else None
        r = g.TREE_RANK.search(msg)
        if r is None:
            return
        pc = self._comm_for(head, m.group(1) if m else None, int(m.group(2)) if m else None, lineno)
        if pc.rank is None:
            pc.printers.add(int(r.group(1)))
        if m and pc.bus_id is None and m.group(3):
            pc.bus_id = g.norm_bus_id(m.group(3))
        pc.phase = max(pc.phase, ph.TREES)

    def _channel(self, line: str, i: int, lineno: int) -> None:
        self.trail_key = None
        # ``Channel <ch>[/<conn>] : <rest>``: every channel of a rank pair prints the same rest (ranks, bus ids,
        # transport, comm), so a rest met since the last Init line needs no regex: only its channel is new
        j = line.find(" : ", i + 19)
        ch, sep, conn = line[i + 19 : j].partition("/")
        known = None
        if j > 0 and ch.isdecimal() and (not sep or conn.isdecimal()) and "\ufffd" not in line:
            known = (line[:i], line[j:])
            hit = self._chan_rest.get(known)
            if hit is not None:
                chans, kind, way = hit
                before = len(chans)
                chans.add((ch, conn if sep else None, way))
                if len(chans) > before:
                    self.transports[kind] = self.transports.get(kind, 0) + 1
                return
        m = g.CHANNEL.match(line, i + 11)
        if m is None or "\ufffd" in line:
            self.unknown += 1
            return
        ch, conn, src, sbus, dst, dbus, direction, transport, ptr, nr = m.groups()
        # channel lines come in runs from one thread: cache the comm per (head, ptr); Init lines clear the cache
        head = line[:i]
        pc = self._chan_comm.get((head, ptr))
        if pc is None:
            if self.library is None and ptr is not None:
                self.library = "RCCL"
            pc = self._comm_for(head, ptr, int(nr) if nr else None, lineno)
            self._chan_comm[(head, ptr)] = pc
        key = (src, dst, transport)
        seen = pc.edges.get(key)
        if seen is None:
            seen = pc.edges[key] = set()
            self._channel_ranks(pc, int(src), sbus, int(dst), dbus, direction, ptr)
            if pc.phase < ph.CONNECTING:
                pc.phase = ph.CONNECTING
        elif direction is not None:
            self._channel_ranks(pc, int(src), sbus, int(dst), dbus, direction, ptr)
        before = len(seen)
        seen.add((ch, conn, direction))
        if len(seen) > before:
            self.transports[transport] = self.transports.get(transport, 0) + 1
        if known is not None:
            # same comm (until an Init line), same edge; _channel_ranks only fills what is missing: nothing to redo
            self._chan_rest[known] = (seen, transport, direction)

    @staticmethod
    def _channel_ranks(
        pc: ProcComm, s: int, sbus: str, d: int, dbus: str, direction: str | None, ptr: str | None
    ) -> None:
        if ptr is not None or (len(sbus) >= 4 and len(dbus) >= 4):
            # rank[x] is a bus id in RCCL and old NCCL, a cudaDev in NCCL >= 2.19: trust it with the comm suffix, or
            # where it has the 4+ hex digits of a bus id (``[receive]`` lines name the remote rank's one; a cudaDev
            # never has that many)
            peers = pc.peers
            if s not in peers:
                peers[s] = g.norm_bus_id(sbus)
            if d not in peers:
                peers[d] = g.norm_bus_id(dbus)
        if pc.rank is None:
            pc.printers.add(d if direction == "receive" else s)

    def _connected(self, head: str, msg: str, lineno: int) -> None:
        m = g.COMM_SUFFIX.search(msg) if " comm 0x" in msg else None
        pc = self._comm_for(head, m.group(1) if m else None, int(m.group(2)) if m else None, lineno)
        if m and m.group(3) and pc.bus_id is None:
            pc.bus_id = g.norm_bus_id(m.group(3))
        if "rings" in msg:
            pc.rings = True
            pc.phase = max(pc.phase, ph.RINGS)
        else:
            pc.trees = True
            pc.phase = max(pc.phase, ph.TREES_CONNECTED)

    def rank_of(self, host: str | None, pid: int | None, dev: int | None) -> int | None:
        """The rank a process holds in its newest communicator (one rank per process in vLLM/torchrun); else dev."""
        pc = self._proc_last.get((host, pid))
        if pc is not None and pc.rank is not None and (dev is None or pc.dev is None or pc.dev == dev):
            return pc.rank
        return dev

    def named_rank(self, host: str | None, pid: int | None, dev: int | None) -> int | None:
        """The rank the process's own communicator lines name, ``None`` where none did (never the device)."""
        rank = self.rank_of(host, pid, dev)
        pc = self._proc_last.get((host, pid))
        return rank if pc is not None and pc.rank is not None and rank == pc.rank else None

    def rank_of_pid(self, pid: int) -> int | None:
        """The rank a process of pid ``pid`` (on any host) named in its communicator lines, ``None`` where none."""
        for (_host, p), pc in self._proc_last.items():
            if p == pid and pc.rank is not None:
                return pc.rank
        return None

    def seq(self, lineno: int) -> int:
        """Global sequence number of line ``lineno`` of the file being fed."""
        return self._base + lineno


def suffix_ptr(msg: str) -> str | None:
    if " comm 0x" not in msg:
        return None
    m = g.COMM_SUFFIX.search(msg)
    return m.group(1) if m else None
