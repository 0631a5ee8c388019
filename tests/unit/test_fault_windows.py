"""The report's fault windows (analysis.faultwindows) over hand-made ticks and changes, and the
addresses brokers advertise when a proxy stands in front of them."""

from __future__ import annotations

from analysis.events import ChangeRow, Event, RecoveryFigures
from analysis.faultwindows import Span, Tick, audit_window, fault_spans, figures, verdict_text
from compose.pravega import standalone_settings
from compose.pulsar import CLIENT_LISTENER, _listeners
from compose.rabbitmq import node_settings
from compose.toxiproxy import split_endpoint

S = 1_000_000  # µs
KEY = ("run", "redis")


def _ticks(n: int) -> list[Tick]:
    """Ticks 0 … n-1, each 1 s ending at (k + 1) s, 100 produced, lag k."""
    return [Tick(k, (k + 1) * S, 1.0, 100, 90, k % 3, k) for k in range(n)]


def _row(kind: str, at_s: float, healthy: float | None = None, recovered: bool = True) -> ChangeRow:
    rec = (RecoveryFigures(recovered, healthy, None, None, None, None, None, None)
           if healthy is not None or not recovered else None)
    return ChangeRow(Event(*KEY, round(at_s * S), "measuring", kind, ""), at_s, rec, healthy)


def test_windows_before_during_after_a_fault() -> None:
    changes = [_row("rate", 2), _row("net-partition", 5, healthy=3.0), _row("net-heal", 6),
               _row("rate", 12)]
    ((row, spans),) = fault_spans(changes, {KEY: _ticks(15)})
    assert row.event.kind == "net-partition"  # the heal falls within it
    before, during, after = spans
    # a tick's middle in [start, end): tick k spans k … k+1 s, its middle k + 0.5
    assert before.seqs == (2, 3, 4) and during.seqs == (5, 6, 7) and after.seqs == (8, 9, 10, 11)
    figs = figures(during, _ticks(15), {50.0: 1.5})
    assert figs.seconds == 3 and figs.produce_msg_s == 100 and figs.consume_msg_s == 90
    assert figs.lag_mean == 6 and figs.lag_max == 7 and figs.send_errors == 2 + 0 + 1
    assert figs.e2e_ms == {50.0: 1.5}


def test_a_fault_lasts_until_it_ends_when_it_was_healthy_throughout() -> None:
    """A latency toxic that never made the target unhealthy lasts until its heal."""
    changes = [_row("net-latency", 2, healthy=0.0), _row("net-heal", 6)]
    ((_, (before, during, after)),) = fault_spans(changes, {KEY: _ticks(9)})
    assert before.seqs == (0, 1) and during.seqs == (2, 3, 4, 5) and after.seqs == (6, 7, 8)


def test_a_fault_never_recovered_lasts_to_the_end() -> None:
    changes = [_row("fault-kill", 3, recovered=False)]
    ((_, (before, during, after)),) = fault_spans(changes, {KEY: _ticks(6)})
    assert before.seqs == (0, 1, 2) and during.seqs == (3, 4, 5) and after.seqs == ()
    empty = figures(after, _ticks(6), {})
    assert empty.seconds == 0 and empty.lag_mean is None and empty.send_errors == 0
    # a target without ticks (not in the report) gets no windows
    assert fault_spans(changes, {}) == []


def test_the_audit_window_of_a_fault_and_its_verdict() -> None:
    row = _row("net-latency", 4)
    at_ns = row.event.time_us * 1000
    audit = {"windows": [
        {"name": "before any fault", "start_ns": 0, "acknowledged": 10},
        {"name": "net-latency 127.0.0.1:1 → 127.0.0.1:2", "start_ns": at_ns + 400_000,
         "acknowledged": 1200, "lost": 0, "duplicated": 2}]}
    window = audit_window(audit, row)
    assert window is not None and window["acknowledged"] == 1200
    assert verdict_text(window) == "NOT clean: duplicated 2 (1,200 acknowledged)"
    assert verdict_text({"acknowledged": 5}) == "clean (5 acknowledged)"
    assert audit_window(audit, _row("net-latency", 9)) is None  # no window opened then
    assert verdict_text(None) == "" and audit_window(None, row) is None
    assert Span(0, "during", 0, 1, ()).seqs == ()


def test_brokers_advertise_the_proxy() -> None:
    assert split_endpoint("pulsar://127.0.0.1:6650") == ("pulsar://", "127.0.0.1:6650")
    assert split_endpoint("tcp://127.0.0.1:9090/") == ("tcp://", "127.0.0.1:9090")
    assert split_endpoint("127.0.0.1:6379") == ("", "127.0.0.1:6379")
    assert _listeners(6650, None) == {}
    listeners = _listeners(6650, "127.0.0.1:7000")
    assert listeners["advertisedListeners"] == (f"internal:pulsar://127.0.0.1:6650,"
                                                f"{CLIENT_LISTENER}:pulsar://127.0.0.1:7000")
    assert listeners["advertisedAddress"] == "" and listeners["internalListenerName"] == "internal"
    ports = {"stream": 5552, "amqp": 5672, "management": 15672}
    assert node_settings(ports)["stream.advertised_port"] == "5552"
    proxied = node_settings(ports, "127.0.0.1:7001")
    assert (proxied["stream.advertised_host"], proxied["stream.advertised_port"],
            proxied["stream.listeners.tcp.1"]) == ("127.0.0.1", "7001", "127.0.0.1:5552")
    plain = standalone_settings(1, 2, 3)
    assert plain["pravegaservice.service.published.port"] == "3"
    published = standalone_settings(1, 2, 3, "127.0.0.1:7002")
    assert (published["pravegaservice.service.published.port"],
            published["pravegaservice.service.listener.port"]) == ("7002", "3")
