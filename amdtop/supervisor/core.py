"""The worker supervisor: launch, observe, stop, restart and retune the workers of one profile file."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import tomlkit

from amdtop.errors import AmdtopError, InputError
from amdtop.model import Topology, WorkerState, WorkerStatus
from amdtop.supervisor import procs
from amdtop.supervisor.launchspec import build_argv, build_env, preflight, systemd_usable
from amdtop.supervisor.metrics import Prober
from amdtop.supervisor.observe import observe
from amdtop.supervisor.profiles import Profile, load_profiles, profiles_from_document, resolve_numa, validate_profiles
from amdtop.supervisor.retune import apply_changes, render_diff
from amdtop.supervisor.state import StateStore, WorkerRecord, mask_env, rotate_log
from amdtop.supervisor.stopper import StopReport, stop_run
from amdtop.telemetry.sim import SimBackend


class Supervisor:
    """Runs the workers of one TOML profile file; all state lives in ``state_dir`` so any amdtop can re-attach.

    Methods block (procfs reads, short HTTP calls, waiting for processes): call them from a worker thread in a UI.
    """

    def __init__(
        self,
        config: Path,
        state_dir: Path,
        *,
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
    ) -> None:
        """Load and validate the profiles (InputError on any bad profile: nothing is started)."""
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
        self._doc, self._profiles = load_profiles(self.config)
        validate_profiles(self._profiles, topology)
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._last_stop: dict[str, StopReport] = {}
        self.prober = Prober(health_timeout_s)

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

    def record(self, name: str) -> WorkerRecord | None:
        """The state record of ``name``'s current or last run."""
        return self.store.load(name)

    def _check_writable(self, action: str) -> None:
        if self.readonly:
            raise InputError(f"--readonly: {action} is disabled; run amdtop without --readonly to control workers")

    # -- launch -----------------------------------------------------------------------------------------------------
    def launch(self, name: str) -> WorkerStatus:
        """Start worker ``name`` in its own session, pinned, logging to its log file; returns its status at once."""
        self._check_writable("launch")
        profile = self.profile(name)
        with self.store.lock(name):
            old = self.store.load(name)
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
            self._start(profile, restarts=old.restarts if old else 0)
        return self.status_one(name)

    def _numa_for(self, profile: Profile) -> int | None:
        node = resolve_numa(profile, self.topology)
        if self.demo:
            from amdtop.supervisor.demo import demo_pinning

            node, _why = demo_pinning(node, os.environ)  # pinned where this host allows (the TUI says why not)
        return node

    def _start(self, profile: Profile, *, restarts: int) -> WorkerRecord:
        launch_id = uuid.uuid4().hex[:12]
        marker = f"{profile.name}:{launch_id}"
        numa = self._numa_for(profile)
        env = build_env(profile, os.environ, vendor=self.vendor, marker=marker)
        preflight(profile, numa, env)
        unit = f"amdtop-{profile.name}-{launch_id}" if systemd_usable() else None
        argv = build_argv(profile, numa, scope_unit=unit)
        log = self.store.log_path(profile.name)
        log.parent.mkdir(parents=True, exist_ok=True)
        rotate_log(log, self.log_max_bytes, self.log_backups)
        with open(log, "ab") as fh:
            fh.write(f"=== amdtop launch {marker} at {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(argv)}\n".encode())
            fh.flush()
            offset = fh.tell()
            try:
                child = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            except OSError as exc:
                raise AmdtopError(
                    f"worker[{profile.name}].command: cannot start {argv[0]!r} ({exc.strerror})"
                ) from None
        self._children[profile.name] = child
        st = procs.read_stat(child.pid)
        rec = WorkerRecord(
            name=profile.name,
            launch_id=launch_id,
            pid=child.pid,
            pgid=child.pid,
            start_ticks=st.start_ticks if st else 0,
            started_at=time.time(),
            argv=tuple(argv),
            env=mask_env(env),
            log=str(log),
            port=profile.port,
            url=profile.url,
            gpus=profile.gpus,
            numa_node=numa,
            restarts=restarts,
            known=((child.pid, st.start_ticks),) if st else (),
            log_offset=offset,
        )
        self.store.save(rec)
        self.prober.forget(profile.name)
        return rec

    # -- stop -------------------------------------------------------------------------------------------------------
    def stop(self, name: str, grace: float | None = None) -> StopReport:
        """SIGTERM the group, wait ``grace`` (profile, then supervisor default), SIGKILL the group, sweep leftovers."""
        self._check_writable("stop")
        profile = self.profile(name)
        with self.store.lock(name):
            return self._stop(profile, grace)

    def _stop(self, profile: Profile, grace: float | None) -> StopReport:
        name = profile.name
        rec = self.store.load(name)
        if rec is None:
            return StopReport(name, (), (), (), (), f"{name}: never launched, nothing to stop")
        self.store.save(rec.with_(stopping=True))
        if grace is None:
            grace = profile.stop_grace_s if profile.stop_grace_s is not None else self.grace_s
        report = stop_run(rec, grace, reap=lambda: self._reap(name, forget=False))
        self._reap(name)
        self.store.save(rec.with_(stopping=False, stopped=True, shm=()))
        self.prober.forget(name)
        self._last_stop[name] = report
        return report

    def _reap(self, name: str, *, forget: bool = True) -> None:
        child = self._children.get(name)
        if child is not None and child.poll() is not None and forget:
            self._children.pop(name, None)

    def last_stop(self, name: str) -> StopReport | None:
        """The report of the last stop of ``name`` by this supervisor (also the stop inside restart and retune)."""
        return self._last_stop.get(name)

    # -- restart / retune -------------------------------------------------------------------------------------------
    def restart(self, name: str, grace: float | None = None) -> WorkerStatus:
        """Stop then launch ``name``, appending to the same log; counts a restart."""
        self._check_writable("restart")
        profile = self.profile(name)
        # Bad input must not cost the running worker: check all but the port (still its own) before stopping.
        preflight(profile, self._numa_for(profile), build_env(profile, os.environ, vendor=self.vendor, marker="-"),
                  check_port=False)  # fmt: skip
        with self.store.lock(name):
            old = self.store.load(name)
            self._stop(profile, grace)
            self._start(profile, restarts=(old.restarts + 1) if old else 0)
        return self.status_one(name)

    def retune_diff(self, name: str, changes: Mapping[str, str]) -> str:
        """The human diff of ``changes`` to ``name``'s profile; validates them (InputError), writes nothing."""
        self.profile(name)
        doc = tomlkit.parse(tomlkit.dumps(self._doc))
        changed = apply_changes(doc, name, changes)
        validate_profiles(profiles_from_document(doc, str(self.config)), self.topology)
        return render_diff(name, changed)

    def retune(self, name: str, changes: Mapping[str, str], grace: float | None = None) -> WorkerStatus:
        """Apply ``changes``, write the profile file back (comments kept), and restart ``name`` if it runs."""
        self._check_writable("retune")
        self.profile(name)
        doc = tomlkit.parse(tomlkit.dumps(self._doc))
        apply_changes(doc, name, changes)
        profiles = profiles_from_document(doc, str(self.config))
        validate_profiles(profiles, self.topology)
        tmp = self.config.with_name(f".{self.config.name}.tmp")
        tmp.write_text(tomlkit.dumps(doc))
        os.replace(tmp, self.config)
        self._doc, self._profiles = doc, profiles
        current = self.status_one(name)
        if current.state in (WorkerState.STOPPED,):
            return current
        return self.restart(name, grace)

    # -- status -----------------------------------------------------------------------------------------------------
    def status(self) -> list[WorkerStatus]:
        """Status of every profile, in file order (procfs + one short HTTP call per running worker)."""
        table = procs.scan()
        out = [self._status(p, table) for p in self._profiles]
        if self.demo and self.sim is not None:
            from amdtop.supervisor.demo import feed_demand

            feed_demand(self.sim, self._profiles, out, self.topology)
        return out

    def status_one(self, name: str) -> WorkerStatus:
        """Status of worker ``name``."""
        return self._status(self.profile(name), procs.scan())

    def _status(self, profile: Profile, table: dict[int, procs.ProcStat]) -> WorkerStatus:
        self._reap(profile.name)
        return observe(
            profile,
            self.store,
            table,
            self.prober,
            topology=self.topology,
            demo=self.demo,
            log_max_bytes=self.log_max_bytes,
            log_backups=self.log_backups,
        )

    def wait_ready(self, name: str, timeout: float = 120.0, poll: float = 0.5) -> WorkerStatus:
        """Block until ``name`` is ready; AmdtopError (with the last log line) if it crashes or times out."""
        deadline = time.monotonic() + timeout
        while True:
            st = self.status_one(name)
            if st.state is WorkerState.READY:
                return st
            if st.state in (WorkerState.CRASHED, WorkerState.STOPPED):
                last = st.last_log_lines[-1] if st.last_log_lines else "no log output"
                raise AmdtopError(f"worker[{name}]: {st.state.value} before ready; last log line: {last}")
            if time.monotonic() >= deadline:
                raise AmdtopError(f"worker[{name}]: not ready after {timeout:g} s; see {st.log}")
            time.sleep(poll)

    def close(self) -> None:
        """Release the HTTP client (workers keep running)."""
        self.prober.close()
