"""The live run as a Prometheus endpoint (`streambench run --metrics ADDRESS:PORT`).

A bus subscriber keeps, per target, the latest tick and the run's sums so far; prometheus_client
serves them over HTTP, read at each scrape by a custom collector. Nothing is recorded twice: the
latency histograms are the ticks' own (loadgen/core/histogram.py), summed over the run and
binned into Prometheus buckets only when scraped, off the run's loop."""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np

from loadgen.core.audit import CATEGORIES
from loadgen.core.errors import WorkloadError
from loadgen.core.events import EventKind, PhaseChange, RunEvent, RunMeta
from loadgen.core.histogram import HistogramSnapshot, bucket_value
from loadgen.core.ticks import LagStatus, Phase, Tick
from loadgen.load import dropped_slots
from loadgen.platforms import PLATFORMS

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

    from loadgen.core.bus import BusItem
    from loadgen.core.target import Target

PREFIX = "streambench"
DEFAULT_HOST = "127.0.0.1"
# the upper bounds (le) of the served latency buckets, in seconds: 1-2-5 steps from 10 µs to
# 100 s. A bucket of streambench's histogram counts under a bound when its representative value
# (bucket_value, within 0.05 % of every value in it) is at most the bound.
LATENCY_BOUNDS_S: tuple[float, ...] = (
    *(round(m * 10.0 ** e, 12) for e in range(-5, 2) for m in (1, 2, 5)), 100.0)
# the tick's histograms as the endpoint names them
LATENCY_SERIES = {
    "e2e_latency": ("end_to_end_latency_seconds",
                    "End-to-end latency (receive time - intended send time) over the run"),
    "publish_latency": ("publish_latency_seconds",
                        "Publish latency (send -> broker acknowledgement) over the run"),
    "publish_delay": ("publish_delay_seconds",
                      "Publish delay (actual - intended send time) over the run"),
}
# the run's counters summed from the ticks: the name served (without _total) and its help
COUNTERS = {
    "produced": ("produced_messages", "Messages acknowledged by the broker"),
    "produced_bytes": ("produced_bytes", "Payload bytes of the acknowledged messages"),
    "consumed": ("consumed_messages", "Messages received by the consumers"),
    "consumed_bytes": ("consumed_bytes", "Payload bytes of the received messages"),
    "send_errors": ("send_errors", "Sends that failed"),
    "duplicates": ("audit_duplicate_reads", "With --audit: reads of a message already read, "
                   "as each load process finds them"),
    "reordered": ("audit_reordered_messages", "With --audit: messages read after a later one "
                  "of their producer in their partition"),
    "net_rx_bytes": ("broker_network_receive_bytes", "Bytes the brokers received (wire bytes)"),
    "net_tx_bytes": ("broker_network_transmit_bytes", "Bytes the brokers sent (wire bytes)"),
    "disk_read_bytes": ("broker_disk_read_bytes", "Bytes the brokers read from disk"),
    "disk_write_bytes": ("broker_disk_write_bytes", "Bytes the brokers wrote to disk"),
}
# how long a run's end waits for one more scrape of its final figures, at most
MAX_FINAL_WAIT_S = 30.0


class Address(NamedTuple):
    """Where the endpoint listens; written back as --metrics takes it (the launcher passes a
    run's options on as text)."""

    host: str
    port: int

    def __str__(self) -> str:
        return _shown(self.host, self.port)


def parse_address(text: str) -> Address:
    """`9464`, `HOST:9464` or `[::1]:9464` as (host, port); a bare port listens on loopback.
    Raises WorkloadError (one line, naming the text) for anything else."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise WorkloadError(f"{text!r}: expected PORT or ADDRESS:PORT with a port "
                            "from 1 to 65535, e.g. 9464 or 127.0.0.1:9464")
    if host == "localhost":
        host = DEFAULT_HOST
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise WorkloadError(f"{text!r}: {host!r} is not an IP address (e.g. 127.0.0.1, "
                            "::1, or 0.0.0.0 to listen on every interface)") from None
    return Address(host, int(port_text))


@dataclass
class _Sums:
    """A latency series summed over the run: ticks' snapshots wait in `pending` and are merged
    when scraped (or when many wait), so a tick costs one list append."""

    total: HistogramSnapshot = field(default_factory=HistogramSnapshot.empty)
    pending: list[HistogramSnapshot] = field(default_factory=list)

    def add(self, snap: HistogramSnapshot) -> None:
        if snap.total:
            self.pending.append(snap)
            if len(self.pending) >= 32:
                self.merged()

    def merged(self) -> HistogramSnapshot:
        if self.pending:
            self.total = HistogramSnapshot.merge([self.total, *self.pending])
            self.pending.clear()
        return self.total


@dataclass
class _Target:
    platform: str
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    latency: dict[str, _Sums] = field(default_factory=lambda: {k: _Sums() for k in LATENCY_SERIES})
    dropped_slots: int = 0
    last: Tick | None = None
    # the delivery audit's counts (run.json totals[].audit), once the run has decided them
    audit: dict[str, int] = field(default_factory=dict)


def cumulative_buckets(snap: HistogramSnapshot) -> list[tuple[str, float]]:
    """Prometheus buckets (le, samples at most le) of one of streambench's histograms."""
    cum = np.cumsum(snap.count) if snap.total else np.zeros(0, dtype=np.int64)
    values_ns = bucket_value(snap.index) if snap.total else np.zeros(0, dtype=np.int64)
    bounds_ns = np.array([b * 1e9 for b in LATENCY_BOUNDS_S])
    at = np.searchsorted(values_ns, bounds_ns, side="right")
    buckets = [(_le(b), float(cum[i - 1]) if i > 0 else 0.0)
               for b, i in zip(LATENCY_BOUNDS_S, at, strict=True)]
    buckets.append(("+Inf", float(snap.total)))
    return buckets


def _le(bound: float) -> str:
    return repr(bound) if bound < 1 else f"{bound:.1f}"


class RunCollector:
    """The bus subscriber and the prometheus_client collector in one: `__call__` takes bus items
    on the run's thread, `collect` answers a scrape on the server's thread."""

    def __init__(self, platforms: dict[str, str], run_id: str = "") -> None:
        self._lock = threading.Lock()
        self._platforms = dict(platforms)
        self._run_id = run_id
        self._start()
        self._updated = time.monotonic()  # when the figures last changed
        self._scrapes: list[float] = []  # monotonic times of the last scrapes
        self.scrapes_served = 0
        self._scraped = threading.Condition(self._lock)

    def _start(self) -> None:
        self._targets = {label: _Target(platform) for label, platform in self._platforms.items()}
        self._phase = Phase.STARTING
        self._phase_started: dict[Phase, float] = {}  # each phase's latest start, Unix seconds
        self._events: Counter[tuple[str, str]] = Counter()
        self._last_event: dict[tuple[str, str], str] = {}

    def clear(self) -> None:
        """Back to the start of the run, every counter at 0 (a replay going back in time;
        Prometheus reads the drop as a counter reset)."""
        with self._lock:
            self._start()
            self._updated = time.monotonic()

    def __call__(self, item: BusItem) -> None:
        with self._lock:
            if isinstance(item, Tick):
                self._take_tick(item)
            elif isinstance(item, PhaseChange):
                if item.phase != self._phase or item.phase not in self._phase_started:
                    self._phase_started[item.phase] = item.time_ns / 1e9
                self._phase = item.phase
            elif isinstance(item, RunEvent):
                self._events[(item.target, item.kind)] += 1
                self._last_event[(item.target, item.kind)] = item.detail
                if (t := self._targets.get(item.target)) is not None:
                    t.dropped_slots += dropped_slots(item.detail)
            elif isinstance(item, RunMeta):
                self._run_id = str(item.meta.get("run_id", self._run_id))
                self._take_audit(item.meta.get("totals") or [])
            else:
                return
            self._updated = time.monotonic()

    def _take_audit(self, totals: list[Any]) -> None:
        for entry in totals:
            audit = entry.get("audit") if isinstance(entry, dict) else None
            if isinstance(audit, dict) and (t := self._targets.get(str(entry.get("label")))):
                t.audit = {k: int(audit.get(k) or 0) for k in CATEGORIES}

    def _take_tick(self, tick: Tick) -> None:
        t = self._targets.get(tick.target)
        if t is None:
            t = self._targets[tick.target] = _Target("")
        t.last = tick
        for key in ("produced", "produced_bytes", "consumed", "consumed_bytes", "send_errors",
                    "duplicates", "reordered"):
            t.sums[key] += getattr(tick, key)
        for key in ("net_rx_bytes", "net_tx_bytes", "disk_read_bytes", "disk_write_bytes"):
            t.sums[key] += getattr(tick.resources, key)
        for key, sums in t.latency.items():
            sums.add(getattr(tick, key))

    def describe(self) -> list[Metric]:
        return []  # the families are known at each scrape; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families, taken = self._families(), time.monotonic()
        yield from families
        with self._lock:  # the scrape's text is written: its reader has the figures of `taken`
            self._scrapes = [*self._scrapes[-3:], taken]
            self.scrapes_served += 1
            self._scraped.notify_all()

    def _families(self) -> list[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
            InfoMetricFamily,
        )

        def name(n: str) -> str:
            return f"{PREFIX}_{n}"

        labels = ["target", "platform"]
        info = InfoMetricFamily(name("run"), "The run being served")
        info.add_metric([], {"run_id": self._run_id})
        phase = GaugeMetricFamily(name("phase"), "The run's phase: 1 for the current one",
                                  labels=["phase"])
        started = GaugeMetricFamily(
            name("phase_start_time_seconds"),
            "When the run entered each phase it has reached (Unix time)", labels=["phase"])
        for p in Phase:
            phase.add_metric([p.value], 1.0 if p == self._phase else 0.0)
            if p in self._phase_started:
                started.add_metric([p.value], self._phase_started[p])
        counters = {k: CounterMetricFamily(name(n), h, labels=labels)
                    for k, (n, h) in COUNTERS.items()}
        dropped = CounterMetricFamily(
            name("dropped_slots"), "Send slots owed at an old rate, dropped at a rate change",
            labels=labels)
        gauges = {
            "target_rate": GaugeMetricFamily(
                name("target_rate_messages_per_second"),
                "The rate the producers aim for (0: as fast as acknowledged)", labels=labels),
            "lag": GaugeMetricFamily(name("lag_messages"),
                                     "Consumer lag: messages not yet consumed", labels=labels),
            "lag_s": GaugeMetricFamily(
                name("lag_seconds"),
                "Consumer lag in time: the age of the oldest message not yet consumed, or where "
                "that cannot be had the lag over the consume rate (lag_seconds_estimated)",
                labels=labels),
            "lag_est": GaugeMetricFamily(
                name("lag_seconds_estimated"),
                "1 when lag_seconds is the estimate (lag over the consume rate), 0 when exact",
                labels=labels),
            "drain": GaugeMetricFamily(
                name("lag_drain_seconds"),
                "Time to read the lag at the consume rate net of the produce rate; +Inf while "
                "the lag grows", labels=labels),
            "cpu": GaugeMetricFamily(name("broker_cpu_ratio"),
                                     "Broker CPU over the last tick (1 = one core)", labels=labels),
            "memory": GaugeMetricFamily(name("broker_memory_bytes"), "Broker memory",
                                        labels=labels),
            "lg_cpu": GaugeMetricFamily(
                name("loadgen_cpu_ratio"),
                "The load generator's CPU over the last tick (1 = one core)", labels=labels),
            "lg_lag": GaugeMetricFamily(
                name("loadgen_loop_lag_seconds"),
                "The longest the generator's event loops woke late in the last tick",
                labels=labels),
            "lg_sat": GaugeMetricFamily(
                name("loadgen_saturated"),
                "1 when the generator, not the broker, was the bottleneck in the last tick",
                labels=labels),
            "elapsed": GaugeMetricFamily(name("elapsed_seconds"),
                                         "Time since the load started", labels=labels),
        }
        hists = {k: HistogramMetricFamily(name(n), h, labels=labels)
                 for k, (n, h) in LATENCY_SERIES.items()}
        audit = CounterMetricFamily(
            name("delivery_audit_messages"),
            "The delivery audit's verdict (--audit), by category, once the load has ended",
            labels=[*labels, "category"])
        status = GaugeMetricFamily(
            name("subscription_status"),
            "1 for each subscription's status word over the last ticks (Burrow's rules: OK, WARN "
            "lag not going down, STALL a partition standing still, STOP nothing read)",
            labels=[*labels, "subscription", "status"])
        for label, t in self._targets.items():
            values = [label, t.platform]
            for category, count in t.audit.items():
                audit.add_metric([*values, category], float(count))
            for key, family in counters.items():
                family.add_metric(values, t.sums[key])
            dropped.add_metric(values, float(t.dropped_slots))
            for key, sums in t.latency.items():
                snap = sums.merged()
                hists[key].add_metric(values, cumulative_buckets(snap), snap.sum / 1e9)
            if (tick := t.last) is not None:
                for key, value in _tick_gauges(tick).items():
                    if not math.isnan(value):
                        gauges[key].add_metric(values, value)
                time_lag = tick.lag.time if tick.lag is not None else None
                for sub, word in (time_lag.status.items() if time_lag is not None else ()):
                    for each in LagStatus:
                        status.add_metric([*values, sub, str(each)], float(each is word))
        events = CounterMetricFamily(name("events"), "Run events and interventions, by kind",
                                     labels=[*labels, "kind"])
        texts = InfoMetricFamily(name("last_event"), "The text of the latest event of each kind",
                                 labels=[*labels, "kind"])
        # every kind starts at 0 for every target, so that rate() and increase() see the first
        # event of a kind too
        kinds = {(label, str(kind)) for label in self._targets for kind in EventKind}
        for target, kind in sorted(kinds | set(self._events)):
            owner = self._targets.get(target)
            platform = owner.platform if owner is not None else ""
            events.add_metric([target, platform, kind], float(self._events[(target, kind)]))
            if (target, kind) in self._last_event:
                texts.add_metric([target, platform, kind],
                                 {"detail": self._last_event[(target, kind)][:200]})
        return [info, phase, started, *counters.values(), dropped, *gauges.values(), status,
                *hists.values(), events, texts, audit, *self._broker_metric_families()]

    def _broker_metric_families(self) -> list[Metric]:
        """The brokers' own metrics at the latest tick: a family per metric name
        (`streambench_broker_<name>`, labelled by target, platform and broker), and whether
        each broker's read failed (its values are then left out: Prometheus marks them stale)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        labels = ["target", "platform", "broker"]
        stale = GaugeMetricFamily(
            f"{PREFIX}_broker_metrics_stale",
            "1 when the broker's metrics could not be read at the latest tick (a paused or "
            "stopped broker): its broker metrics are left out until it answers", labels=labels)
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for label, t in self._targets.items():
            metrics = t.last.broker_metrics if t.last is not None else None
            if metrics is None:
                continue
            for broker, values in metrics.values.items():
                is_stale = broker in metrics.stale
                stale.add_metric([label, t.platform, broker], 1.0 if is_stale else 0.0)
                if is_stale:
                    continue
                for name, value in values.items():
                    family = families.get(name)
                    if family is None:
                        full, help_text = f"{PREFIX}_broker_{name}", _metric_help(t.platform, name)
                        family = families[name] = (
                            CounterMetricFamily(full, help_text, labels=labels)
                            if name.endswith("_total") else
                            GaugeMetricFamily(full, help_text, labels=labels))
                    family.add_metric([label, t.platform, broker], value)
        return [stale, *families.values()] if stale.samples else []

    def wait_final_scrape(self) -> float:
        """Wait until a scrape has read the figures as they are now, at most about one scrape
        interval (as the last scrapes were spaced, up to MAX_FINAL_WAIT_S): the run's end is
        then in the scraper's store. Returns the seconds waited (0 when not scraped at least
        twice)."""
        started = time.monotonic()
        with self._lock:
            gaps = [b - a for a, b in zip(self._scrapes, self._scrapes[1:], strict=False)]
            if not gaps:
                return 0.0  # not scraped at intervals: no scraper to wait for
            limit = min(MAX_FINAL_WAIT_S, 1.5 * max(gaps) + 1.0)
            self._scraped.wait_for(lambda: self._scrapes[-1] > self._updated,
                                   timeout=max(0.0, limit - (time.monotonic() - started)))
        return time.monotonic() - started


def _metric_help(platform: str, name: str) -> str:
    """A broker metric's help: the broker's own name and why it matters, from the platform
    that declares it."""
    declared = PLATFORMS.get(platform)
    trait = declared.broker_metrics if declared is not None else None
    metric = trait.named(name) if trait is not None else None
    if trait is None or metric is None:
        return f"The broker's own metric {name} (docs/metrics.md)"
    return f"{trait.source} {metric.native}: {metric.why}"


def _tick_gauges(tick: Tick) -> dict[str, float]:
    lag = float(tick.lag.total) if tick.lag is not None else math.nan
    return {
        "target_rate": tick.target_rate,
        "lag": lag,
        "lag_s": tick.lag_s,
        "lag_est": math.nan if math.isnan(tick.lag_s) else float(not tick.lag_s_exact),
        "drain": tick.lag.time.drain_s if tick.lag is not None and tick.lag.time else math.nan,
        "cpu": tick.resources.cpu_percent / 100.0,
        "memory": float(tick.resources.memory_bytes) if tick.resources.memory_bytes else math.nan,
        "lg_cpu": tick.loadgen.cpu_percent / 100.0,
        "lg_lag": tick.loadgen.loop_lag_ms / 1000.0,
        "lg_sat": 1.0 if tick.loadgen.saturated else 0.0,
        "elapsed": tick.elapsed_s,
    }


class MetricsEndpoint:
    """The HTTP server of one run's figures: bound at once (a taken port fails before anything
    starts), serving until close()."""

    def __init__(self, host: str, port: int, collector: RunCollector) -> None:
        from prometheus_client import CollectorRegistry, start_http_server

        self.collector = collector
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        try:
            self._server, self._thread = start_http_server(port, host, registry=registry)
        except OSError as exc:
            raise WorkloadError(f"--metrics {_shown(host, port)}: cannot listen there: "
                                f"{exc.strerror or exc}") from None
        self.host, self.port = host, port

    @property
    def url(self) -> str:
        return f"http://{_shown(self.host, self.port)}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        server: WSGIServer = self._server
        server.shutdown()
        server.server_close()
        self._thread.join(timeout=5)


def check_listen(host: str, port: int) -> str:
    """That a server can listen at host:port now (raises WorkloadError, one line, as
    MetricsEndpoint does); the address as --metrics takes it."""
    MetricsEndpoint(host, port, RunCollector({})).close()
    return _shown(host, port)


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"



class Served(Protocol):
    """What serve() needs of a run: its targets, its id and its bus."""

    targets: list[Target]
    run_id: str

    def subscribe(self, fn: Callable[[BusItem], None]) -> None: ...


def serve(run: Served, host: str, port: int) -> MetricsEndpoint:
    """Serve the run's figures at host:port from now (raises WorkloadError, one line, when the
    port cannot be had) until the run is done or has failed; then, in a thread of its own that
    the interpreter waits for at exit, one more scrape of the final figures is waited for and
    the port is freed."""
    collector = RunCollector({t.label: t.platform for t in run.targets}, run.run_id)
    endpoint = MetricsEndpoint(host, port, collector)
    closing: list[threading.Thread] = []

    def close_at_end(item: BusItem) -> None:
        ended = ((isinstance(item, PhaseChange) and item.phase == Phase.DONE)
                 or (isinstance(item, RunMeta) and "failed" in item.meta))
        if ended and not closing:
            def finish() -> None:
                collector.wait_final_scrape()
                endpoint.close()

            closing.append(threading.Thread(target=finish, name="metrics-close", daemon=False))
            closing[0].start()

    run.subscribe(collector)
    run.subscribe(close_at_end)
    return endpoint


def replay_endpoint(meta: dict[str, Any], address: tuple[str, int]) -> MetricsEndpoint:
    """The endpoint of `replay --metrics`: a recorded run's targets (run.json's meta), served
    at the replay's clock by the collector the replay feeds."""
    platforms = {str(t.get("label")): str(t.get("platform", "")) for t in meta.get("targets", [])}
    return MetricsEndpoint(*address, RunCollector(platforms, str(meta.get("run_id", ""))))
