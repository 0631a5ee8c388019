"""The run loop: bring every target up, drive it with paced producers and consumers, publish
one Tick per target per second on the bus, drain, write the files, bring everything down.

The same Run serves the dashboard and --headless: both are subscribers of the bus. So is the
recorder that keeps the run files (the command line gives analysis' Parquet sink): the engine
publishes, it never writes run files itself."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import platform as host_platform
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from compose.docker import memory_bytes
from loadgen.backlog import BacklogWatch
from loadgen.core.audit import Window, verdict
from loadgen.core.bus import BusItem
from loadgen.core.errors import (
    DriverError,
    OutputError,
    StackError,
    StreambenchError,
    WorkloadError,
)
from loadgen.core.events import FAULT_KINDS, EventKind, PhaseChange, RunEvent, RunMeta, network_kind
from loadgen.core.interventions import (
    FAULT_ACTIONS,
    PROXIED_OPTION,
    Intervention,
    broker_names,
    check_fault,
    check_schedule,
    find_broker,
    network_scope,
)
from loadgen.core.target import Target
from loadgen.core.ticks import LagSnapshot, Phase, Tick
from loadgen.core.workload import Workload, shown
from loadgen.load import DROPPED_SLOTS, TargetTotals, subscription_names
from loadgen.memguard import ContainerLimit, ContainerMemoryWatch, MemoryGuard
from loadgen.pacing import now_ns
from loadgen.placement import place
from loadgen.platforms import PLATFORMS
from loadgen.ratesearch import START_RATE, RateSearch
from loadgen.recovery import Backlog, DrainWatch, RecoveryWatch
from loadgen.worker import TargetWorker

if TYPE_CHECKING:
    from loadgen.cluster import Cluster

Subscriber = Callable[[BusItem], None]

DRAIN_STALL_S = 5.0  # a drain that reads nothing this long, messages unread, is said to stall
TICK_SLACK_S = 0.1
# what an early stop from outside the run says in its event (Run.stop_for)
STOP_REASONS = {"hangup": "the terminal hung up (SIGHUP): the run stopped early, drained and "
                          "wrote its files; --headless under tmux or nohup runs to the end"}
# a drain whose broker shows nothing left to read while messages are unread, and that reads
# nothing for this long, ends for that target: the broker no longer has them (lost)
LOSS_AFTER_S = 3.0
# the drain's first look: this long after the producers finished (their last messages answered)
# a tick is cut at once rather than at the next second, so a run whose consumers have already
# read everything ends then; otherwise the drain goes on at the tick boundaries
DRAIN_FIRST_LOOK_S = 0.1


class Recorder(Protocol):
    """A bus subscriber that keeps the run files; closed (flushed) when the run ends."""

    def __call__(self, item: BusItem) -> None: ...

    def close(self) -> None: ...


# kept free in the run directory while the run goes on, and given back when a file cannot be
# written, so that run.json can still say the run failed on a disk that filled up (it takes
# tens of kB; 1 MiB is room for a run of 10,000 subscriptions)
SPACE_RESERVE = ".space-reserve"
SPACE_RESERVE_BYTES = 1 << 20


def new_run_id(started: datetime) -> str:
    """`<UTC time>-<6 hex digits>`: unique also among runs started in the same second."""
    return f"{started.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


class RecorderFactory(Protocol):
    """Makes the run's recorder once the run directory exists (e.g. analysis.sink.ParquetSink)."""

    def __call__(self, run_dir: Path, run_id: str, *, raw: bool) -> Recorder: ...


def path_name(text: str, limit: int = 100) -> str:
    """`text` as one file name: letters, digits, '.', '_' and '-' kept, every other run of
    characters one '_', no leading dot, at most `limit` characters."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).lstrip(".")[:limit]
    return name or "_"


def _unused(path: Path) -> Path:
    """`path`, or `path-2`, `path-3` … when runs started in the same second took it."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def default_run_dir(workload: Workload, started: datetime, root: Path = Path("runs")) -> Path:
    """runs/<UTC time>-<workload name as a file name>; run.json keeps the name as written."""
    return root / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{path_name(workload.name)}"


def log_dir(run_dir: Path, index: int, label: str) -> Path:
    """Where a target's broker logs are kept: logs/<index>-<label, as a bounded file name>."""
    return run_dir / "logs" / f"{index}-{path_name(label)}"


@dataclass
class RunSummary:
    run_dir: Path
    run_id: str
    stopped_early: bool
    targets: list[TargetTotals] = field(default_factory=list)
    measured_ticks: int = 0
    broker_failures: list[str] = field(default_factory=list)  # brokers that died unbidden
    stopped_for: str | None = None  # why the run stopped itself early (the machine's memory)
    placement: dict[str, Any] | None = None  # run.json's cluster_placement (--cluster)


# room for the files inside a run directory: its path may use this much less than PATH_MAX
_RUN_DIR_HEADROOM = 512


class _Taken(OutputError):
    """check_run_dir(fresh=True): another run created the directory first."""


def check_run_dir(run_dir: Path, fresh: bool = False) -> None:
    """Create the run directory, or raise OutputError if it is taken, cannot be written, or
    lies where another user could tamper with the run files: the nearest existing directory
    on its path (itself or an ancestor) writable by everyone without the sticky bit, or the
    run directory itself owned by another user. Nothing is created when it is refused.
    `fresh`: the directory must be made by this call (a default name, which a run started at
    the same moment may take first): _Taken when it exists."""
    shown_dir = shown(str(run_dir), 100)
    if "\0" in str(run_dir):
        raise OutputError(f"output directory {shown_dir}: a path cannot contain a NUL character")
    full = os.path.abspath(run_dir)
    path_max = os.pathconf("/", "PC_PATH_MAX") if hasattr(os, "pathconf") else 4096
    if len(os.fsencode(full)) > path_max - _RUN_DIR_HEADROOM:
        raise OutputError(f"output directory {shown_dir} has a path of {len(full):,} characters: "
                          f"too long for the run files (at most {path_max - _RUN_DIR_HEADROOM:,})")
    missing: list[str] = []  # the directories to create, deepest first
    existing = full
    while True:
        try:
            st = os.stat(existing)
            break
        except (FileNotFoundError, NotADirectoryError):
            missing.append(existing)
            existing = os.path.dirname(existing)
        except OSError as exc:  # a name too long, no permission, a loop of links
            raise OutputError(f"cannot use the output directory {shown_dir}: "
                              f"{exc.strerror or exc}") from None
    try:
        taken = not missing and (not stat.S_ISDIR(st.st_mode) or bool(os.listdir(full)))
    except OSError as exc:
        raise OutputError(f"cannot use the output directory {shown_dir}: {exc.strerror or exc}") from None
    if fresh and not missing:
        raise _Taken(f"output directory {shown_dir} was taken by another run")
    if taken:
        raise OutputError(f"output directory {shown_dir} exists and is not empty; choose another --out")
    if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise OutputError(f"refusing to write run files under {shown(existing, 100)}: every user may "
                          "write there and it has no sticky bit; choose another --out")
    if not missing and st.st_uid != os.geteuid():
        raise OutputError(f"output directory {shown_dir} belongs to another user (uid {st.st_uid}); "
                          "choose another --out")
    created: list[str] = []
    try:
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if fresh and d == full:
                    raise _Taken(f"output directory {shown_dir} was taken by another run") from None
                if d == full:
                    raise
                continue  # a parent another run made meanwhile
            created.append(d)
        probe = os.path.join(full, ".write-test")
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as exc:
        for d in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        raise OutputError(f"cannot write the run directory {shown_dir}: {exc.strerror or exc}") from None


def drained(totals: TargetTotals, subscriptions: int, lag: LagSnapshot | None) -> bool:
    """Every subscription has read every acknowledged message and the broker shows no lag."""
    totals.expected = totals.produced * subscriptions
    return totals.consumed >= totals.expected and (lag is None or lag.total == 0)


class Run:
    """One benchmark run over one or more targets side by side."""

    def __init__(self, workload: Workload, targets: list[Target], out_dir: Path | None = None,
                 record_raw: bool = False, audit: bool = False, tick_s: float = 1.0,
                 argv: list[str] | None = None, run_id: str | None = None,
                 processes: int = 1, recorder: RecorderFactory | None = None,
                 min_free_memory: int | None = None, cluster: Cluster | None = None) -> None:
        """`min_free_memory`: the machine's available memory (bytes) under which the run
        stops itself (None: 5 % of the machine's memory, at least 256 MiB; 0: never).
        `cluster`: a connected Ray cluster whose nodes run the load (loadgen.cluster); the run
        leaves it when it ends."""
        self.cluster = cluster
        self.workload = workload
        self.targets = targets
        self.started = datetime.now(UTC)
        self.run_id = run_id or new_run_id(self.started)
        self._default_dir = out_dir is None  # claimed in prepare(), against runs started at once
        self.run_dir = out_dir if out_dir is not None else _unused(default_run_dir(workload, self.started))
        self.tick_s = tick_s
        self.phase = Phase.STARTING
        self.record_raw = record_raw
        self.processes = processes
        self._argv = argv or []
        self._subscribers: list[Subscriber] = []
        self._stop_requests = 0
        self._stop_event = asyncio.Event()
        self._recorder_factory = recorder
        self._recorder: Recorder | None = None
        self._prepared = False
        self.finished = threading.Event()  # set once execute() has closed everything
        # a search for the highest sustainable rate starts its targets at its first rate
        driven = dataclasses.replace(workload, rate=START_RATE) if workload.rate_search else workload
        # --same-node-latency tells each message's producer by the audit's stamp
        audit = audit or (cluster is not None and cluster.same_node_latency)
        self._runner_args = (driven, record_raw, audit, processes)
        self.audit = audit
        self.runners: list[TargetWorker] = self._make_runners()
        # a run file that could not be written (the recorder's OutputError): the run stops at
        # once and fails with it
        self._output_failed: OutputError | None = None
        self._send_problems: dict[str, str] = {}  # each target's first send-error
        self.warmup_ticks = math.ceil(workload.warmup_s / tick_s)
        self.measure_ticks = math.ceil(workload.duration_s / tick_s)
        # the brokers a fault can name, as users name them, per target: after the platform
        # (kafka-2) when no other target has that platform, and after the target's label
        platforms = [t.platform for t in targets]
        self.brokers: dict[str, dict[str, str]] = {}
        limits: dict[str, ContainerLimit] = {}
        for t in targets:
            own = PLATFORMS[t.platform].make_stack(t).brokers()
            names = broker_names(t.platform, own) if platforms.count(t.platform) == 1 else {}
            self.brokers[t.label] = {**names, **broker_names(t.label, own)}
            memory = t.options.get("memory") if t.runtime == "docker" else None
            if memory:
                limits[t.label] = ContainerLimit(memory_bytes(str(memory)), max(len(own), 1),
                                                 str(memory), PLATFORMS[t.platform].memory_relief)
        self._container_memory = ContainerMemoryWatch(limits)
        # the faults each target's platform takes on its runtime
        self.faults = {t.label: PLATFORMS[t.platform].fault_actions(
            t.runtime, bool(t.options.get(PROXIED_OPTION))) for t in targets}
        check_schedule(workload.schedule, self.labels, self.brokers, workload.duration_s, self.faults)
        self.rates = {t.label: driven.rate for t in targets}  # each target's rate now
        self._recovery = RecoveryWatch(workload.subscriptions)
        self._drain = DrainWatch()
        self._backlog = (BacklogWatch(self.labels, workload.backlog_bytes, workload.drain_ratio,
                                      workload.message_size, workload.subscriptions)
                         if workload.backlog_bytes else None)
        self._actions: set[asyncio.Task[None]] = set()
        # the end of the load before the drain (producers finished, stopped consumers started),
        # under way beside the ticks
        self._stopping: asyncio.Task[None] | None = None
        self._search = RateSearch(self.labels, workload.subscriptions) if workload.rate_search else None
        self._measure_start_ns: int | None = None  # wall time the measuring phase started
        w = workload
        self.placement = place(w.topics * w.producers, w.topics * w.subscriptions * w.consumers,
                               processes if cluster is None else cluster.workers,
                               cluster is not None and cluster.split_roles)
        self.broker_failures: list[str] = []
        self._memory = MemoryGuard(min_free_memory)
        self.stopped_for: str | None = None
        self._stop_reason: str | None = None  # stop_for's reason, until its event is published
        self._consumers_stopped: set[str] = set()  # targets whose consumers the user stopped
        # seconds of the drain each target has read nothing with messages unread, and why a
        # platform's drain can stand still (said once, in a drain-stalled event)
        self._drain_idle: dict[str, float] = {}
        self._empty_idle: dict[str, float] = {}  # … with the broker showing no lag
        self._stall_hints = {t.label: hint(t) for t in targets
                             if (hint := PLATFORMS[t.platform].drain_stall_hint) is not None}
        self._loss_hints = {t.label: said for t in targets
                            if (loss := PLATFORMS[t.platform].loss_hint) is not None
                            and (said := loss(t)) is not None}
        self._down: dict[str, set[str]] = {t.label: set() for t in targets}
        self._faulted: dict[str, list[str]] = {}  # kills, restarts and deaths of each target's brokers
        # each target's fault windows for the delivery audit: a fault to the next (or the end)
        self._windows: dict[str, list[Window]] = {t.label: [Window("before any fault", 0, None)]
                                                  for t in targets}
        self.subscribe(self._note_brokers)

    def _make_runners(self) -> list[TargetWorker]:
        driven, record_raw, audit, processes = self._runner_args
        if self.cluster is not None:
            self.cluster.handles.clear()  # runners made again (another run directory)
        return [TargetWorker(i, t, driven, self.run_id, record_raw, audit, self.publish,
                             processes, log_dir(self.run_dir, i, t.label), self.cluster)
                for i, t in enumerate(self.targets)]

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.runners]

    def subscribe(self, fn: Subscriber) -> None:
        self._subscribers.append(fn)

    def publish(self, item: BusItem) -> None:
        for fn in self._subscribers:
            fn(item)

    def _set_phase(self, phase: Phase, message: str = "") -> None:
        self.phase = phase
        self.publish(PhaseChange(phase, time.time_ns(), message))

    def progress(self, message: str) -> None:
        self.publish(PhaseChange(self.phase, time.time_ns(), message))

    def request_stop(self) -> None:
        """First call: end the load at the next tick and drain. Second: skip the drain."""
        self._stop_requests += 1
        self._stop_event.set()

    def stop_for(self, reason: str) -> None:
        """Why the run is stopped early from outside (`hangup`: the terminal was lost): kept as
        run.json's stopped_for and published as an event of that kind at the next tick. Call it
        before request_stop; safe in a signal handler (it only sets fields)."""
        if self.stopped_for is None:
            self.stopped_for = reason
            self._stop_reason = reason

    @property
    def stop_requested(self) -> bool:
        return self._stop_requests > 0

    def prepare(self) -> None:
        """Create the run directory and the recorder and start the targets' worker processes
        (which wait for instructions); raises OutputError before anything starts. Call it before
        a dashboard takes over the terminal."""
        if self._prepared:
            return
        self._claim_run_dir()
        if self._recorder_factory is not None:
            self._reserve_space()
            self._recorder = self._recorder_factory(self.run_dir, self.run_id, raw=self.record_raw)
            self.subscribe(self._record)
        self._prepared = True
        for r in self.runners:
            r.spawn()

    def _claim_run_dir(self) -> None:
        """Create the run directory (check_run_dir); a default name that a run started at the
        same moment took first (between the look in __init__ and now) gives way to the next."""
        for _ in range(100):
            try:
                check_run_dir(self.run_dir, fresh=self._default_dir)
                return
            except _Taken:
                self.run_dir = _unused(default_run_dir(self.workload, self.started))
                self.runners = self._make_runners()  # their log folders are in it
        raise OutputError(f"no free run directory next to {shown(str(self.run_dir), 100)}")

    def _reserve_space(self) -> None:
        path = self.run_dir / SPACE_RESERVE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, bytes(SPACE_RESERVE_BYTES))
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise OutputError(f"cannot write the run directory {shown(str(self.run_dir), 100)}: "
                              f"{exc.strerror or exc}") from None

    def _free_space(self) -> None:
        with contextlib.suppress(OSError):
            (self.run_dir / SPACE_RESERVE).unlink()

    def _record(self, item: BusItem) -> None:
        """Hand one bus item to the recorder. A file it cannot write stops the run at once
        (no drain: the rows would have nowhere to go) and fails it; after that only run.json
        is written, to say so."""
        assert self._recorder is not None
        if self._output_failed is not None and not isinstance(item, RunMeta):
            return
        try:
            self._recorder(item)
        except OutputError as exc:
            if self._output_failed is None:
                self._output_failed = exc
                self.request_stop()
                self.request_stop()

    def _check_failed(self) -> None:
        """Raise what failed the run once its load ended: a run file not written, or a target
        whose every send failed (nothing produced, which no drain makes a success)."""
        if self._output_failed is not None:
            raise OutputError(f"{self._output_failed}; the run stopped there, the files written "
                              f"before are kept in {self.run_dir} (run.json: failed)")
        failed = []
        for r in self.runners:
            t = r.totals
            if t.produced == 0 and t.send_errors > 0:
                t.drained = False
                problem = self._send_problems.get(t.label, "see the send-error events")
                failed.append(f"{t.label}: every send failed ({t.send_errors:,} messages, none "
                              f"acknowledged): {problem}")
        if failed:
            raise DriverError("; ".join(failed))

    def _totals(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(r.totals.__dict__)) for r in self.runners]

    async def _audit(self) -> None:
        """The delivery audit's verdict for each target, from every process's records: in its
        totals (run.json) and as one delivery-audit event."""
        if not self.audit:
            return
        w = self.workload
        subs = {t: subscription_names(w.subscriptions) for t in range(w.topics)}
        for r in self.runners:
            ledger = await r.collect_audit()
            if ledger is None:
                continue
            total, windows = verdict(ledger, subs, w.producers, self._windows[r.label])
            r.totals.duplicates, r.totals.reordered = ledger.duplicated, total.reordered  # extra reads
            r.totals.audit = {**total.to_json(), "unstamped": ledger.unstamped, "windows": [
                {"name": win.name, "start_ns": win.start_ns, "end_ns": win.end_ns, **v.to_json()}
                for win, v in windows if v.sent]}
            self.publish(RunEvent(time.time_ns(), r.label, EventKind.DELIVERY_AUDIT,
                                  ("clean: " if total.clean() else "") + total.line()))

    def _meta(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            sb_version = version("streambench")
        except PackageNotFoundError:
            sb_version = "unknown"
        meta = {
            "run_id": self.run_id,
            "started": self.started.isoformat(),
            "workload": self.workload.to_omb(),
            "targets": [r.describe() for r in self.runners],
            "tick_s": self.tick_s,
            "warmup_ticks": self.warmup_ticks,
            "measure_ticks": self.measure_ticks,
            "record_raw": self.record_raw,
            "load_processes": self.processes,
            "load_placement": [{"producers": p.producers, "consumers": p.consumers}
                               for p in self.placement],
            "command": self._argv,
            "host": {"hostname": host_platform.node(), "cpus": os.cpu_count(),
                     "python": host_platform.python_version(), "system": host_platform.platform()},
            "streambench_version": sb_version,
        }
        if self.cluster is not None:
            meta["cluster_placement"] = self.cluster.placement()
        meta.update(extra or {})
        return meta

    async def execute(self) -> RunSummary:
        self.prepare()
        summary = RunSummary(self.run_dir, self.run_id, stopped_early=False)
        measured: int | None = None
        failed = False
        try:
            self._set_phase(Phase.STARTING, "starting brokers")
            await self._start_all()
            self.publish(RunMeta(self._meta()))
            if self._output_failed is None:
                measured = await self._drive()
            summary.measured_ticks = measured or 0
            summary.stopped_early = self.stop_requested
            summary.broker_failures = list(self.broker_failures)
            summary.stopped_for = self.stopped_for
            self._set_phase(Phase.WRITING, "writing run files")
            await self._audit()
            # one snapshot for the summary and run.json: a clock exchange may still land
            placement = self.cluster.placement() if self.cluster is not None else None
            summary.placement = placement
            summary.targets = [r.totals for r in self.runners]
            if self._search is not None:
                for t in summary.targets:
                    t.sustainable_rate = self._search.sustained(t.label)
                    t.search_converged = self._search.converged(t.label)
            self._check_failed()
            self.publish(RunMeta(self._meta({
                "ended": datetime.now(UTC).isoformat(),
                "stopped_early": summary.stopped_early,
                "measured_ticks": measured,
                "totals": self._totals(),
                "broker_failures": summary.broker_failures,
                **({"stopped_for": summary.stopped_for} if summary.stopped_for else {}),
                **({"cluster_placement": placement} if placement is not None else {}),
            })))
        except BaseException as exc:
            failed = True
            self._failed_meta(exc, measured)
            raise
        finally:
            await self._stop_targets()
            if self.cluster is not None:
                self.cluster.close()
            late = self._close_recorder()
            self.finished.set()  # brokers down, files closed (also after an error)
        if late is not None and not failed:
            # the last rows could not be written: run.json, which said the run ended, says
            # it failed (the recorder writes run.json also once closed)
            self._failed_meta(late, measured)
            raise late
        self._set_phase(Phase.DONE, f"run files in {self.run_dir}")
        return summary

    async def _stop_targets(self) -> None:
        """Stop every target's load and brokers, saying so as the phase's progress: a JVM
        broker takes 9-16 s to stop, which would otherwise read as writing the run files."""
        total = len(self.runners)
        down = 0
        self.progress(f"stopping brokers: 0 of {total} target{'s' if total != 1 else ''} down")

        async def stop(runner: TargetWorker) -> None:
            nonlocal down
            try:
                await runner.close()
            finally:
                down += 1
                self.progress(f"stopping brokers: {runner.label} down ({down} of {total})")

        await asyncio.gather(*(stop(r) for r in self.runners), return_exceptions=True)

    def _failed_meta(self, exc: BaseException, measured: int | None) -> None:
        """run.json says the run failed and why, also when it never got to measure; with the
        totals and the seconds measured once the load has run."""
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        self._free_space()
        extra: dict[str, Any] = {"ended": datetime.now(UTC).isoformat(), "stopped_early": True,
                                 "failed": reason[:500],
                                 "broker_failures": list(self.broker_failures)}
        if measured is not None:
            extra.update(measured_ticks=measured, totals=self._totals())
        with contextlib.suppress(Exception):
            self.publish(RunMeta(self._meta(extra)))

    def _close_recorder(self) -> OutputError | None:
        """Close the recorder (its last files); the OutputError of a file it could not write."""
        if self._recorder is None:
            return None
        try:
            self._recorder.close()
        except OutputError as exc:
            return OutputError(f"{exc}; the files written before are kept in {self.run_dir} "
                               "(run.json: failed)")
        finally:
            self._free_space()
        return None

    async def _start_all(self) -> None:
        results = await asyncio.gather(*(r.start(self.progress) for r in self.runners),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                if isinstance(r, StreambenchError | asyncio.CancelledError):
                    raise r
                raise StackError(f"start-up failed: {type(r).__name__}: {r}") from r

    async def _drive(self) -> int:
        """Warm-up, measuring and drain; returns the number of seconds (ticks) measured.

        Phases follow the clock: tick boundaries are t0 + k × tick. A coordinator that wakes
        late (an overloaded host) cuts one tick for every boundary it missed, with its true
        interval, labelled with the phase of the first boundary it was due at, and says so in
        an event; it never fires the missed ticks back to back with nothing in them."""
        loop = asyncio.get_running_loop()
        t0_mono, t0_wall = now_ns()
        tick_ns = int(self.tick_s * 1e9)
        warm_end = self.warmup_ticks
        measure_end = self.warmup_ticks + self.measure_ticks
        for r in self.runners:
            r.start_load(t0_mono, t0_wall, t0_mono + measure_end * tick_ns)
        self._set_phase(Phase.WARMUP if warm_end > 0 else Phase.MEASURING)
        scheduler = asyncio.create_task(self._run_schedule(t0_mono + warm_end * tick_ns))
        try:
            return await self._ticks(loop, t0_mono, tick_ns, warm_end, measure_end)
        finally:
            for task in (scheduler, self._stopping):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self._unrecovered()
            for drained in self._drain.ended():  # back when the run ended, not yet for the hold
                self._drained(*drained)
            self._search_results()

    async def _ticks(self, loop: asyncio.AbstractEventLoop, t0_mono: int, tick_ns: int,
                     warm_end: int, measure_end: int) -> int:
        seq = 0  # ticks cut so far
        done_k = 0  # the last boundary a tick was cut at
        drain_deadline: float | None = None
        looked = False  # the drain's first look was taken
        while True:
            boundary = t0_mono + (done_k + 1) * tick_ns
            if self._stop_requests and measure_end > done_k + 1:
                # a stop ends the load at this tick's boundary, then the drain starts
                measure_end = done_k + 1
                warm_end = min(warm_end, measure_end)
                for r in self.runners:
                    r.stop_producing_at(boundary)
            first_look = (not looked and drain_deadline is not None and done_k == measure_end
                          and self._stopping is not None)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._load_end_or_stop_change() if first_look else self._wait_stop_change(),
                    max(0.0, (boundary - time.monotonic_ns()) / 1e9))
            if time.monotonic_ns() < boundary:
                if not (first_look and self._stopping is not None and self._stopping.done()):
                    continue  # woken by a stop request: re-plan this tick's end
                looked = True
                await asyncio.sleep(max(0.0, min(DRAIN_FIRST_LOOK_S,
                                                 (boundary - time.monotonic_ns()) / 1e9)))
            mono, wall = now_ns()
            first_k = done_k + 1
            # a first look cut before its boundary crosses none: the next tick ends there
            early = first_look and mono < boundary
            k = done_k if early else max(first_k, (mono - t0_mono) // tick_ns)
            phase = (Phase.WARMUP if first_k <= warm_end else
                     Phase.MEASURING if first_k <= measure_end else Phase.DRAINING)
            if k > first_k:
                self.publish(RunEvent(
                    time.time_ns(), "", "coordinator-late",
                    f"the run loop woke {(mono - boundary) / 1e9:.2f} s late: seconds {first_k}-{k} "
                    f"are one {phase.value} tick of {(k - done_k) * self.tick_s:g} s"))
            ticks = await asyncio.gather(*(
                r.tick(seq, wall, phase, (mono - t0_mono) / 1e9) for r in self.runners))
            for t in ticks:
                self.publish(t)
            self._follow(ticks)
            for t in ticks:
                near = self._container_memory.check(t.target, t.resources.memory_bytes,
                                                    t.time_ns / 1e9)
                if near is not None:
                    self.publish(RunEvent(time.time_ns(), t.target, "broker-memory-high", near))
            if self._stop_reason is not None:
                self.publish(RunEvent(time.time_ns(), "", self._stop_reason,
                                      STOP_REASONS.get(self._stop_reason, self._stop_reason)))
                self._stop_reason = None
            if not self._stop_requests and phase is not Phase.DRAINING:
                low = self._memory.check()
                if low is not None:
                    self.publish(RunEvent(time.time_ns(), "", "memory-low", low))
                    self.stopped_for = low
                    self.request_stop()
            seq += 1
            crossed = range(done_k + 1, k + 1)
            done_k = k
            if warm_end in crossed and measure_end > warm_end:
                self._set_phase(Phase.MEASURING)
            if measure_end in crossed:
                self._set_phase(Phase.DRAINING, "waiting for consumers to catch up")
                # the producers finish beside the ticks: a batch a broker leaves unanswered (a
                # paused one) must not stop the run's clock
                self._stopping = asyncio.create_task(self._stop_load())
                drain_deadline = loop.time() + self.workload.drain_timeout_s
            if drain_deadline is not None and (k > measure_end or early):
                stopped = self._stopping is not None and self._stopping.done()
                if stopped and self._stopping is not None:
                    self._stopping.result()  # its failure is the run's
                # no target is drained while its producers may still have messages acknowledged
                done = [drained(r.totals, self.workload.subscriptions, t.lag) and stopped
                        for r, t in zip(self.runners, ticks, strict=True)]
                for r, d, t in zip(self.runners, done, ticks, strict=True):
                    r.totals.drained = d
                    r.totals.final_lag = t.lag.total if t.lag is not None else None
                    self._watch_drain(d, t)
                    self._watch_loss(d, stopped, r.totals, t)
                # a target whose every broker died has nothing left to drain from, nor one whose
                # broker no longer has the messages unread
                down = [not d and self._all_down(r.label) for r, d in zip(self.runners, done, strict=True)]
                over = [d or dn or r.totals.lost > 0
                        for r, d, dn in zip(self.runners, done, down, strict=True)]
                if all(over) and any(down):
                    self.publish(RunEvent(time.time_ns(), "", "drain-skipped",
                                          "no broker left to drain from: "
                                          + ", ".join(r.label for r, dn in zip(self.runners, down,
                                                                                strict=True) if dn)))
                if all(over) or self._stop_requests > 1 or loop.time() > drain_deadline:
                    if not all(done):
                        self.publish(RunEvent(time.time_ns(), "", "drain-incomplete",
                                              "stopped before every message was consumed"))
                    return max(0, measure_end - warm_end)

    def _watch_drain(self, drained_now: bool, tick: Tick) -> None:
        """A drain that reads nothing for DRAIN_STALL_S with messages unread is said once, in a
        drain-stalled event, with what the platform knows to hold a drain up: a user left
        guessing would take it for a broker that lost the messages."""
        label = tick.target
        subs = self.workload.subscriptions
        unread = (tick.lag.total if tick.lag is not None
                  else max(0, tick.produced_total * subs - tick.consumed_total))
        if drained_now or tick.consumed or unread <= 0:
            self._drain_idle[label] = 0.0
            return
        idle = self._drain_idle.get(label, 0.0)
        self._drain_idle[label] = idle + tick.interval_s
        # ticks of about a second add up to a hair under the whole seconds
        if idle < DRAIN_STALL_S - TICK_SLACK_S <= idle + tick.interval_s:
            detail = (f"nothing consumed for {idle + tick.interval_s:.0f} s of the drain, "
                      f"{unread:,} messages unread")
            hint = self._stall_hints.get(label)
            self.publish(RunEvent(time.time_ns(), label, "drain-stalled",
                                  f"{detail}: {hint}" if hint else detail))

    def _watch_loss(self, drained_now: bool, stopped: bool, totals: TargetTotals, tick: Tick) -> None:
        """Messages acknowledged and never read while the broker shows nothing left to read
        (lag 0) and none comes for LOSS_AFTER_S: the broker lost them (a broker that keeps its
        data in memory killed and started again, a leader lost without its followers). Said
        once, in a messages-lost event, counted in totals.lost; the drain does not wait for
        them until its timeout."""
        label = tick.target
        if totals.lost:  # another target still drains: what comes late is no longer lost
            totals.lost = max(0, totals.expected - totals.consumed)
        if (drained_now or not stopped or totals.lost or tick.lag is None or tick.lag.total
                or tick.consumed or totals.consumed >= totals.expected):
            self._empty_idle[label] = 0.0
            return
        idle = self._empty_idle.get(label, 0.0) + tick.interval_s
        self._empty_idle[label] = idle
        if idle >= LOSS_AFTER_S - TICK_SLACK_S:
            totals.lost = totals.expected - totals.consumed
            faults = self._faulted.get(label, [])
            since = f" (faults in this run: {', '.join(faults)})" if faults else ""
            hint = self._loss_hints.get(label)
            self.publish(RunEvent(
                time.time_ns(), label, "messages-lost",
                f"{totals.lost:,} acknowledged messages never delivered: the broker shows nothing "
                f"left to read, and nothing came for {idle:.0f} s of the drain{since}"
                + (f"; {hint}" if hint else "")))

    async def _stop_load(self) -> None:
        """The end of the load: every producer finished (its batches answered or failed), then
        the consumers the user stopped start again for the drain."""
        await asyncio.gather(*(r.stop_producers() for r in self.runners))
        await self._restart_consumers()

    # ---- brokers that die -----------------------------------------------------------------

    def _note_brokers(self, item: BusItem) -> None:
        """Brokers that died unbidden (the stacks watch them), and those started again; and
        each target's first send error, which a run whose every send failed ends with."""
        if not isinstance(item, RunEvent) or item.target not in self._down:
            return
        if item.kind == "send-error":
            self._send_problems.setdefault(item.target, item.detail)
        if item.kind in FAULT_KINDS or item.kind == EventKind.BROKER_DIED:
            windows = self._windows[item.target]
            windows[-1].end_ns = item.time_ns
            windows.append(Window(f"{item.kind} {item.detail}"[:120], item.time_ns, None))
        broker = item.detail.split(":")[0].split(" ")[0]
        if item.kind in ("broker-died", "fault-kill", "fault-restart"):
            seen = self._faulted.setdefault(item.target, [])
            what = f"{item.kind.removeprefix('fault-')} {broker}"
            if what not in seen:
                seen.append(what)
        if item.kind == "broker-died":
            self._down[item.target].add(broker)
            self.broker_failures.append(f"{item.target}: {item.detail}")
        elif item.kind == "fault-kill":
            self._down[item.target].add(broker)
        elif item.kind in ("fault-start", "fault-restart"):
            self._down[item.target].discard(broker)

    def _all_down(self, label: str) -> bool:
        own = {o for o in self.brokers.get(label, {}).values()}
        return bool(own) and own <= self._down[label]

    # ---- interventions ------------------------------------------------------------------

    def _runners_for(self, target: str | None) -> list[TargetWorker]:
        chosen = [r for r in self.runners if target is None or r.label == target]
        if not chosen:
            raise WorkloadError(f"no target {target!r}; targets: {', '.join(self.labels)}")
        return chosen

    async def intervene(self, item: Intervention) -> None:
        """Carry out one intervention now (a key, a command or the schedule) and record it;
        raises a StreambenchError (one line) when it cannot be done."""
        if self.phase not in (Phase.WARMUP, Phase.MEASURING, Phase.DRAINING):
            raise WorkloadError(f"{item.describe()}: only while the load runs ({self.phase.value})")
        if item.action in FAULT_ACTIONS:
            assert item.broker is not None
            label, own = find_broker(item.broker, self.brokers, item.describe())
            check_fault(item.action, label, self.faults[label], item.describe())
            (runner,) = self._runners_for(label)
            await runner.fault(item.action, own)  # the stack records the fault as an event
            self._recovery.fault(label, f"{item.action} {item.broker}", time.time_ns())
            return
        if item.network:
            await self._network_fault(item)
            return
        for runner in self._runners_for(item.target):
            detail = await runner.control(item)
            now = time.time_ns()  # the change's time, for its event and the drain watch
            self.publish(RunEvent(now, runner.label, item.action, detail))
            if item.action == "rate":
                assert item.rate is not None
                self.rates[runner.label] = item.rate
            elif item.action == "consumers":
                if item.state == "start":
                    self._drain.resumed(runner.label, now)
                    self._consumers_stopped.discard(runner.label)
                else:
                    self._drain.stopped(runner.label, now)
                    self._consumers_stopped.add(runner.label)

    async def _network_fault(self, item: Intervention) -> None:
        """A network fault on the proxied links of one target, or of every target that has
        them (heal with no target); recorded as a net-<action> event, and measured for
        recovery like a broker fault (a heal as its end). It can name one broker of a target
        (partition@kafka-2:peers): its links alone."""
        item = network_scope(item, self.labels, self.brokers, item.describe())
        chosen = ([item.target] if item.target is not None
                  else [label for label in self.labels if item.action in self.faults[label]])
        if not chosen:
            raise WorkloadError(f"{item.describe()}: no target's clients go through a proxy "
                                "(start the run with --network-faults)")
        for label in chosen:
            check_fault(item.action, label, self.faults[label], item.describe())
        for label in chosen:
            (runner,) = self._runners_for(label)
            began = time.time_ns()  # the fault acts as the proxy takes it, before it answers
            detail = await runner.network_fault(item)
            self.publish(RunEvent(began, label, network_kind(item.action), detail))
            self._recovery.fault(label, f"{item.action} {label}", began)

    async def _restart_consumers(self) -> None:
        """The drain needs every consumer: those the user stopped start again."""
        for label in sorted(self._consumers_stopped):
            with contextlib.suppress(StreambenchError):
                await self.intervene(Intervention("consumers", label, state="start"))

    async def _run_schedule(self, measure_start_mono: int) -> None:
        """The workload's schedule: each intervention at its time of the measuring phase. With
        a backlog phase, the consumers stop when the measuring phase starts."""
        if self._backlog is not None:
            await asyncio.sleep(max(0.0, (measure_start_mono - time.monotonic_ns()) / 1e9))
            self._backlog.started(time.time_ns())
            for label in self.labels:
                await self.intervene(Intervention("consumers", label, state="stop"))
        for item in sorted(self.workload.schedule, key=lambda i: i.at_s or 0.0):
            due = measure_start_mono + int((item.at_s or 0.0) * 1e9)
            await asyncio.sleep(max(0.0, (due - time.monotonic_ns()) / 1e9))
            try:
                await self.intervene(item)
            except StreambenchError as exc:
                self.publish(RunEvent(time.time_ns(), item.target or "", "intervention-failed",
                                      f"{item.describe()} at {item.at_s:g}s: {exc}"))

    def _follow(self, ticks: list[Tick]) -> None:
        """Recoveries from faults and drains of backlogs, measured on each target's ticks."""
        for t in ticks:
            found = self._search.tick(t) if self._search is not None else None
            if found is not None:
                self._act(self._search_step(t.target, *found))
            step = self._backlog.tick(t) if self._backlog is not None else None
            if step is not None:
                kind, detail = step
                self.publish(RunEvent(time.time_ns(), t.target, kind, detail))
                if kind == "backlog-built":
                    self._act(self._end_backlog(t.target))
            rec = self._recovery.tick(t)
            if rec is not None:
                self.publish(RunEvent(time.time_ns(), t.target, "recovered", rec.detail()))
            drained = self._drain.tick(t)
            if drained is not None:
                self._drained(*drained)

    def _drained(self, backlog: Backlog, at_ns: int) -> None:
        self.publish(RunEvent(time.time_ns(), backlog.target, "backlog-drained",
                              backlog.detail(at_ns)))

    def _act(self, action: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(action)
        self._actions.add(task)
        task.add_done_callback(self._actions.discard)

    async def _search_step(self, label: str, rate: float, detail: str, converged: bool) -> None:
        """One step of the search for the highest sustainable rate: the target's new rate, as a
        `rate-search` event (not a change of the load: the report does not cut segments)."""
        (runner,) = self._runners_for(label)
        # a rate given up leaves no debt: the slots owed at it are dropped, not sent at the
        # lower rate (they would keep the broker overloaded and the search going down)
        lower = rate < self.rates.get(label, rate)
        try:
            changed = await runner.control(Intervention("rate", label, rate=rate, drop_owed=lower))
        except StreambenchError as exc:
            self.publish(RunEvent(time.time_ns(), label, "intervention-failed",
                                  f"rate search: {exc}"))
            return
        self.rates[label] = rate
        if changed.endswith(DROPPED_SLOTS):
            detail += f"; {changed.split('; ', 1)[1]}"
        self.publish(RunEvent(time.time_ns(), label, "rate-search", detail))
        if converged:
            self.publish(RunEvent(time.time_ns(), label, "rate-search-converged",
                                  f"the highest sustainable rate found: {rate:,.0f} msg/s"))

    def _search_results(self) -> None:
        if self._search is None:
            return
        for label in self.labels:
            state = "converged" if self._search.converged(label) else "NOT converged"
            sustained = self._search.sustained(label)
            measured = self._search.measured(label)
            kept, periods = self._search.periods(label)
            if sustained is not None:
                over = (f"; {sustained:,.0f} msg/s acknowledged (the median of the {kept} of "
                        f"{periods} measured periods that kept up")
                over += (f"; {measured:,.0f} on average over the whole measuring phase)"
                         if measured is not None else ")")
            elif measured is not None:
                over = (f"; no measured period kept up ({measured:,.0f} msg/s acknowledged on "
                        f"average over the measuring phase)")
            else:
                over = ""
            self.publish(RunEvent(time.time_ns(), label, "rate-search-result",
                                  f"{state}; held {self._search.rate(label):,.0f} msg/s at the "
                                  f"end{over}"))

    async def _end_backlog(self, label: str) -> None:
        """The backlog is built: the target's consumers resume. Its drain is timed by the
        backlog watch (to OMB's threshold), not by the drain watch."""
        try:
            await self.intervene(Intervention("consumers", label, state="start"))
        except StreambenchError as exc:
            self.publish(RunEvent(time.time_ns(), label, "intervention-failed",
                                  f"consumers=start after the backlog was built: {exc}"))
        self._drain.cancel(label)

    def _unrecovered(self) -> None:
        for rec in self._recovery.pending():
            self.publish(RunEvent(time.time_ns(), rec.target, "not-recovered", rec.detail()))

    async def _load_end_or_stop_change(self) -> None:
        """Returns when the load's end is complete (see _stop_load) or a stop request comes."""
        assert self._stopping is not None
        change = asyncio.ensure_future(self._wait_stop_change())
        try:
            await asyncio.wait((change, self._stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            change.cancel()

    async def _wait_stop_change(self) -> None:
        seen = self._stop_requests
        while self._stop_requests == seen:
            self._stop_event.clear()
            await self._stop_event.wait()
