"""The worker supervisor: launch, observe, stop, restart and retune the workers of one profile file."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import tomlkit

from amdtop.errors import AmdtopError, InputError
from amdtop.model import EngineStats, Topology, WorkerState, WorkerStatus
from amdtop.procinfo import read_binding
from amdtop.supervisor import procs
from amdtop.supervisor.launchspec import build_argv, build_env, preflight, systemd_usable
from amdtop.supervisor.metrics import EngineMeter
from amdtop.supervisor.profiles import Profile, load_profiles, profiles_from_document, resolve_numa, validate_profiles
from amdtop.supervisor.retune import apply_changes, render_diff
from amdtop.supervisor.state import StateStore, WorkerRecord, mask_env, rotate_log, tail_lines
from amdtop.telemetry.sim import SimBackend


@dataclass(frozen=True, slots=True)
class StopReport:
    """What a stop did."""

    name: str
    """Worker name."""
    terminated: tuple[int, ...]
    """PIDs of the process group that got SIGTERM."""
    killed: tuple[int, ...]
    """PIDs still alive after the grace period that got SIGKILL."""
    swept_pids: tuple[int, ...]
    """Leftovers outside the group found by env marker, parent chain or ``VLLM::`` title, and killed."""
    swept_shm: tuple[str, ...]
    """``/dev/shm`` (and temp) files of this launch that were removed."""
    message: str
    """One line for humans."""
    seconds: float = 0.0
    """Wall time of the stop."""


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
        self._meters: dict[str, EngineMeter] = {}
        self._last_stop: dict[str, StopReport] = {}
        # No keep-alive: a pooled connection to a worker outlives its server and leaves the port in FIN_WAIT2.
        self._http = httpx.Client(
            timeout=httpx.Timeout(health_timeout_s),
            trust_env=False,
            limits=httpx.Limits(max_keepalive_connections=0),
        )

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

    @contextmanager
    def _worker_lock(self, name: str) -> Iterator[None]:
        # flock (per open file, so per call) serialises control actions on one worker across threads and across amdtop
        # processes sharing the state dir (TUI + CLI); actions on different workers run in parallel.
        self.store.dir.mkdir(parents=True, exist_ok=True)
        with open(self.store.dir / f".{name}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- launch -----------------------------------------------------------------------------------------------------
    def launch(self, name: str) -> WorkerStatus:
        """Start worker ``name`` in its own session, pinned, logging to its log file; returns its status at once."""
        self._check_writable("launch")
        profile = self.profile(name)
        with self._worker_lock(name):
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
        if self.demo and node is not None and not Path(f"/sys/devices/system/node/node{node}").is_dir():
            # The simulated node has NUMA nodes this host lacks; demo workers then run unpinned.
            return None
        return node

    def _profile_numa(self, profile: Profile) -> int | None:
        try:
            return resolve_numa(profile, self.topology)
        except InputError:
            return None

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
        self._meters[profile.name] = EngineMeter()
        return rec

    # -- stop -------------------------------------------------------------------------------------------------------
    def stop(self, name: str, grace: float | None = None) -> StopReport:
        """SIGTERM the group, wait ``grace`` (profile, then supervisor default), SIGKILL the group, sweep leftovers."""
        self._check_writable("stop")
        profile = self.profile(name)
        with self._worker_lock(name):
            return self._stop(profile, grace)

    def _stop(self, profile: Profile, grace: float | None) -> StopReport:
        name = profile.name
        t0 = time.monotonic()
        rec = self.store.load(name)
        if rec is None:
            return StopReport(name, (), (), (), (), f"{name}: never launched, nothing to stop")
        rec = rec.with_(stopping=True)
        self.store.save(rec)
        marker = f"{name}:{rec.launch_id}"
        wait = (
            grace if grace is not None else profile.stop_grace_s if profile.stop_grace_s is not None else self.grace_s
        )
        table = procs.scan()
        everyone = procs.members(
            pgid=rec.pgid, start_ticks=rec.start_ticks, marker=marker, known=rec.known, table=table, deep=True
        )
        shm = set(rec.shm) | procs.mapped_shm(everyone)
        group = {p for p in everyone if table[p].pgid == rec.pgid}
        if group:
            self._signal_group(rec.pgid, group, signal.SIGTERM)
        self._wait_gone(rec, group, wait)
        left = self._alive_of(group)
        if left:
            self._signal_group(rec.pgid, left, signal.SIGKILL)
            self._wait_gone(rec, left, 5.0)
        # Sweep: anything still tied to this launch (escaped the group, reparented, or started late).
        swept: set[int] = set()
        for _ in range(3):
            rest = procs.members(pgid=rec.pgid, start_ticks=rec.start_ticks, marker=marker, known=rec.known, deep=True)
            if not rest:
                break
            swept |= rest
            for pid in rest:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._wait_gone(rec, rest, 5.0)
        removed = self._remove_shm(rec, shm)
        self._reap(name)
        self.store.save(rec.with_(stopping=False, stopped=True, shm=()))
        self._meters.pop(name, None)
        secs = time.monotonic() - t0
        msg = (
            f"{name}: stopped in {secs:.1f} s; {len(group)} terminated, {len(left)} killed after {wait:g} s grace, "
            f"{len(swept)} leftover process(es) swept, {len(removed)} shm file(s) removed"
        )
        report = StopReport(
            name, tuple(sorted(group)), tuple(sorted(left)), tuple(sorted(swept)), tuple(sorted(removed)), msg, secs
        )
        self._last_stop[name] = report
        return report

    @staticmethod
    def _signal_group(pgid: int, pids: set[int], sig: signal.Signals) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _alive_of(self, pids: set[int]) -> set[int]:
        table = procs.scan()
        return {p for p in pids if p in table}

    def _wait_gone(self, rec: WorkerRecord, pids: set[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self._reap(rec.name, forget=False)
            if not self._alive_of(pids) or time.monotonic() >= deadline:
                return
            time.sleep(0.05)

    def _reap(self, name: str, *, forget: bool = True) -> None:
        child = self._children.get(name)
        if child is not None and child.poll() is not None and forget:
            self._children.pop(name, None)

    def _remove_shm(self, rec: WorkerRecord, mapped: set[str]) -> set[str]:
        ids = set(rec.dist_ids) | procs.dist_ids_in(self._log_since_launch(rec))
        tmp = Path(os.environ.get("TMPDIR", "/tmp"))
        candidates = mapped | procs.shm_for_ids(ids) | {str(p) for i in ids for p in [tmp / f"vllm_dist_{i}"]}
        removed: set[str] = set()
        for path in candidates:
            try:
                os.unlink(path)
                removed.add(path)
            except FileNotFoundError:
                pass
            except OSError:
                pass
        return removed

    @staticmethod
    def _log_since_launch(rec: WorkerRecord) -> str:
        try:
            with open(rec.log, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(rec.log_offset if rec.log_offset <= size else 0)
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

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
        with self._worker_lock(name):
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

    def _health(self, url: str) -> int | None:
        """HTTP status of ``/health``; ``None`` when refused or timed out."""
        try:
            return self._http.get(f"{url}/health").status_code
        except httpx.HTTPError:
            return None

    def _status(self, profile: Profile, table: dict[int, procs.ProcStat]) -> WorkerStatus:
        name = profile.name
        rec = self.store.load(name)
        self._reap(name)
        if rec is None:
            return WorkerStatus(
                name,
                WorkerState.STOPPED,
                profile.gpus,
                port=profile.port,
                url=profile.url,
                numa_node=self._profile_numa(profile),
                log=str(self.store.log_path(name)),
            )
        marker = f"{name}:{rec.launch_id}"
        pids = procs.members(pgid=rec.pgid, start_ticks=rec.start_ticks, marker=marker, known=rec.known, table=table)
        leader = rec.pid in pids and table[rec.pid].start_ticks == rec.start_ticks
        engine = None
        lines: tuple[str, ...] = ()
        changed: dict[str, object] = {}
        if rec.stopping and pids:
            state = WorkerState.STOPPING
        elif not leader:
            state = WorkerState.STOPPED if rec.stopped or (rec.stopping and not pids) else WorkerState.CRASHED
        else:
            code = self._health(rec.url)
            if code == 200:
                state = WorkerState.READY
                if not rec.ready_seen:
                    changed["ready_seen"] = True
                engine = self._scrape(name, rec.url)
            elif code is not None and code >= 500:
                state = WorkerState.CRASHED
            else:
                state = WorkerState.STARTING
        if state is WorkerState.CRASHED:
            lines = tail_lines(Path(rec.log), 20)
        if pids:
            known = set(rec.known) | {(p, table[p].start_ticks) for p in pids}
            if known != set(rec.known):
                changed["known"] = tuple(sorted(known))
            shm = set(rec.shm) | procs.mapped_shm(pids)
            if shm != set(rec.shm):
                changed["shm"] = tuple(sorted(shm))
        if changed:
            rec = self._merge(rec, changed)
        rotate_log(Path(rec.log), self.log_max_bytes, self.log_backups)
        cpus: set[int] = set()
        mems: set[int] = set()
        numa = rec.numa_node
        if self.demo:
            # Demo workers run on this host but stand for workers of the simulated node: report the binding they
            # would have there, so NUMA checks against the simulated topology stay meaningful.
            numa = self._profile_numa(profile)
            if pids and numa is not None:
                cpus.update(next((n.cpus for n in self.topology.numa_nodes if n.id == numa), ()))
                mems.add(numa)
        else:
            for pid in pids:
                b = read_binding(pid)
                if b is not None:
                    cpus.update(b.cpus)
                    mems.update(b.mems)
        return WorkerStatus(
            name=name,
            state=state,
            gpus=rec.gpus,
            port=rec.port,
            numa_node=numa,
            pid=rec.pid if pids else None,
            pgid=rec.pgid if pids else None,
            url=rec.url,
            pids=tuple(sorted(pids)),
            rank_pids=procs.rank_pids(pids),
            cpu_affinity=tuple(sorted(cpus)),
            mems_allowed=tuple(sorted(mems)),
            log=rec.log,
            restarts=rec.restarts,
            started_at=rec.started_at if pids else None,
            source="amdtop",
            engine=engine,
            last_log_lines=lines,
        )

    def _merge(self, seen: WorkerRecord, changed: dict[str, object]) -> WorkerRecord:
        """Save what a status poll learnt, unless a control action holds the worker (it owns the record then)."""
        self.store.dir.mkdir(parents=True, exist_ok=True)
        with open(self.store.dir / f".{seen.name}.lock", "w") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return seen.with_(**changed)
            try:
                current = self.store.load(seen.name)
                if current is None or current.launch_id != seen.launch_id or current.stopping:
                    return seen.with_(**changed)
                merged = current.with_(**changed)
                self.store.save(merged)
                return merged
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _scrape(self, name: str, url: str) -> EngineStats | None:
        try:
            resp = self._http.get(f"{url}/metrics")
        except httpx.HTTPError:
            return None
        if resp.status_code != 200:
            return None
        return self._meters.setdefault(name, EngineMeter()).update(resp.text)

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
        self._http.close()
