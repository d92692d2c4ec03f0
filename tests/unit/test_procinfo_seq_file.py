"""``/proc/PID/numa_maps`` is written a page per read: it is read whole (issue 53: the audit saw the first page)."""

from __future__ import annotations

import mmap
import os

from amdtop.audit.numa_maps import node_kib
from amdtop.procinfo import read_proc_bytes, read_seq_file


def test_numa_maps_is_read_past_its_first_page() -> None:
    # Mappings of alternating protection do not merge: one numa_maps line each, far more than a page of text.
    maps = [
        mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ if i % 2 else mmap.PROT_READ | mmap.PROT_WRITE)
        for i in range(300)
    ]
    try:
        whole = read_seq_file(os.getpid(), "numa_maps")
        lines = whole.count(b"\n")
        assert len(whole) > 4 * mmap.PAGESIZE and lines >= 300
        # The same text as a buffered read to the end (a few lines may come or go between the two reads).
        with open(f"/proc/{os.getpid()}/numa_maps", "rb") as fh:
            assert abs(fh.read().count(b"\n") - lines) < 10
        assert sum(node_kib(whole).values()) > 0
        # The single-read helper stops at the first page: why the audit must not use it for this file.
        assert len(read_proc_bytes(os.getpid(), "numa_maps")) < len(whole)
    finally:
        for m in maps:
            m.close()
