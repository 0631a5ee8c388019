"""A recorded run read back as the bus items the dashboard saw: ticks with their latency
histograms, per-partition lag and broker counters, phase changes and events, in time order.

Read with pyarrow (no Spark), by column name with this version's schemas (analysis.schema): a
column an older run lacks reads as null, a column a newer run added is left out, as the report
reads runs (docs/run-format.md). Closed `part-NNNNN.parquet` files are read, and the journal a
run killed mid-way left beside them, so such a run replays up to its last whole tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from analysis.journal import journal_rows, table_files
from analysis.runmeta import read_run_meta
from analysis.schema import SCHEMA_VERSION, SCHEMAS
from loadgen.core.errors import StreambenchError, WorkloadError
from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.histogram import HistogramSnapshot
from loadgen.core.ticks import (
    BrokerMetricValues,
    ConsumerStat,
    LagSnapshot,
    LagStatus,
    LoadgenHealth,
    NodeClock,
    NodeStat,
    Phase,
    Resources,
    Tick,
    TimeLag,
)
from loadgen.core.workload import Workload, parse_workload
from tui.history import Baseline

ReplayItem = Tick | PhaseChange | RunEvent
_KINDS = {"e2e": "e2e_latency", "publish": "publish_latency", "delay": "publish_delay"}


class RecordingError(StreambenchError):
    """A directory that cannot be replayed: one line for the user."""


@dataclass
class Recording:
    """One run directory, read whole: its items in time order and what marks it."""

    run_dir: Path
    meta: dict[str, Any]
    labels: list[str]
    workload: Workload
    items: list[ReplayItem]
    times: list[int]  # time_ns of each item, ascending
    schema_version: int
    complete: bool  # run.json records the run's end
    notes: list[str] = field(default_factory=list)

    @property
    def start_ns(self) -> int:
        return self.times[0]

    @property
    def end_ns(self) -> int:
        return self.times[-1]

    @property
    def length_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def read_table(run_dir: Path, table: str) -> pa.Table:
    """One table of a run with the reader's columns (all nullable): its closed Parquet files,
    then the rows of a journal a killed run left (analysis.journal); no files give no rows."""
    schema = pa.schema([f.with_nullable(True) for f in SCHEMAS[table]])
    parquet, journals = table_files(run_dir / table)
    try:
        closed = (ds.dataset([str(p) for p in parquet], schema=schema, format="parquet").to_table()
                  if parquet else schema.empty_table())
    except (OSError, pa.ArrowException) as exc:
        raise RecordingError(f"{run_dir / table} cannot be read: {str(exc)[:200]}") from None
    if not journals:
        return closed
    return pa.concat_tables([closed, journal_rows(run_dir / table, schema)])


def read_meta(run_dir: Path) -> dict[str, Any]:
    if not run_dir.is_dir():
        why = "not a directory" if run_dir.exists() else "no such directory"
        raise RecordingError(f"{run_dir} is not a run directory ({why})")
    return read_run_meta(run_dir, RecordingError)


def _workload(meta: dict[str, Any]) -> Workload:
    doc = meta.get("workload")
    if isinstance(doc, dict):
        try:
            return parse_workload(doc, "run.json")
        except WorkloadError:
            name = doc.get("name")
            return Workload(name=str(name) if name else "recorded")
    return Workload(name="recorded")


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _histograms(run_dir: Path) -> dict[tuple[str, int, str], tuple[np.ndarray, np.ndarray]]:
    """(target, seq, kind) → (bucket indexes, counts), from the latency table."""
    table = read_table(run_dir, "latency").select(["target", "seq", "kind", "bucket", "count",
                                                    "node"])
    # the target's histograms; a load node's own rows (schema 6) are beside them
    mine = np.asarray(table["node"].is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if not mine.any():
        return {}
    targets = table["target"].to_numpy(zero_copy_only=False).astype(str)[mine]
    kinds = table["kind"].to_numpy(zero_copy_only=False).astype(str)[mine]
    seqs = table["seq"].to_numpy()[mine]
    buckets = table["bucket"].to_numpy()[mine]
    counts = table["count"].to_numpy()[mine]
    order = np.lexsort((buckets, kinds, seqs, targets))
    targets, kinds, seqs = targets[order], kinds[order], seqs[order]
    buckets, counts = buckets[order], counts[order]
    change = np.flatnonzero((targets[1:] != targets[:-1]) | (seqs[1:] != seqs[:-1])
                            | (kinds[1:] != kinds[:-1])) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [len(order)]))
    return {(str(targets[s]), int(seqs[s]), str(kinds[s])): (buckets[s:e], counts[s:e])
            for s, e in zip(starts, ends, strict=True)}


def _per_tick(run_dir: Path, table: str, key: str, value: str) -> dict[tuple[str, int], dict[Any, Any]]:
    rows = read_table(run_dir, table).select(["target", "seq", key, value]).to_pydict()
    out: dict[tuple[str, int], dict[Any, Any]] = {}
    for target, seq, k, v in zip(rows["target"], rows["seq"], rows[key], rows[value], strict=True):
        out.setdefault((target, seq), {})[k] = v
    return out


def _consumers(run_dir: Path) -> dict[tuple[str, int], tuple[ConsumerStat, ...]]:
    """(target, seq) → the tick's consumers (none in runs of schema version 2 and older)."""
    rows = read_table(run_dir, "consumers").select(
        ["target", "seq", "topic", "subscription", "consumer", "consumed", "partitions",
         "shared"]).to_pydict()
    out: dict[tuple[str, int], list[ConsumerStat]] = {}
    for target, seq, topic, sub, index, consumed, held, shared in zip(
            *rows.values(), strict=True):
        out.setdefault((target, seq), []).append(ConsumerStat(
            int(topic or 0), str(sub or ""), int(index or 0), int(consumed or 0),
            None if held is None else tuple(int(p) for p in held), bool(shared)))
    return {key: tuple(sorted(found, key=lambda c: (c.topic, c.subscription, c.index)))
            for key, found in out.items()}


def _broker_metrics(run_dir: Path) -> dict[tuple[str, int], BrokerMetricValues]:
    """(target, seq) → the tick's broker metrics (none in runs of schema version 3 and
    older)."""
    rows = read_table(run_dir, "broker_metrics").select(
        ["target", "seq", "broker", "name", "value", "stale"]).to_pydict()
    values: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
    stale: dict[tuple[str, int], set[str]] = {}
    for target, seq, broker, name, value, is_stale in zip(*rows.values(), strict=True):
        key = (str(target), int(seq))
        values.setdefault(key, {}).setdefault(str(broker), {})[str(name)] = _nan(value)
        if is_stale:
            stale.setdefault(key, set()).add(str(broker))
    return {key: BrokerMetricValues(found, tuple(sorted(stale.get(key, ()))),
                                    "not read" if key in stale else "")
            for key, found in values.items()}

def _nodes(run_dir: Path) -> dict[tuple[str, int], tuple[tuple[NodeStat, ...],
                                                          tuple[NodeClock, ...]]]:
    """(target, seq) → each load node's share and clock estimate at the tick (runs on a
    cluster, schema version 4 and later)."""
    table = read_table(run_dir, "nodes")
    rows = table.select(["target", "seq", "node", "host", "produced", "consumed",
                         "loadgen_cpu_percent", "loadgen_loop_lag_ms", "memory_bytes",
                         "loadgen_saturated", "clock_offset_ns", "clock_bound_ns"]).to_pydict()
    estimated = table["clock_estimated"].cast(pa.int64()).to_pylist()
    stats: dict[tuple[str, int], list[NodeStat]] = {}
    clocks: dict[tuple[str, int], list[NodeClock]] = {}
    for (target, seq, node, host, produced, consumed, cpu, lag, memory, saturated, offset,
         bound), at in zip(zip(*rows.values(), strict=True), estimated, strict=True):
        node = str(node or "")
        stats.setdefault((target, seq), []).append(NodeStat(
            node, str(host or ""), int(produced or 0), int(consumed or 0), _nan(cpu), _nan(lag),
            int(memory or 0), str(saturated or "")))
        if offset is not None:
            clocks.setdefault((target, seq), []).append(
                NodeClock(node, int(offset), int(bound or 0), int(at or 0) * 1000))
    return {key: (tuple(found), tuple(clocks.get(key, ()))) for key, found in stats.items()}


def _phase(name: Any, run_dir: Path) -> Phase:
    try:
        return Phase(name)
    except ValueError:
        raise RecordingError(f"{run_dir}: a tick of unknown phase {str(name)[:40]!r}") from None


def _micros(table: pa.Table) -> list[int]:
    """The `time` column as integer microseconds since the epoch."""
    return [int(v) for v in table["time"].cast(pa.int64()).to_pylist()]


def _subscriptions(run_dir: Path) -> dict[tuple[str, int], dict[str, tuple[float, LagStatus]]]:
    """(target, seq) → subscription → (time lag s, status) (none before schema version 4)."""
    rows = read_table(run_dir, "subscriptions").select(
        ["target", "seq", "subscription", "time_lag_s", "status"]).to_pydict()
    out: dict[tuple[str, int], dict[str, tuple[float, LagStatus]]] = {}
    for target, seq, sub, seconds, status in zip(*rows.values(), strict=True):
        try:
            word = LagStatus(status)
        except ValueError:
            continue
        out.setdefault((target, seq), {})[str(sub)] = (_nan(seconds), word)
    return out


def _time_lag(row: dict[str, Any], per_partition: dict[Any, Any],
              subscriptions: dict[str, tuple[float, LagStatus]]) -> TimeLag | None:
    """The tick's exact time lag as recorded; None where the run had the estimate only."""
    if not row.get("lag_seconds_exact"):
        return None
    return TimeLag(
        seconds=_nan(row["lag_seconds"]),
        per_partition={int(p): _nan(v) for p, v in per_partition.items()},
        per_subscription={s: v[0] for s, v in subscriptions.items()},
        bound_s=_nan(row["lag_seconds_bound"]), trend=_nan(row["lag_seconds_trend"]),
        drain_s=_nan(row["lag_drain_s"]),
        status={s: v[1] for s, v in subscriptions.items()})


def _ticks(run_dir: Path) -> list[Tick]:
    table = read_table(run_dir, "ticks")
    times = _micros(table)
    rows = table.to_pylist()
    hists = _histograms(run_dir)
    lags = _per_tick(run_dir, "lag", "partition", "lag")
    sources = _per_tick(run_dir, "lag", "partition", "source")
    time_lags = _per_tick(run_dir, "lag", "partition", "time_lag_s")
    leader = _per_tick(run_dir, "lag", "partition", "leader")
    subscriptions = _subscriptions(run_dir)
    counters = _per_tick(run_dir, "broker", "name", "value")
    consumers = _consumers(run_dir)
    metrics = _broker_metrics(run_dir)
    nodes = _nodes(run_dir)
    empty = np.zeros(0, np.int64)
    ticks = []
    for r, time_us in zip(rows, times, strict=True):
        target, seq = r["target"], r["seq"]
        snaps = {}
        for kind, attr in _KINDS.items():
            index, count = hists.get((target, seq, kind), (empty, empty))
            snaps[attr] = HistogramSnapshot(np.asarray(index, np.int64), np.asarray(count, np.int64),
                                            r[f"{kind}_min"] or 0, r[f"{kind}_max"] or 0,
                                            r[f"{kind}_sum"] or 0)
        lag = None
        if r["lag_total"] is not None:
            per_partition = {int(p): int(v) for p, v in lags.get((target, seq), {}).items()}
            source = next(iter(sources.get((target, seq), {}).values()), "")
            leaders = leader.get((target, seq), {})
            lag = LagSnapshot(int(r["lag_total"]), per_partition, source,
                              leaderless=tuple(int(p) for p, v in leaders.items() if v is False),
                              time=_time_lag(r, time_lags.get((target, seq), {}),
                                             subscriptions.get((target, seq), {})))
        ticks.append(Tick(
            target=target, seq=seq, time_ns=time_us * 1000,
            interval_s=r["interval_s"] or 0.0, phase=_phase(r["phase"], run_dir),
            elapsed_s=r["elapsed_s"] or 0.0,
            produced=r["produced"] or 0, produced_bytes=r["produced_bytes"] or 0,
            consumed=r["consumed"] or 0, consumed_bytes=r["consumed_bytes"] or 0,
            send_errors=r["send_errors"] or 0, target_rate=r["target_rate"] or 0.0,
            lag=lag,
            resources=Resources(
                cpu_percent=_nan(r["cpu_percent"]), memory_bytes=r["memory_bytes"] or 0,
                disk_read_bytes=r["disk_read_bytes"] or 0,
                disk_write_bytes=r["disk_write_bytes"] or 0,
                net_rx_bytes=r["net_rx_bytes"] or 0, net_tx_bytes=r["net_tx_bytes"] or 0),
            broker={str(k): float(v) for k, v in counters.get((target, seq), {}).items()},
            produced_total=r["produced_total"] or 0, consumed_total=r["consumed_total"] or 0,
            loadgen=LoadgenHealth(_nan(r["loadgen_cpu_percent"]), _nan(r["loadgen_loop_lag_ms"]),
                                  r["loadgen_saturated"] or ""),
            consumers=consumers.get((target, seq), ()),
            duplicates=r.get("duplicates") or 0, reordered=r.get("reordered") or 0,
            broker_metrics=metrics.get((target, seq)),
            e2e_below_zero=r["e2e_below_zero"] or 0,
            e2e_clock_bound_ns=r["e2e_clock_bound_ns"] or 0,
            nodes_lost=r["nodes_lost"] or 0,
            nodes_late=r.get("nodes_late") or 0,
            nodes_late_counted=r.get("nodes_late_counted") or 0,
            nodes=nodes.get((target, seq), ((), ()))[0],
            clocks=nodes.get((target, seq), ((), ()))[1],
            publish_latency=snaps["publish_latency"], publish_delay=snaps["publish_delay"],
            e2e_latency=snaps["e2e_latency"],
        ))
    return ticks


def _events(run_dir: Path) -> list[PhaseChange | RunEvent]:
    table = read_table(run_dir, "events")
    out: list[PhaseChange | RunEvent] = []
    for r, time_us in zip(table.to_pylist(), _micros(table), strict=True):
        time_ns = time_us * 1000
        if r["kind"] == "phase":
            name, _, message = (r["detail"] or r["phase"] or "").partition(": ")
            try:
                out.append(PhaseChange(Phase(name), time_ns, message))
            except ValueError:
                out.append(RunEvent(time_ns, "", "phase", r["detail"] or ""))
        else:
            out.append(RunEvent(time_ns, r["target"] or "", r["kind"] or "", r["detail"] or ""))
    return out


def _labels(meta: dict[str, Any], ticks: list[Tick]) -> list[str]:
    labels = []
    for t in meta.get("targets") or []:
        label = t.get("label") if isinstance(t, dict) else t
        if label is not None:
            labels.append(str(label))
    for tick in ticks:  # a target run.json does not list still gets a column
        if tick.target not in labels:
            labels.append(tick.target)
    return labels


def load_recording(run_dir: Path) -> Recording:
    """Read a run directory whole. Raises RecordingError (one line) when it cannot be replayed."""
    run_dir = Path(run_dir)
    meta = read_meta(run_dir)
    ticks = _ticks(run_dir)
    if not ticks:
        if meta.get("failed"):
            raise RecordingError(f"{run_dir} failed before its first second: {meta['failed']}")
        raise RecordingError(f"{run_dir} has no ticks: the run stopped before its first "
                             "second was written")
    events = _events(run_dir)
    # phase changes before ticks of the same instant; a stable sort keeps each table's order
    items: list[ReplayItem] = sorted(
        [*events, *ticks],
        key=lambda item: (item.time_ns, 0 if isinstance(item, PhaseChange) else 1))
    version = int(meta["schema_version"])
    complete = "ended" in meta
    notes = []
    if not complete:
        notes.append("killed mid-way: run.json records no end; replayed up to the last "
                     "complete file")
    if version < SCHEMA_VERSION:
        notes.append(f"written by an older streambench (run files version {version})")
    if meta.get("failed"):
        notes.append(f"failed: {str(meta['failed'])[:200]}")
    elif meta.get("stopped_early"):
        notes.append("stopped early")
    return Recording(run_dir=run_dir, meta=meta, labels=_labels(meta, ticks),
                     workload=_workload(meta), items=items, times=[i.time_ns for i in items],
                     schema_version=version, complete=complete, notes=notes)


def split_baseline(spec: str) -> tuple[Path, str | None]:
    """RUN_DIR[:TARGET] → (run directory, target or None). Labels may hold ':' (redis:aof),
    and so may paths: the run directory is the shortest prefix that is a directory."""
    if Path(spec).is_dir():
        return Path(spec), None
    for i, ch in enumerate(spec):
        if ch == ":" and i and Path(spec[:i]).is_dir():
            return Path(spec[:i]), spec[i + 1:] or None
    raise RecordingError(f"--baseline {spec}: not a run directory (RUN_DIR or RUN_DIR:TARGET)")


def load_baselines(spec: str, labels: list[str]) -> dict[str, Baseline]:
    """The ghost series of each column: the named target of the baseline run for every column;
    without a name, the baseline target of the same label, or the baseline's only target."""
    run_dir, target = split_baseline(spec)
    rec = load_recording(run_dir)
    ticks: dict[str, list[Tick]] = {}
    for item in rec.items:
        if isinstance(item, Tick):
            ticks.setdefault(item.target, []).append(item)
    if target is not None and target not in ticks:
        raise RecordingError(f"--baseline {spec}: run {rec.meta.get('run_id') or run_dir.name} "
                             f"has no target {target!r}; it has {', '.join(ticks)}")
    run_id = str(rec.meta.get("run_id") or run_dir.name)
    out: dict[str, Baseline] = {}
    for label in labels:
        chosen = target or (label if label in ticks else (next(iter(ticks)) if len(ticks) == 1
                                                          else None))
        if chosen is not None:
            out[label] = Baseline(f"{run_id}:{chosen}", ticks[chosen])
    if not out:
        raise RecordingError(f"--baseline {spec}: no target of that run matches "
                             f"{', '.join(labels)}; name one as RUN_DIR:TARGET")
    return out
