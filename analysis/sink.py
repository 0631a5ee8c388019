"""The Parquet sink: a bus subscriber that writes the run tables as small rotated files, with
a journal of each tick's rows in between.

Rows are buffered per table and, at every tick (and phase change or event), handed to a writer
thread, which appends them to the table's journal (`analysis.journal`: an Arrow IPC stream,
one write a tick, no compression) and keeps them. Every `rotate_s` seconds (checked on each
call; sooner when a table holds ROTATE_ROWS rows) each table's rows since the last rotation
become one Parquet file, written under a hidden temporary name and renamed into place once
closed; then that journal is removed. A killed process therefore loses at most the tick being
handed over, readers read the closed files and the journals left beside them, and a visible
`part-NNNNN.parquet` always has its footer.

A file costs mostly per column, not per row (a ticks file of 18 rows and 46 columns takes
about three times as long to write as a lag file of 1,800 rows and 8 columns), so the sink
rotates every 10 s rather than more often, and files of fewer than SMALL_FILE_ROWS rows are
compressed with snappy: zstd sets up a compressor for each column, which costs more there than
it saves. A journal costs little: its batches are the ones the Parquet file is made of, written
as they are. Readers (Spark, pyarrow datasets) skip names starting with "." or "_", so a
leftover temporary file or a journal is not taken for a Parquet file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections import deque
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.journal import journal_name, part_name, used_parts
from analysis.schema import (
    LATENCY_KINDS,
    MIN_READER_VERSION,
    MIN_READER_WITHOUT_NODES,
    SCHEMA_VERSION,
    SCHEMAS,
)
from loadgen.core.brokermetrics import unit_of
from loadgen.core.errors import OutputError
from loadgen.core.events import PhaseChange, RunEvent, RunMeta
from loadgen.core.histogram import N_BUCKETS, HistogramSnapshot, bucket_value, percentiles
from loadgen.core.ticks import Phase, RawSamples, Tick

_TMP_SUFFIX = ".inprogress"
_SUMMARY_PS = [50.0, 99.0, 99.9]
ROTATE_S = 10.0
ROTATE_ROWS = 1_000_000  # a table this long is written at once (bounds memory at high rates)
SMALL_FILE_ROWS = 10_000
_RELEASE_BYTES = 32 << 20  # a file this large (in Arrow's memory) is a burst
_BUCKET_VALUES: list[np.ndarray] = []


def _bucket_values(index: np.ndarray) -> np.ndarray:
    """bucket_value by table look-up: the writer works it out for every latency row, now a
    tick at a time, and one take costs a fifth of the arithmetic."""
    if not _BUCKET_VALUES:
        _BUCKET_VALUES.append(bucket_value(np.arange(N_BUCKETS, dtype=np.int64)))
    return _BUCKET_VALUES[0].take(index)


# columns the writer works out from another: a latency bucket's value from its index
_DERIVED: dict[str, dict[str, tuple[str, Callable[[Any], Any]]]] = {
    "latency": {"value_ns": ("bucket", _bucket_values)}}


# columns written with Parquet's delta encoding instead of a dictionary: a latency row's
# bucket index, value and count, which are sorted or small and seldom repeat within a file
_DELTA: dict[str, tuple[str, ...]] = {"latency": ("bucket", "value_ns", "count")}


def _encodings(table: str) -> dict[str, Any]:
    delta = _DELTA.get(table)
    if not delta:
        return {}
    return {"use_dictionary": [n for n in SCHEMAS[table].names if n not in delta],
            "column_encoding": dict.fromkeys(delta, "DELTA_BINARY_PACKED")}


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _ensure_dir(path: Path, what: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise OutputError(f"cannot write {what} {path}: it exists and is not a directory") from None
    except OSError as exc:
        raise OutputError(f"cannot write {what} {path}: {_reason(exc)}") from None


def write_run_json(run_dir: Path, meta: dict[str, Any]) -> Path:
    """Write run.json atomically (temporary file + rename), with the schema version and the
    minimum reader version added.

    `meta` is expected to hold at least run_id, workload (OMB field names) and targets; any
    JSON-serialisable content is kept as given (other values are written as strings).
    """
    run_dir = Path(run_dir)
    _ensure_dir(run_dir, "run directory")
    needs = MIN_READER_VERSION if meta.get("cluster_placement") else MIN_READER_WITHOUT_NODES
    versions = {"schema_version": SCHEMA_VERSION, "min_reader_version": needs}
    doc = {**versions, **meta, **versions}  # first in the file, and never taken from meta
    final = run_dir / "run.json"
    tmp = run_dir / ".run.json.inprogress"
    try:
        tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, final)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(f"cannot write {final}: {_reason(exc)}") from None
    return final


class _Buffer:
    """Rows of one table waiting for the next rotation: single rows as column lists, and
    groups of rows that share some columns' values (a tick's latency buckets, its partitions'
    lag) as those values once and the other columns' arrays. The groups become columns in
    to_table(), in the writer thread: the event loop does not build them a tick at a time.
    `derived` columns are worked out there from another column of the groups."""

    __slots__ = ("cols", "derived", "groups", "rows", "schema")

    def __init__(self, schema: pa.Schema,
                 derived: dict[str, tuple[str, Callable[[Any], Any]]] | None = None) -> None:
        self.schema = schema
        self.derived = derived or {}
        self.cols: dict[str, list[Any]] = {name: [] for name in schema.names}
        # (the shared values, the other columns' arrays or lists, how many rows)
        self.groups: list[tuple[dict[str, Any], dict[str, Any], int]] = []
        self.rows = 0

    def append(self, row: dict[str, Any]) -> None:
        for name, col in self.cols.items():
            col.append(row[name])
        self.rows += 1

    def add_group(self, shared: dict[str, Any], columns: dict[str, Any], n: int) -> None:
        """`n` rows with the `shared` values and `columns` (arrays or lists of length n);
        together they name every column of the schema but the derived ones."""
        if n:
            self.groups.append((shared, columns, n))
            self.rows += n

    def empty(self) -> _Buffer:
        return _Buffer(self.schema, self.derived)

    def extend(self, other: _Buffer) -> None:
        """Take `other`'s rows after this one's."""
        for name, col in self.cols.items():
            col += other.cols[name]
        self.groups += other.groups
        self.rows += other.rows

    def _groups_batch(self) -> pa.RecordBatch:
        groups = self.groups
        lengths = np.fromiter((n for _, _, n in groups), dtype=np.int64, count=len(groups))
        shared, varying, _ = groups[0]
        columns: dict[str, pa.Array] = {}
        for f in self.schema:
            name = f.name
            if name in self.derived:
                continue
            if name in shared:
                columns[name] = _repeated([g[0][name] for g in groups], lengths, f.type)
            elif isinstance(varying[name], np.ndarray):
                columns[name] = pa.array(np.concatenate([g[1][name] for g in groups]),
                                         type=f.type)
            else:
                columns[name] = pa.array([v for g in groups for v in g[1][name]], type=f.type)
        for name, (source, fn) in self.derived.items():
            field = self.schema.field(name)
            columns[name] = pa.array(fn(columns[source].to_numpy()), type=field.type)
        return pa.RecordBatch.from_arrays([columns[f.name] for f in self.schema],
                                          schema=self.schema)

    def to_batches(self) -> list[pa.RecordBatch]:
        batches = []
        if self.groups:
            batches.append(self._groups_batch())
        if any(self.cols.values()):
            arrays = [pa.array(self.cols[f.name], type=f.type) for f in self.schema]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        return batches


class _Journal:
    """One table's rows since its last Parquet file, in the writer thread: the batches, kept
    for that file, and the journal on disk they are appended to as they come (opened at the
    first, written with one system call a tick, never read back by the writer)."""

    __slots__ = ("batches", "fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self.batches: list[pa.RecordBatch] = []

    def append(self, batches: list[pa.RecordBatch], schema: pa.Schema) -> None:
        messages: list[Any] = [b.serialize() for b in batches]
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                              0o644)
            messages.insert(0, schema.serialize())
        total = sum(m.size for m in messages)
        done = os.writev(self.fd, messages)
        if done < total:  # a short write (the disk is filling): the rest, or the error
            rest = b"".join(bytes(m) for m in messages)[done:]
            while rest:
                rest = rest[os.write(self.fd, rest):]

    def close(self, remove: bool) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _repeated(values: list[Any], lengths: np.ndarray, type_: pa.DataType) -> pa.Array:
    """`values[i]` `lengths[i]` times over. Strings (and their nulls) are laid out in the
    array's buffers and integers repeated by numpy: pyarrow's `take` would import
    pyarrow.compute the first time, about 70 ms of CPU in a run's measuring phase, and takes
    longer for the strings here."""
    if pa.types.is_string(type_):
        encoded = [b"" if v is None else str(v).encode() for v in values]
        sizes = np.repeat(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)),
                          lengths)
        if int(sizes.sum()) < 2**31:  # a string array's offsets are 32-bit
            offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
            np.cumsum(sizes, dtype=np.int32, out=offsets[1:])
            data = b"".join(b * int(n) for b, n in zip(encoded, lengths, strict=True))
            valid = None
            if None in values:  # a null is a cleared bit of the validity bitmap
                bits = np.repeat(np.array([v is not None for v in values]), lengths)
                valid = pa.py_buffer(np.packbits(bits, bitorder="little").tobytes())
            return pa.Array.from_buffers(type_, len(sizes), [valid, pa.py_buffer(offsets),
                                                              pa.py_buffer(data)])
    elif None not in values and (type_ == pa.int64() or
                                 (pa.types.is_timestamp(type_) and type_.unit == "us")):
        return pa.array(np.repeat(np.asarray(values, dtype=np.int64), lengths), type=type_)
    owner = pa.array(np.repeat(np.arange(len(values), dtype=np.int64), lengths))
    return pa.array(values, type=type_).take(owner)


def _time_lag_columns(t: Tick) -> dict[str, Any]:
    """The ticks' time lag columns: the exact figures where known, else the estimate."""
    seconds = t.lag_s
    time_lag = t.lag.time if t.lag is not None else None
    exact = t.lag_s_exact
    return {
        "lag_seconds": _finite(seconds),
        "lag_seconds_exact": exact if seconds == seconds else None,
        "lag_seconds_bound": _finite(time_lag.bound_s) if exact and time_lag else None,
        "lag_seconds_trend": _finite(time_lag.trend) if exact and time_lag else None,
        # inf (growing) is kept
        "lag_drain_s": (None if time_lag is None or time_lag.drain_s != time_lag.drain_s
                        else float(time_lag.drain_s)),
    }


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _summary(snap: HistogramSnapshot) -> tuple[int, int, int | None, float | None,
                                               float | None, float | None, int | None]:
    n = snap.total
    if n == 0:
        return 0, 0, None, None, None, None, None
    p50, p99, p999 = (float(v) for v in percentiles(snap, _SUMMARY_PS))
    return n, int(snap.sum), int(snap.min), p50, p99, p999, int(snap.max)


class ParquetSink:
    """Callable bus subscriber writing Tick, PhaseChange, RunEvent and RawSamples items into
    `<run_dir>/<table>/part-NNNNN.parquet` files (zstd), one file per table per rotation, with
    the rows of each tick appended to `<run_dir>/<table>/_journal-NNNNN.arrows` until their
    file is written, and each RunMeta as run.json.

    Journals and files are written by one background thread, in order; `wait()` blocks until
    they are on disk and `close()` flushes and waits. `background=False` writes in the calling
    thread. `clock` (monotonic seconds) decides when to rotate; tests pass a fake one."""

    def __init__(
        self,
        run_dir: Path,
        run_id: str,
        rotate_s: float = ROTATE_S,
        raw: bool = False,
        *,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
    ) -> None:
        self.run_dir = Path(run_dir)
        self._clock = clock
        self.run_id = run_id
        self.rotate_s = rotate_s
        self.raw = raw
        self._tables = [t for t in SCHEMAS if raw or t != "raw"]
        _ensure_dir(self.run_dir, "run directory")
        for table in self._tables:
            _ensure_dir(self.run_dir / table, "run directory")
        self._buffers = {t: _Buffer(SCHEMAS[t], _DERIVED.get(t)) for t in self._tables}
        # the file number each table's rows go into next, and its rows handed over since the
        # last rotation; the handed-over rows wait in _cuts for the writer thread
        self._part = {t: self._first_free_part(self.run_dir / t) for t in self._tables}
        self._rows = dict.fromkeys(self._tables, 0)
        self._cuts: deque[list[tuple[str, int, _Buffer]]] = deque()
        self._queued = False  # a job that takes the cuts waits for the writer thread
        self._journals: dict[tuple[str, int], _Journal] = {}  # the writer thread's
        self._phase = Phase.STARTING
        self._last_rotate = clock()
        self._closed = False
        self.files_written = 0
        # Compressing and writing a file takes tens of milliseconds: a writer thread does it
        # (pyarrow releases the GIL), so the event loop that calls the sink is not held up.
        self._writer = (
            futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet-sink")
            if background
            else None
        )
        self._pending: list[futures.Future[None]] = []
        self._failed: list[BaseException] = []

    @staticmethod
    def _first_free_part(table_dir: Path) -> int:
        used = used_parts(table_dir)  # a journal left by a killed run keeps its number
        return max(used) + 1 if used else 0

    # -- bus interface ------------------------------------------------------------------

    def __call__(self, item: object) -> None:
        if self._closed:
            if isinstance(item, RunMeta):  # a run that failed in closing says so
                write_run_json(self.run_dir, item.meta)
            return
        if isinstance(item, Tick):
            self._add_tick(item)
        elif isinstance(item, PhaseChange):
            self._phase = item.phase
            detail = item.phase.value + (f": {item.message}" if item.message else "")
            self._buffers["events"].append(
                {
                    "run_id": self.run_id,
                    "target": "",
                    "time": item.time_ns // 1000,
                    "phase": item.phase.value,
                    "kind": "phase",
                    "detail": detail,
                }
            )
        elif isinstance(item, RunEvent):
            self._buffers["events"].append(
                {
                    "run_id": self.run_id,
                    "target": item.target,
                    "time": item.time_ns // 1000,
                    "phase": self._phase.value,
                    "kind": item.kind,
                    "detail": item.detail,
                }
            )
        elif isinstance(item, RawSamples):
            if self.raw:
                self._add_raw(item)
        elif isinstance(item, RunMeta):
            write_run_json(self.run_dir, item.meta)
        else:
            return  # other bus traffic is not ours
        if (self._clock() - self._last_rotate >= self.rotate_s
                or any(self._rows[t] + b.rows >= ROTATE_ROWS for t, b in self._buffers.items())):
            self.flush()
        elif not isinstance(item, RawSamples):  # a tick's raw samples come before the tick
            self._cut()
            self._submit([])
            self._raise_failed()

    def _cut(self) -> None:
        """Hand every table's buffered rows over to the writer (for the journal)."""
        cut = []
        for table in self._tables:
            buf = self._buffers[table]
            if buf.rows:
                self._buffers[table] = buf.empty()
                self._rows[table] += buf.rows
                cut.append((table, self._part[table], buf))
        if cut:
            self._cuts.append(cut)

    def _submit(self, fold: list[tuple[str, int]]) -> None:
        if self._writer is None:
            self._work(fold)
        elif fold or (self._cuts and not self._queued):
            # one job takes every cut waiting: ticks of several targets come together, and the
            # writer thread then wakes once for them, not once a target
            self._queued = True
            self._pending.append(self._writer.submit(self._work, fold))

    def flush(self) -> None:
        """Hand every table's rows to the writer, one new file per table (nothing for a table
        without rows since the last one). Raises OutputError if an earlier file or journal
        could not be written."""
        self._last_rotate = self._clock()
        self._cut()
        fold = [(t, self._part[t]) for t in self._tables if self._rows[t]]
        for table, _ in fold:
            self._part[table] += 1
            self._rows[table] = 0
        self._submit(fold)
        self._raise_failed()

    def _work(self, fold: list[tuple[str, int]]) -> None:
        """In the writer thread: append the rows handed over to their journals, then write
        the files of `fold` (table, file number). A file or journal that cannot be written
        does not keep the others from being written (the first error is raised once all were
        tried)."""
        self._queued = False  # before taking the cuts: one handed over after this gets a job
        failed: list[Exception] = []
        folding = set(fold)
        taken: dict[tuple[str, int], _Buffer] = {}  # one batch a table, not one a target
        while self._cuts:
            for table, part, buf in self._cuts.popleft():
                if (table, part) in taken:
                    taken[(table, part)].extend(buf)
                else:
                    taken[(table, part)] = buf
        for (table, part), buf in taken.items():
            journal = self._journals.get((table, part))
            if journal is None:
                journal = self._journals[(table, part)] = _Journal(
                    self.run_dir / table / journal_name(part))
            batches = buf.to_batches()
            journal.batches += batches
            if (table, part) in folding:
                continue  # its file is written below: no need to journal it first
            try:
                journal.append(batches, SCHEMAS[table])
            except OSError as exc:
                failed.append(OutputError(f"cannot write {journal.path}: {_reason(exc)}"))
        for table, part in fold:
            try:
                self._write(table, part, self._journals.pop((table, part)))
            except Exception as exc:  # raised below, after the other files
                failed.append(exc)
        if failed:
            raise failed[0]

    def wait(self) -> None:
        """Block until every file handed to the writer is on disk (renamed into place)."""
        pending, self._pending = self._pending, []
        futures.wait(pending)
        self._failed.extend(e for f in pending if (e := f.exception()) is not None)
        self._raise_failed()

    def close(self) -> None:
        """Flush what is buffered and wait for the files; later calls and items are ignored
        (a RunMeta still writes run.json).
        Raises OutputError if a file could not be written."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush()
        finally:
            try:
                self.wait()
            finally:
                if self._writer is not None:
                    self._writer.shutdown(wait=True)

    def _raise_failed(self) -> None:
        still = []
        for f in self._pending:
            if f.done():
                if (exc := f.exception()) is not None:
                    self._failed.append(exc)
            else:
                still.append(f)
        self._pending = still
        if self._failed:
            exc, self._failed = self._failed[0], []
            if isinstance(exc, OutputError):
                raise OutputError(str(exc))
            raise exc

    # -- rows ------------------------------------------------------------------------------

    def _add_tick(self, t: Tick) -> None:
        time_us = t.time_ns // 1000
        phase = t.phase.value
        res = t.resources
        cpu = res.cpu_percent
        row: dict[str, Any] = {
            "run_id": self.run_id,
            "target": t.target,
            "seq": t.seq,
            "time": time_us,
            "interval_s": float(t.interval_s),
            "phase": phase,
            "elapsed_s": float(t.elapsed_s),
            "produced": t.produced,
            "produced_bytes": t.produced_bytes,
            "consumed": t.consumed,
            "consumed_bytes": t.consumed_bytes,
            "send_errors": t.send_errors,
            "target_rate": float(t.target_rate),
            "produced_total": t.produced_total,
            "consumed_total": t.consumed_total,
            "lag_total": t.lag.total if t.lag is not None else None,
            "cpu_percent": None if cpu is None or math.isnan(cpu) else float(cpu),
            "memory_bytes": res.memory_bytes,
            "disk_read_bytes": res.disk_read_bytes,
            "disk_write_bytes": res.disk_write_bytes,
            "net_rx_bytes": res.net_rx_bytes,
            "net_tx_bytes": res.net_tx_bytes,
            "loadgen_cpu_percent": _finite(t.loadgen.cpu_percent),
            "loadgen_loop_lag_ms": _finite(t.loadgen.loop_lag_ms),
            "loadgen_saturated": t.loadgen.saturated,
            "duplicates": t.duplicates,
            "reordered": t.reordered,
            "e2e_below_zero": t.e2e_below_zero,
            "e2e_clock_bound_ns": t.e2e_clock_bound_ns,
            "nodes_lost": t.nodes_lost,
            "nodes_late": t.nodes_late,
            "nodes_late_counted": t.nodes_late_counted,
            **_time_lag_columns(t),
        }
        snaps = {"e2e": t.e2e_latency, "publish": t.publish_latency, "delay": t.publish_delay}
        for kind in LATENCY_KINDS:
            snap = snaps[kind]
            n, total, lo, p50, p99, p999, hi = _summary(snap)
            row[f"{kind}_count"] = n
            row[f"{kind}_sum"] = total
            row[f"{kind}_min"] = lo
            row[f"{kind}_p50"] = p50
            row[f"{kind}_p99"] = p99
            row[f"{kind}_p999"] = p999
            row[f"{kind}_max"] = hi
            if n:
                self._add_buckets(t, kind, snap)
        for node in t.nodes:
            node_snaps = {"e2e": node.e2e_latency, "publish": node.publish_latency,
                          "delay": node.publish_delay}
            for kind, share in node_snaps.items():
                if share is not None and share.total:
                    self._add_buckets(t, kind, share, node.node)
        self._buffers["ticks"].append(row)

        if t.lag is not None and t.lag.per_partition:
            per_partition = t.lag.per_partition
            seconds = t.lag.time.per_partition if t.lag.time is not None else {}
            self._buffers["lag"].add_group(
                {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
                 "phase": phase, "source": t.lag.source},
                {"partition": [int(p) for p in per_partition],
                 "lag": [int(v) for v in per_partition.values()],
                 "time_lag_s": [_finite(seconds.get(p, math.nan)) for p in per_partition],
                 "leader": [p not in t.lag.leaderless for p in per_partition]},
                len(per_partition))
        if t.lag is not None and t.lag.time is not None and t.lag.time.status:
            time_lag = t.lag.time
            self._buffers["subscriptions"].add_group(
                {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
                 "phase": phase},
                {"subscription": list(time_lag.status),
                 "time_lag_s": [_finite(time_lag.per_subscription.get(s, math.nan))
                                for s in time_lag.status],
                 "status": [str(v) for v in time_lag.status.values()]},
                len(time_lag.status))
        if t.consumers:
            consumers = self._buffers["consumers"]
            for c in t.consumers:
                consumers.append(
                    {
                        "run_id": self.run_id,
                        "target": t.target,
                        "seq": t.seq,
                        "time": time_us,
                        "phase": phase,
                        "topic": c.topic,
                        "subscription": c.subscription,
                        "consumer": c.index,
                        "consumed": c.consumed,
                        "partitions": None if c.partitions is None else list(c.partitions),
                        "shared": c.shared,
                    }
                )
        if t.nodes:
            self._add_nodes(t, time_us, phase)
        if t.broker:
            broker = t.broker
            self._buffers["broker"].add_group(
                {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
                 "phase": phase},
                {"name": [str(name) for name in broker], "value": [float(v) for v in broker.values()]},
                len(broker))

        if t.broker_metrics is not None and t.broker_metrics.values:
            self._add_broker_metrics(t, time_us, phase)

    def _add_broker_metrics(self, t: Tick, time_us: int, phase: str) -> None:
        assert t.broker_metrics is not None
        stale = set(t.broker_metrics.stale)
        rows = [(broker, name, value) for broker, values in t.broker_metrics.values.items()
                for name, value in values.items()]
        self._buffers["broker_metrics"].add_group(
            {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
             "phase": phase},
            {"broker": [r[0] for r in rows], "name": [r[1] for r in rows],
             "unit": [unit_of(r[1]) for r in rows], "value": [float(r[2]) for r in rows],
             "stale": [r[0] in stale for r in rows]},
            len(rows))

    def _add_nodes(self, t: Tick, time_us: int, phase: str) -> None:
        clocks = {c.node: c for c in t.clocks}
        nodes = t.nodes
        known = [clocks.get(n.node) for n in nodes]
        self._buffers["nodes"].add_group(
            {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
             "phase": phase},
            {"node": [n.node for n in nodes], "host": [n.host for n in nodes],
             "produced": [n.produced for n in nodes], "consumed": [n.consumed for n in nodes],
             "loadgen_cpu_percent": [_finite(n.cpu_percent) for n in nodes],
             "loadgen_loop_lag_ms": [_finite(n.loop_lag_ms) for n in nodes],
             "memory_bytes": [n.memory_bytes for n in nodes],
             "loadgen_saturated": [n.saturated for n in nodes],
             "clock_offset_ns": [None if c is None else c.offset_ns for c in known],
             "clock_bound_ns": [None if c is None else c.bound_ns for c in known],
             "clock_estimated": [None if c is None else c.estimated_ns // 1000 for c in known]},
            len(nodes))

    def _keys(self, target: str, seq: int, time_ns: int, phase: Phase) -> dict[str, Any]:
        return {"run_id": self.run_id, "target": target, "seq": seq, "time": time_ns // 1000,
                "phase": phase.value}

    def _add_buckets(self, t: Tick, kind: str, snap: HistogramSnapshot,
                     node: str | None = None) -> None:
        self._buffers["latency"].add_group(
            {**self._keys(t.target, t.seq, t.time_ns, t.phase), "kind": kind, "node": node},
            {"bucket": np.asarray(snap.index, dtype=np.int64),
             "count": np.asarray(snap.count, dtype=np.int64)},
            len(snap.index))

    def _add_raw(self, r: RawSamples) -> None:
        self._buffers["raw"].add_group(
            {**self._keys(r.target, r.seq, r.time_ns, r.phase), "kind": r.kind},
            {"value_ns": np.asarray(r.values, dtype=np.int64)},
            len(r.values))

    # -- files -----------------------------------------------------------------------------

    def _write(self, table: str, part: int, journal: _Journal) -> None:
        """Write one file under a hidden name, rename it into place and remove its journal
        (writer thread). A file that cannot be written leaves its journal, rows and all."""
        name = part_name(part)
        final = self.run_dir / table / name
        tmp = final.with_name(f".{name}{_TMP_SUFFIX}")
        written = False
        try:
            table_data = pa.Table.from_batches(journal.batches, schema=SCHEMAS[table])
            journal.batches = []
            pq.write_table(table_data, tmp, compression="zstd" if table_data.num_rows >=
                           SMALL_FILE_ROWS else "snappy", **_encodings(table))
            os.replace(tmp, final)
            written = True
            # The rows are on disk: drop them. After a burst (a slow disk, a loaded host) hand
            # the allocator's freed pages back to the system, so that it does not leave the
            # process larger for the rest of the run; not after every file: pages handed back
            # are faulted in again by the next one, which costs more CPU than writing it.
            large = table_data.nbytes >= _RELEASE_BYTES
            del table_data
            if large:
                pa.default_memory_pool().release_unused()
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise OutputError(f"cannot write {final}: {_reason(exc)}") from None
        finally:
            journal.close(remove=written)
        self.files_written += 1
