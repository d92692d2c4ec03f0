"""A ramp step never outlives its bound, and a ramp's loop never outlives the ramp.

Every await inside a step has its own deadline (request, drain, scrape), so a step's length is known from its settings.
A step that runs past that length waits somewhere no deadline covers (CI saw one ramp in the serve stay "running" for
over 120 s against a simulated worker, its loop idle): rather than hang the ramp, and with it the ramp pane of every
viewer, the step is given up and the ramp ends, aborted, saying where its tasks were waiting, so that the next
occurrence names its cause.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

SLACK_S = 30.0
"""Added to a step's computed length: the worker-pid lookup and the GPU observer run in threads on a loaded host."""
LEFTOVER_GRACE_S = 5.0
"""How long the ramp's loop waits for tasks left behind by a step it gave up (they are cancelled first)."""


class StepOverran(Exception):
    """A step ran past its bound; the message says where its tasks were waiting."""


def where_waiting(tasks: set[asyncio.Task[Any]], limit: int = 4) -> str:
    """The innermost frame of each unfinished task (``function (file:line)``), distinct ones, at most ``limit``."""
    seen: list[str] = []
    for task in tasks:
        if task.done():
            continue
        stack = task.get_stack()
        if not stack:
            continue
        frame = stack[-1]
        code = frame.f_code
        spot = f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})"
        if spot not in seen:
            seen.append(spot)
    more = f" and {len(seen) - limit} more" if len(seen) > limit else ""
    return ", ".join(seen[:limit]) + more if seen else "no task is waiting"


async def bounded(coro: Coroutine[Any, Any, T], bound_s: float, what: str) -> T:
    """Await ``coro`` for at most ``bound_s``; past it, cancel it without waiting and raise :class:`StepOverran`.

    ``asyncio.wait_for`` is not used: on a timeout it waits for the cancelled work to finish, which is the very wait
    that may never end."""
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=bound_s)
    if task in done:
        return task.result()
    current = asyncio.current_task()
    where = where_waiting({t for t in asyncio.all_tasks() if t is not current})
    task.cancel()
    raise StepOverran(f"{what} ran past its bound of {bound_s:.1f} s (waiting in {where})")


def run_fresh(coro: Coroutine[Any, Any, T], grace_s: float | None = None) -> T:
    """``asyncio.run`` whose clean-up is bounded: tasks left behind are cancelled and given ``grace_s`` (default
    :data:`LEFTOVER_GRACE_S`), then the loop is closed whatever they do (``asyncio.run`` waits for them without end)."""
    grace_s = LEFTOVER_GRACE_S if grace_s is None else grace_s
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.wait(left, timeout=grace_s))
            gens = loop.create_task(loop.shutdown_asyncgens())
            loop.run_until_complete(asyncio.wait({gens}, timeout=grace_s))
        finally:
            loop.close()
