"""Every threshold and cadence of the node pipeline and its analyses, in one place."""

from __future__ import annotations

TP_SPREAD_THRESHOLD_PCT = 15.0
"""A TP group whose GPUs differ by more than this ((max-min)/max of the window means) is flagged."""
TP_WINDOW_S = 5.0
"""The window over which each GPU's metric is averaged before the spread is taken: one odd tick neither raises nor
clears a flag."""
UTIL_IDLE_PCT = 5.0
"""Below this mean utilization a group is idle: 0.2 % against 1 % is not an imbalance."""
HISTORY_POINTS = 12
"""Points per GPU series a frame carries: the most any view reads (the GPU pane's sparkline). It was 300, wide enough
for a 200-column history pane drawn from the frame; the history pane now takes each frame's newest point and keeps
what it drew itself (widgets/gpu_history.py), and nothing read the other 288 (issue 53)."""
WORKERS_EVERY_S = 2.0
"""Worker status walks the workers' processes and calls each server over HTTP: every 2 s is enough (nvitop polls
processes every 2 s too); a control action asks for the next tick at once."""
PROCESSES_EVERY_S = 3.0
"""The GPU process lists (NVML's running processes and per-process utilisation: on a busy H200 most of a poll's CPU,
an ioctl into the driver) are read this often, not every tick; the Processes pane names the reading's time. A control
action asks for the next tick at once, as for the workers."""
REDISCOVER_EVERY_S = 30.0
"""Full walk of /proc for vLLM servers that hold no GPU the backend lists (CPU vLLM, a GPU process list the backend
cannot read): its cost grows with the host's process count, so it runs rarely."""
STATE_FILES_EVERY_S = 5.0
"""How often the probe cache and the ramp results in the state dir are checked for changes."""
GPU_FAULT_HOLD_S = 600.0
"""A ``gpu_fault`` flag stays up this long after amdtop last read a line of that fault: a fault is one line in the log,
and an operator who opens amdtop minutes later should still see what happened."""
NCCL_INIT_STALL_S = 60.0
"""A communicator of a live log whose init printed no progress (no rank reached a new phase, none completed) for this
long is ``nccl_init_stalled``: a healthy RCCL init of a TP group takes seconds, a hang never ends."""

STALL_RAISE_AFTER_S = 3.0
"""A stall verdict must hold this long before ``worker_stalled`` is raised (py-spy's dump stops a rank for ~0.1 s)."""

STALL_CLEAR_AFTER_S = 5.0
"""The worker must be judged ok this long before a raised ``worker_stalled`` clears (no flapping)."""

BLOCKED_RECHECK_S = 0.2
"""A rank read in state D is read once more this much later, and is blocked only if it is still in D: a process
paging in a file or inside one driver call sleeps in D for milliseconds (the parallel suite's stand-in SGLang ranks,
starting while a package installed beside them, were read in D once and called blocked)."""

STALL_NO_TOKENS_S = 15.0
"""No generated token for this long while requests are in flight counts as a stall (a long prefill takes seconds)."""

STALL_BUSY_CPU = 0.5
"""A rank using this share of one core (or its GPU this busy, percent below) is spinning, not idle."""

STALL_BUSY_GPU_PCT = 50.0

AUDIT_EVERY_S = 30.0
"""The tuning audit (amdtop/audit) reads environ, numa_maps and sysfs of every worker: the slow cadence, like the
full process walk; a control action asks for it at once."""
GATE_ORPHAN_VRAM_BYTES = 1024**3
"""VRAM in use on a GPU beyond what its live processes hold: more than this is memory a dead process left behind
(an idle MI300X reports ~283 MiB of driver reservations)."""
GATE_FREE_VRAM_SPREAD_PCT = 10.0
"""Free VRAM across a TP group may differ by this much ((max-min)/max) before a launch is refused: vLLM sizes the
KV cache of every rank by the smallest."""
GATE_IDLE_HOT_C = 70.0
"""An idle GPU at or above this temperature (junction) is not idle-cool: failing cooling or a stuck workload."""
LOCALITY_WARN_PCT = 80.0
"""Below this share of pages on the GPUs' node a worker pays cross-socket traffic on a good part of its host
memory (pinned staging buffers, the KV swap space, tokenizer and scheduler state). The audit's NUMA rule warns below it; the NUMA pane colours the measured share by it."""
