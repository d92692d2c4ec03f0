"""The worker supervisor: launch, observe, stop, restart and retune the workers of one profile file."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import tomlkit

from amdtop.control import DemoLoad
from amdtop.errors import AmdtopError, InputError
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.supervisor import procs
from amdtop.supervisor.adopt import Adopted
from amdtop.supervisor.launchspec import build_env, preflight
from amdtop.supervisor.metrics import Prober
from amdtop.supervisor.observe import observe
from amdtop.supervisor.profiles import (
    Profile,
    load_profiles_lenient,
    parse_document,
    profiles_from_document,
    resolve_numa,
    validate_profiles,
)
from amdtop.supervisor.readiness import wait_ready
from amdtop.supervisor.rebuild import Recovery, rebuild_record
from amdtop.supervisor.retune import apply_changes, render_diff, write_profile_file
from amdtop.supervisor.scanpass import MISSING, Checked, Found, roots
from amdtop.supervisor.spawn import spawn
from amdtop.supervisor.state import StateStore, WorkerRecord
from amdtop.supervisor.stopper import StopReport, stop_run
from amdtop.telemetry.sim import SimBackend
from amdtop.thresholds import REDISCOVER_EVERY_S


class Gate(Protocol):
    """The launch gate as the supervisor calls it (:class:`amdtop.audit.gate.LaunchGate`: the supervisor sits below
    the audit and imports none of it)."""

    def enforce(self, profile: Profile, own_pids: Iterable[int], force: bool, action: str) -> tuple[str, ...]:
        """GateRefused unless the GPUs are fit or ``force``; the reasons forced past (to record)."""
        ...


class Supervisor:
    """Runs the workers of one TOML profile file; all state lives in ``state_dir`` so any amdtop can re-attach.

    Methods block (procfs reads, short HTTP calls, waiting for processes): call them from a worker thread in a UI.
    """

    def __init__(
        self,
        config: Path,
        state_dir: Path,
        *,
        gate: Gate,
        topology: Topology,
        vendor: str = "AMD",
        demo: bool = False,
        sim: SimBackend | None = None,
        readonly: bool = False,
        grace_s: float = 30.0,
        health_timeout_s: float = 0.5,
        log_max_bytes: int = 50 * 1024 * 1024,
        log_backups: int = 3,
        demo_port_base: int = 18080,
        lenient: bool = False,
    ) -> None:
        """Load and validate the profiles (InputError on any bad profile: nothing is started); every launch and
        restart passes ``gate`` first (a constructor argument, not a setting: no supervisor launches ungated).

        ``lenient`` keeps going past a bad file or a bad worker (the error is kept in :attr:`config_error`): status,
        stop and restart of a worker then work from its own launch record; launch and retune still refuse.
        """
        self.state_dir = Path(state_dir)
        self.topology = topology
        self.vendor = vendor
        self.demo = demo
        self.sim = sim
        self.readonly = readonly
        self.grace_s = grace_s
        self.log_max_bytes = log_max_bytes
        self.log_backups = log_backups
        self.store = StateStore(self.state_dir)
        if demo:
            from amdtop.supervisor.demo import ensure_demo_profiles

            config = ensure_demo_profiles(self.state_dir, topology, port_base=demo_port_base)
        self.config = Path(config)
        self._doc, self._profiles, self.config_error = load_profiles_lenient(self.config)
        if self.config_error is None:
            try:
                validate_profiles(self._profiles, topology)
            except InputError as exc:
                self.config_error = exc
        if self.config_error is not None and not lenient:
            raise self.config_error
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._last_stop: dict[str, StopReport] = {}
        self.prober = Prober(health_timeout_s)
        self._share_keys()
        self.full_scan_every_s = REDISCOVER_EVERY_S
        self._full_scan_at: float | None = None
        self.notes: list[str] = []
        """What the last :meth:`status` pass ignored among marked processes, one line each (shown, never fatal)."""
        self._gate = gate
        self._forced: dict[str, tuple[str, ...]] = {}

    # -- profiles ---------------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Profile names in file order."""
        return [p.name for p in self._profiles]

    def profile(self, name: str) -> Profile:
        """The profile ``name`` (InputError when unknown)."""
        for p in self._profiles:
            if p.name == name:
                return p
        known = ", ".join(self.names()) or "none"
        raise InputError(f"worker[{name}]: no such worker in {self.config}; use one of: {known}")

    def _find(self, name: str) -> Profile | None:
        # Names become file names in the state dir: never let one carry a path out of it.
        if not name or not all(c.isalnum() or c in "-_." for c in name) or name.strip(".") == "":
            raise InputError(f"worker[{name}]: not a worker name (letters, digits, -_. only)")
        return next((p for p in self._profiles if p.name == name), None)

    def _require_config(self) -> None:
        if self.config_error is not None:
            raise self.config_error

    def _own_profile(self, name: str) -> Profile:
        """``name``'s profile for starting it again: it must parse and validate on its own (other workers' errors do
        not count), InputError otherwise (nothing is stopped)."""
        profile = self._find(name)
        if profile is None:
            if self.config_error is not None:
                raise self.config_error
            raise InputError(
                f"worker[{name}]: not in {self.config}, so it cannot be started again; "
                f"stop it with 'amdtop workers stop {name}' or add its profile back"
            )
        validate_profiles([profile], self.topology)
        return profile

    def record(self, name: str) -> WorkerRecord | None:
        """The state record of ``name``'s current or last run (rebuilt from its processes when the file is bad)."""
        return self._recover(name, procs.scan()).record

    def _recover(
        self, name: str, table: dict[int, procs.ProcStat], found: Found | None = None, checked: Checked | None = None
    ) -> Recovery:
        """``name``'s launch record: the state file when it describes the live (or last) launch, else rebuilt from
        the processes that carry this state dir's marker, with the reason. ``checked`` is the state file as a status
        pass already read it (``StateStore.load_checked``)."""
        rec, problem = self.store.load_checked(name) if checked is None else checked
        if (
            rec is not None
            and rec.pid in table
            and table[rec.pid].start_ticks == rec.start_ticks
            and (rec.pid in self._spawned(name) or procs.still_ours(rec.pid, f"{name}:{rec.launch_id}"))
        ):
            return Recovery(rec, None)
        launches = (found or Found(self.state_dir))(table)
        live = launches.get(name)
        if live is None or (rec is not None and live.launch_id == rec.launch_id):
            return Recovery(rec, None if problem == "missing" else problem)
        if rec is None:
            why = "state file missing" if problem == "missing" else str(problem)
        else:
            why = f"state file names launch {rec.launch_id}, but launch {live.launch_id} is running"
        profile = self._find(name)
        rebuilt = rebuild_record(
            live, table, self.store, profile=profile, numa=None if profile is None else self._numa_or_none(profile),
            restarts=rec.restarts if rec else 0, reason=f"state rebuilt from its running processes: {why}",
        )  # fmt: skip
        self.store.adopt(rebuilt)
        return Recovery(rebuilt, rebuilt.rebuilt)

    def _share_keys(self) -> None:
        """Give the prober each keyed worker's API key (by URL), so its calls carry ``Authorization: Bearer``."""
        self.prober.keys = {p.url: p.api_keys[0] for p in self._profiles if p.api_keys}

    def api_key(self, name: str) -> str | None:
        """The API key worker ``name``'s clients must send (the first of its ``args.api-key``), ``None`` when open."""
        profile = self._find(name)
        return profile.api_keys[0] if profile is not None and profile.api_keys else None

    def _spawned(self, name: str) -> frozenset[int]:
        """The leader of ``name``'s launch when this supervisor spawned it and has not reaped it: ours from spawn, even
        while it execs (its environment then reads empty for a moment)."""
        child = self._children.get(name)
        return frozenset((child.pid,)) if child is not None and child.returncode is None else frozenset()

    def _numa_or_none(self, profile: Profile) -> int | None:
        try:
            return self._numa_for(profile)
        except InputError:
            return None

    def _check_writable(self, action: str) -> None:
        if self.readonly:
            raise InputError(f"--readonly: {action} is disabled; run amdtop without --readonly to control workers")

    # -- launch -----------------------------------------------------------------------------------------------------
    def launch(self, name: str, force: bool = False) -> WorkerStatus:
        """Start worker ``name`` in its own session, pinned, logging to its log file; returns its status at once.

        The launch gate refuses GPUs in a bad state unless ``force``."""
        self._check_writable("launch")
        self._require_config()
        profile = self.profile(name)
        self.store.check_writable()
        with self.store.lock(name):
            old = self._recover(name, procs.scan()).record
            live = (
                procs.members(
                    pgid=old.pgid, start_ticks=old.start_ticks, marker=f"{name}:{old.launch_id}", known=old.known
                )
                if old is not None
                else set()
            )
            if old is not None and old.pid in live:
                raise InputError(f"worker[{name}]: already running (pid {old.pid}); stop or restart it first")
            if live:
                raise InputError(
                    f"worker[{name}]: {len(live)} process(es) of its last run are still alive (pids "
                    f"{' '.join(map(str, sorted(live)))}); stop it first so they are swept"
                )
            self._gate_check(profile, force, "launch")
            self._start(profile, restarts=old.restarts if old else 0)
        return self.status_one(name)

    def _gate_check(self, profile: Profile, force: bool, action: str, own: Iterable[int] = ()) -> None:
        """The launch gate (amdtop.audit.gate), from this one place; the reasons ``force`` overrode are recorded."""
        self._forced[profile.name] = self._gate.enforce(profile, own, force, action)

    def _numa_for(self, profile: Profile) -> int | None:
        node = resolve_numa(profile, self.topology)
        if self.demo:
            from amdtop.supervisor.demo import demo_pinning

            node, _why = demo_pinning(node, os.environ)  # pinned where this host allows (the TUI says why not)
        return node

    def _start(self, profile: Profile, *, restarts: int) -> WorkerRecord:
        rec, child = spawn(
            profile, self._numa_for(profile), self.store, vendor=self.vendor, restarts=restarts,
            log_max_bytes=self.log_max_bytes, log_backups=self.log_backups, forced=self._forced.pop(profile.name, ()),
        )  # fmt: skip
        self._children[profile.name] = child
        try:
            self.store.save(rec)
        except AmdtopError as exc:
            # Never leave a worker that no record describes: take the launch back before reporting.
            stop_run(rec, 0.0, reap=lambda: self._reap(profile.name, forget=False))
            self._reap(profile.name)
            exc.args = (f"{exc}; the launch was rolled back (pid {child.pid} stopped)",)
            raise
        self.prober.forget(profile.name)
        return rec

    # -- stop -------------------------------------------------------------------------------------------------------
    def stop(self, name: str, grace: float | None = None) -> StopReport:
        """SIGTERM the group, wait ``grace`` (profile, then supervisor default), SIGKILL the group, sweep leftovers.

        Works from the launch's own record: neither the profile file nor the worker's entry in it need be valid.
        """
        self._check_writable("stop")
        profile = self._find(name)
        with self.store.lock(name):
            recovery = self._recover(name, procs.scan())
            if recovery.record is None and profile is None:
                raise InputError(
                    f"worker[{name}]: no such worker in {self.config} and no record or running process of it; "
                    f"use one of: {', '.join(self.names()) or 'none'}"
                )
            return self._stop(name, profile, grace, recovery)

    def _stop(self, name: str, profile: Profile | None, grace: float | None, recovery: Recovery) -> StopReport:
        rec = recovery.record
        if rec is None:
            why = f" ({recovery.reason}; no running process carries its marker)" if recovery.reason else ""
            return StopReport(name, (), (), (), (), f"{name}: not running, nothing to stop{why}")
        self._save_quietly(rec.with_(stopping=True))  # a stop goes on without it; the final record is what counts
        if grace is None:
            grace = profile.stop_grace_s if profile is not None and profile.stop_grace_s is not None else self.grace_s
        # The log read for vLLM's ids is always this worker's own log, whatever the record says.
        own = rec.with_(log=str(self.store.log_path(name)))
        report = stop_run(own, grace, reap=lambda: self._reap(name, forget=False))
        self._reap(name)
        final = rec.with_(stopping=False, stopped=True, shm=())
        failed = self._save_quietly(final)
        record_error = None
        # Status must never read a stopped worker as crashed: without room for a new file, rewrite the record in
        # place or drop it (a missing record reads as stopped); a stop that could not record itself says so.
        done = self.store.save_last_resort(final) if failed else None
        if failed and done != "rewritten in place":
            kept = "its state file was removed, so status shows it stopped" if done else "its state file is stale"
            record_error = f"{failed}; {name} is stopped but the stop was not recorded ({kept})"
        self.prober.forget(name)
        if recovery.reason:
            report = replace(report, message=f"{report.message} ({recovery.reason})")
        if record_error:
            report = replace(report, record_error=record_error)
        self._last_stop[name] = report
        return report

    def _save_quietly(self, rec: WorkerRecord) -> str:
        """Save ``rec``; returns the error line instead of raising (a stop goes on without its state file)."""
        try:
            self.store.save(rec)
        except AmdtopError as exc:
            return str(exc)
        return ""

    def _reap(self, name: str, *, forget: bool = True) -> None:
        child = self._children.get(name)
        if child is not None and child.poll() is not None and forget:
            self._children.pop(name, None)

    def last_stop(self, name: str) -> StopReport | None:
        """The report of the last stop of ``name`` by this supervisor (also the stop inside restart and retune)."""
        return self._last_stop.get(name)

    # -- restart / retune -------------------------------------------------------------------------------------------
    def restart(self, name: str, grace: float | None = None, force: bool = False) -> WorkerStatus:
        """Stop then launch ``name``, appending to the same log; counts a restart.

        Needs only ``name``'s own profile to be valid (other workers' errors do not count)."""
        self._check_writable("restart")
        profile = self._own_profile(name)
        # Bad input must not cost the running worker: check all but the port (still its own) before stopping.
        preflight(profile, self._numa_for(profile), build_env(profile, os.environ, vendor=self.vendor, marker="-"),
                  check_port=False)  # fmt: skip
        self.store.check_writable()
        with self.store.lock(name):
            recovery = self._recover(name, procs.scan())
            old = recovery.record
            own = self._own_pids(name, old)
            self._gate_check(profile, force, "restart", own)
            self._stop(name, profile, grace, recovery)
            self._start(profile, restarts=(old.restarts + 1) if old else 0)
        return self.status_one(name)

    def _own_pids(self, name: str, old: WorkerRecord | None) -> set[int]:
        """The live processes of ``name``'s recorded run (the gate never counts a worker's own ranks against it)."""
        if old is None:
            return set()
        return procs.members(
            pgid=old.pgid, start_ticks=old.start_ticks, marker=f"{name}:{old.launch_id}", known=old.known
        )

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        """The human diff of ``changes`` to ``name``'s profile; validates them (InputError), writes nothing."""
        self._require_config()
        self.profile(name)
        doc = tomlkit.parse(tomlkit.dumps(self._doc))
        changed = apply_changes(doc, name, changes)
        profiles = profiles_from_document(doc, str(self.config))
        validate_profiles(profiles, self.topology)
        self._check_restartable(name, profiles)
        return render_diff(name, changed)

    def retune(
        self, name: str, changes: Mapping[str, str], grace: float | None = None, force: bool = False
    ) -> WorkerStatus:
        """Apply ``changes``, write the profile file back (comments, mode, owner and symlink kept), and restart
        ``name`` if it runs."""
        self._check_writable("retune")
        self._require_config()
        self.profile(name)
        doc = tomlkit.parse(tomlkit.dumps(self._doc))
        apply_changes(doc, name, changes)
        profiles = profiles_from_document(doc, str(self.config))
        validate_profiles(profiles, self.topology)
        # Every check the restart would make comes before the write: a refused retune leaves the file as it was.
        self._check_restartable(name, profiles)
        if self.status_one(name).state is not WorkerState.STOPPED:
            # The launch gate too (GateRefused unless force): `audit --fix --yes` goes through here as well.
            changed = next(p for p in profiles if p.name == name)
            self._gate_check(changed, force, "restart", self._own_pids(name, self.record(name)))
        write_profile_file(self.config, tomlkit.dumps(doc))
        self._doc, self._profiles = doc, profiles
        self._share_keys()
        current = self.status_one(name)
        if current.state in (WorkerState.STOPPED,):
            return current
        return self.restart(name, grace, force)

    def _check_restartable(self, name: str, profiles: Sequence[Profile]) -> None:
        """The launch-time checks of ``name``'s changed profile (GPU visibility against gpus, numactl, the node on this
        host, the command), but the port, which the running worker holds itself; InputError, nothing written."""
        profile = next(p for p in profiles if p.name == name)
        env = build_env(profile, os.environ, vendor=self.vendor, marker="-")
        if self.status_one(name).state is not WorkerState.STOPPED:
            preflight(profile, self._numa_for(profile), env, check_port=False)

    # -- adopt ------------------------------------------------------------------------------------------------------
    def adopt(self, adopted: Adopted) -> None:
        """Add the profile :func:`amdtop.supervisor.adopt.adopt_profile` wrote for a found server to the profile file
        (created where missing; comments, mode and owner of an existing one kept). InputError, nothing written, when
        the name is taken or the profile would not validate."""
        self._check_writable("adopt")
        if self._find(adopted.name) is not None:
            raise InputError(
                f"worker[{adopted.name}]: already in {self.config}; adopt it under another name (--as NAME)"
            )
        try:
            old = self.config.read_text(encoding="utf-8")
        except FileNotFoundError:
            old = ""
        except OSError as exc:
            raise InputError(f"{self.config}: cannot read it ({exc.strerror}); fix its permissions") from None
        text = (old.rstrip() + "\n\n" if old.strip() else "") + adopted.toml
        doc = parse_document(text, str(self.config))
        profiles = profiles_from_document(doc, str(self.config))
        validate_profiles([p for p in profiles if p.name == adopted.name], self.topology)
        write_profile_file(self.config, text)
        self._doc, self._profiles = doc, profiles
        self._share_keys()

    # -- status -----------------------------------------------------------------------------------------------------
    def status(self) -> list[WorkerStatus]:
        """Status of every profile, in file order, then of workers this state dir still runs that are no longer in
        the file (procfs + one short HTTP call per running worker).

        Between full walks of procfs (every ``full_scan_every_s``; control actions scan on their own) only the trees
        of the recorded processes are read, so the cost follows the workers, not the host's process count; a worker
        whose state file broke is found again at the next full walk.
        """
        now = time.monotonic()
        # Each state file is read once per pass: for the process roots and for each worker's record.
        checked = {name: self.store.load_checked(name) for name in self.store.names()}
        if self._full_scan_at is None or now - self._full_scan_at >= self.full_scan_every_s:
            self._full_scan_at = now
            table = procs.scan()
        else:
            table = procs.scan_tree(roots(checked.values()))
        found = Found(self.state_dir)
        out = [self._status(p.name, p, table, found, checked.get(p.name, MISSING)) for p in self._profiles]
        listed = set(self.names())
        for name in sorted((set(checked) | set(found(table))) - listed):
            st = self._status(name, None, table, found, checked.get(name, MISSING))
            if st.pids:
                out.append(st)
        self.notes = list(found.notes)
        return out

    def demo_load(self) -> DemoLoad | None:
        """In demo mode, what sets the simulated GPUs' load from the demo workers' status (the pipeline calls it)."""
        if not self.demo or self.sim is None:
            return None
        sim, topology = self.sim, self.topology

        def feed(statuses: Sequence[WorkerStatus]) -> None:
            from amdtop.supervisor.demo import feed_demand

            feed_demand(sim, self._profiles, statuses, topology, alive=lambda pid: os.path.exists(f"/proc/{pid}"))

        return feed

    def status_one(self, name: str) -> WorkerStatus:
        """Status of worker ``name`` (a profile, or a worker of this state dir that still runs without one)."""
        table = procs.scan()
        profile = self._find(name)
        st = self._status(name, profile, table, Found(self.state_dir))
        if profile is None and not st.pids and self.store.load(name) is None:
            self.profile(name)  # raises the "no such worker" line
        return st

    def _status(
        self,
        name: str,
        profile: Profile | None,
        table: dict[int, procs.ProcStat],
        found: Found,
        checked: Checked | None = None,
    ) -> WorkerStatus:
        self._reap(name)
        recovery = self._recover(name, table, found, checked)
        return observe(
            name,
            profile,
            recovery.record,
            self.store,
            table,
            self.prober,
            topology=self.topology,
            demo=self.demo,
            note=recovery.reason,
            log_max_bytes=self.log_max_bytes,
            log_backups=self.log_backups,
            spawned=self._spawned(name),
        )

    def wait_ready(self, name: str, timeout: float = 120.0, poll: float = 0.5) -> WorkerStatus:
        """Block until ``name`` is ready; AmdtopError (with the last log line) if it crashes or times out."""
        return wait_ready(lambda: self.status_one(name), name, timeout, poll)

    def sleep(self, name: str, *, wake: bool = False, level: int = 1) -> str:
        """vLLM sleep mode for worker ``name``: sleep at ``level`` or wake (amdtop/supervisor/sleep.py)."""
        self._check_writable("wake" if wake else "sleep")
        from amdtop.supervisor.sleep import sleep_or_wake

        return sleep_or_wake(self.prober, self.status_one(name), wake=wake, level=level)

    def close(self) -> None:
        """Release the HTTP client (workers keep running)."""
        self.prober.close()
