"""Start the quiet step's first vLLM servers ahead of it, beside the serial step (run-tests).

The serial step leaves half of the two cores idle (tmux and browser tests wait on screens: 119 s of wall, 50 % idle
by /proc/stat), and the quiet step began with 100-140 s of nothing but vLLM starts (the session's TP=1 worker, the
DP=2 and the small-KV servers side by side). Launched here, they start in that idle half; the quiet session adopts
them (``AMDTOP_E2E_PRESTARTED``: tests/e2e/conftest.py) when their profile is the one the session would launch, and
launches its own otherwise. run-tests waits for them to be ready before the quiet step, so the quiet tests still get
the machine to themselves, and stops whatever is left when it exits.

    python -m tests.e2e.prestart launch DIR   # launch each server into DIR/<name>, return at once
    python -m tests.e2e.prestart wait DIR     # until each is ready (exit 1 naming one that is not)
    python -m tests.e2e.prestart stop DIR     # stop whatever of them still runs
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from amdtop.model import WorkerState
from amdtop.procinfo import descendants
from amdtop.supervisor import Supervisor
from tests.e2e import test_dp_vllm, test_found_vllm, test_ramp_cause_vllm  # noqa: F401  (EARLY's servers)
from tests.e2e.conftest import EARLY, READY_TIMEOUT_S, TP1_PORT, VLLM_CACHE_ROOT, e2e_supervisor, renice, tp1_profile


def servers() -> dict[str, Callable[[], str]]:
    """Worker name -> its profile: the session's TP=1 worker and the servers launched beside it."""
    out: dict[str, Callable[[], str]] = {"tp1": lambda: tp1_profile(TP1_PORT)}
    out.update({name: profile for name, profile in EARLY.values()})
    return out


def launch(top: Path) -> None:
    VLLM_CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    # At nice 19 (inherited by every process of the servers) they take only the CPU the serial tests leave: at nice 0
    # they held it while a tmux test waited for the demo's workers, the serial step took 169 s instead of 119, and a
    # test gave up waiting (20 s). ``wait`` gives them nice 0 back once they are up.
    os.nice(19)
    for name, profile in servers().items():
        root = top / name
        root.mkdir(parents=True, exist_ok=True)
        (root / "workers.toml").write_text(profile())
        sup = e2e_supervisor(root)
        try:
            sup.launch(name)
        finally:
            sup.close()
        print(f"prestart: {name} launched ({root})")
    # The server amdtop did not start (tests/e2e/test_found_vllm.py), started by hand as a user would.
    pid = test_found_vllm.start_by_hand(top / "found")
    print(f"prestart: found started by hand (pid {pid})")


def launched(top: Path) -> Iterator[tuple[str, Supervisor]]:
    """Each server launched into ``top``, with its supervisor (closed when the caller moves on)."""
    for name in servers():
        root = top / name
        if not (root / "workers.toml").exists():
            continue
        sup = e2e_supervisor(root)
        try:
            yield name, sup
        finally:
            sup.close()


def wait(top: Path) -> int:
    _root, pid = test_found_vllm.prestarted_in(top)
    if pid is not None:
        try:
            test_found_vllm.wait_ready(pid, top / "found" / "serve.log", timeout=2 * READY_TIMEOUT_S)
        except AssertionError as exc:  # the module then starts its own and reports the failure itself
            print(f"prestart: found not ready: {exc}", file=sys.stderr)
            return 1
        renice(descendants({pid}), 0)
    for name, sup in launched(top):
        try:
            st = sup.wait_ready(name, timeout=2 * READY_TIMEOUT_S)
        except Exception as exc:  # the quiet step then launches its own and reports the failure itself
            print(f"prestart: {name} not ready: {exc}", file=sys.stderr)
            return 1
        renice(st.pids, 0)
    return 0


def stop(top: Path) -> None:
    _root, pid = test_found_vllm.prestarted_in(top)
    if pid is not None:
        test_found_vllm.stop_by_hand(pid)
        print("prestart: found stopped")
    for name, sup in launched(top):
        if sup.status_one(name).state is not WorkerState.STOPPED:
            print(f"prestart: {sup.stop(name).message}")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("launch", "wait", "stop"):
        print("usage: python -m tests.e2e.prestart {launch|wait|stop} DIR", file=sys.stderr)
        return 2
    top = Path(argv[1]).resolve()
    if argv[0] == "launch":
        launch(top)
        return 0
    if argv[0] == "wait":
        return wait(top)
    stop(top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
