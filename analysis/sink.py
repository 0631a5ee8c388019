"""The Parquet sink: a bus subscriber that writes the run tables as small rotated files.

Rows are buffered per table. Every `rotate_s` seconds (checked on each call; sooner when a
table holds ROTATE_ROWS rows) each table's buffered rows become one Parquet file, written under
a hidden temporary name and renamed into place once closed. A killed process therefore loses at
most the last `rotate_s` seconds, and a visible `part-NNNNN.parquet` always has its footer.

A file costs mostly per column, not per row (a ticks file of 18 rows and 46 columns takes
about three times as long to write as a lag file of 1,800 rows and 8 columns), so the sink
rotates every 10 s rather than more often, and files of fewer than SMALL_FILE_ROWS rows are
compressed with snappy: zstd sets up a compressor for each column, which costs more there than
it saves. Readers (Spark, pyarrow datasets) skip names
starting with "." or "_", so a leftover temporary file is ignored.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.schema import LATENCY_KINDS, MIN_READER_VERSION, SCHEMA_VERSION, SCHEMAS
from loadgen.core.errors import OutputError
from loadgen.core.events import PhaseChange, RunEvent, RunMeta
from loadgen.core.histogram import HistogramSnapshot, bucket_value, percentiles
from loadgen.core.ticks import Phase, RawSamples, Tick

_PART_RE = re.compile(r"^part-(\d+)\.parquet$")
_TMP_SUFFIX = ".inprogress"
_SUMMARY_PS = [50.0, 99.0, 99.9]
ROTATE_S = 10.0
ROTATE_ROWS = 1_000_000  # a table this long is written at once (bounds memory at high rates)
SMALL_FILE_ROWS = 10_000
_RELEASE_BYTES = 32 << 20  # a file this large (in Arrow's memory) is a burst
# columns the writer works out from another: a latency bucket's value from its index
_DERIVED: dict[str, dict[str, tuple[str, Callable[[Any], Any]]]] = {
    "latency": {"value_ns": ("bucket", bucket_value)}}


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
    versions = {"schema_version": SCHEMA_VERSION, "min_reader_version": MIN_READER_VERSION}
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

    def clear(self) -> None:
        self.cols = {name: [] for name in self.schema.names}
        self.groups = []
        self.rows = 0

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

    def to_table(self) -> pa.Table:
        batches = []
        if self.groups:
            batches.append(self._groups_batch())
        if any(self.cols.values()):
            arrays = [pa.array(self.cols[f.name], type=f.type) for f in self.schema]
            batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        return pa.Table.from_batches(batches, schema=self.schema)


def _repeated(values: list[Any], lengths: np.ndarray, type_: pa.DataType) -> pa.Array:
    """`values[i]` `lengths[i]` times over. Strings are laid out in the array's buffers and
    integers repeated by numpy: pyarrow's `take` would import pyarrow.compute the first time,
    about 70 ms of CPU in a run's measuring phase, and takes longer for the strings here."""
    if None not in values:
        if pa.types.is_string(type_):
            encoded = [str(v).encode() for v in values]
            sizes = np.repeat(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)),
                              lengths)
            if int(sizes.sum()) < 2**31:  # a string array's offsets are 32-bit
                offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
                np.cumsum(sizes, dtype=np.int32, out=offsets[1:])
                data = b"".join(b * int(n) for b, n in zip(encoded, lengths, strict=True))
                return pa.Array.from_buffers(type_, len(sizes), [None, pa.py_buffer(offsets),
                                                                  pa.py_buffer(data)])
        elif type_ == pa.int64() or (pa.types.is_timestamp(type_) and type_.unit == "us"):
            return pa.array(np.repeat(np.asarray(values, dtype=np.int64), lengths), type=type_)
    owner = pa.array(np.repeat(np.arange(len(values), dtype=np.int64), lengths))
    return pa.array(values, type=type_).take(owner)


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
    `<run_dir>/<table>/part-NNNNN.parquet` files (zstd), one file per table per rotation, and
    each RunMeta as run.json.

    Files are written by one background thread, in order; `wait()` blocks until they are on
    disk and `close()` flushes and waits. `background=False` writes in the calling thread.
    `clock` (monotonic seconds) decides when to rotate; tests pass a fake one."""

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
        self._next_part = {t: self._first_free_part(self.run_dir / t) for t in self._tables}
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
        used = [int(m.group(1)) for p in table_dir.iterdir() if (m := _PART_RE.match(p.name))]
        return max(used) + 1 if used else 0

    # -- bus interface ------------------------------------------------------------------

    def __call__(self, item: object) -> None:
        if self._closed:
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
                or any(b.rows >= ROTATE_ROWS for b in self._buffers.values())):
            self.flush()

    def flush(self) -> None:
        """Hand every table's buffered rows to the writer, one new file per table (nothing
        for an empty table). Raises OutputError if an earlier file could not be written."""
        self._last_rotate = self._clock()
        files = []
        for table in self._tables:
            buf = self._buffers[table]
            if not buf.rows:
                continue
            self._buffers[table] = buf.empty()
            part = self._next_part[table]
            self._next_part[table] = part + 1
            files.append((table, part, buf))
        if files:
            if self._writer is None:
                self._write_all(files)
            else:  # one job for the set: the writer thread wakes once, not once a table
                self._pending.append(self._writer.submit(self._write_all, files))
        self._raise_failed()

    def _write_all(self, files: list[tuple[str, int, _Buffer]]) -> None:
        """Write each file of a set; a file that cannot be written does not keep the others
        from being written (the first error is raised once all were tried)."""
        failed: list[Exception] = []
        for table, part, buf in files:
            try:
                self._write(table, part, buf)
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
        """Flush what is buffered and wait for the files; later calls and items are ignored.
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
        self._buffers["ticks"].append(row)

        if t.lag is not None and t.lag.per_partition:
            per_partition = t.lag.per_partition
            self._buffers["lag"].add_group(
                {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
                 "phase": phase, "source": t.lag.source},
                {"partition": [int(p) for p in per_partition],
                 "lag": [int(v) for v in per_partition.values()]},
                len(per_partition))
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
        if t.broker:
            broker = t.broker
            self._buffers["broker"].add_group(
                {"run_id": self.run_id, "target": t.target, "seq": t.seq, "time": time_us,
                 "phase": phase},
                {"name": [str(name) for name in broker], "value": [float(v) for v in broker.values()]},
                len(broker))

    def _keys(self, target: str, seq: int, time_ns: int, phase: Phase) -> dict[str, Any]:
        return {"run_id": self.run_id, "target": target, "seq": seq, "time": time_ns // 1000,
                "phase": phase.value}

    def _add_buckets(self, t: Tick, kind: str, snap: HistogramSnapshot) -> None:
        self._buffers["latency"].add_group(
            {**self._keys(t.target, t.seq, t.time_ns, t.phase), "kind": kind},
            {"bucket": np.asarray(snap.index, dtype=np.int64),
             "count": np.asarray(snap.count, dtype=np.int64)},
            len(snap.index))

    def _add_raw(self, r: RawSamples) -> None:
        self._buffers["raw"].add_group(
            {**self._keys(r.target, r.seq, r.time_ns, r.phase), "kind": r.kind},
            {"value_ns": np.asarray(r.values, dtype=np.int64)},
            len(r.values))

    # -- files -----------------------------------------------------------------------------

    def _write(self, table: str, part: int, buf: _Buffer) -> None:
        """Write one file under a hidden name and rename it into place (writer thread)."""
        name = f"part-{part:05d}.parquet"
        final = self.run_dir / table / name
        tmp = final.with_name(f".{name}{_TMP_SUFFIX}")
        try:
            table_data = buf.to_table()
            pq.write_table(table_data, tmp, compression="zstd" if table_data.num_rows >=
                           SMALL_FILE_ROWS else "snappy")
            os.replace(tmp, final)
            # The rows are on disk: drop them. After a burst (a slow disk, a loaded host) hand
            # the allocator's freed pages back to the system, so that it does not leave the
            # process larger for the rest of the run; not after every file: pages handed back
            # are faulted in again by the next one, which costs more CPU than writing it.
            large = table_data.nbytes >= _RELEASE_BYTES
            del table_data
            buf.clear()
            if large:
                pa.default_memory_pool().release_unused()
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise OutputError(f"cannot write {final}: {_reason(exc)}") from None
        self.files_written += 1
