"""Kafka's and Redpanda's broker metrics without a broker: Redpanda's /public_metrics read from
two expositions written from its documented metric names (no Redpanda runs here; the files say
so), the histogram quantile against numpy on the raw observations, the JMX exporter's rules as
docs/metrics.md shows them, and the metrics= option's bad values refused in one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.kafka_metrics import METRICS as KAFKA_METRICS
from collectors.kafka_metrics import interpret as kafka_interpret
from collectors.redpanda_metrics import METRICS as REDPANDA_METRICS
from collectors.redpanda_metrics import interpret as redpanda_interpret
from collectors.scrape import BrokerState, named_endpoints, parse, quantile
from compose.jmx import MBEANS, rules_yaml
from tests.conftest import run_cli

HERE = Path(__file__).parent / "expositions"
DOCS = Path(__file__).parents[2] / "docs"
# Redpanda's latency histogram's bucket bounds (powers of two in µs, minus one, in seconds)
BOUNDS = [(2 ** k - 1) / 1e6 for k in range(8, 26)] + [float("inf")]


def _two_reads(first: str, second: str, interpret, seconds: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    state = BrokerState()
    assert interpret(parse(first), state).keys().isdisjoint(
        {"produce_latency_p99_seconds", "records_produced_per_second"})  # no rate on a first read
    state.seconds = seconds
    return dict(interpret(parse(second), state))


def test_redpanda_public_metrics_between_two_reads() -> None:
    """The expositions' figures between their two reads, worked out by hand from the files:
    1,000 produce requests, 985 within 2.047 ms and 995 within 4.095 ms, so the 990th lies
    half-way into that bucket; 1,000 fetches, 990 within 65.535 ms; 2,000 records more over
    2 s; the two shards busy 1.2 s and 0.8 s of the 2 s."""
    values = _two_reads((HERE / "redpanda_public_metrics_1.txt").read_text(),
                        (HERE / "redpanda_public_metrics_2.txt").read_text(),
                        redpanda_interpret, 2.0)
    assert values == pytest.approx({
        "produce_latency_p99_seconds": 0.002047 + (0.004095 - 0.002047) * 0.5,
        "consume_latency_p99_seconds": 0.065535,
        "records_produced_per_second": 1000.0,
        "cpu_busy_ratio": (1.2 + 0.8) / 2 / 2,
        "under_replicated_replicas": 1.0,
        "leadership_changes_total": 4.0,
        "available_memory_bytes": 2.79e9,
        "disk_free_space_alert": 1.0,
    })
    assert set(values) == {m.name for m in REDPANDA_METRICS}


def test_the_parser_reads_what_prometheus_clients_parser_reads() -> None:
    """Every sample of both expositions and of an escaped label, as prometheus_client's own
    parser reads them, but under the name written (it adds _total to a counter's samples)."""
    odd = ('# TYPE odd gauge\nodd{path="C:\\\\x",say="a \\"b\\" c}",n="1\\n2"} 1.5e3 1700000000\n'
           'odd 7\n')
    for text in ((HERE / "redpanda_public_metrics_1.txt").read_text(),
                 (HERE / "redpanda_public_metrics_2.txt").read_text(), odd):
        theirs = sorted((s.name, sorted(s.labels.items()), s.value)
                        for f in text_string_to_metric_families(text) for s in f.samples)
        ours = sorted((s.name, sorted(s.labels.items()), s.value) for s in parse(text))
        renamed = sorted((n if any(ln.startswith(n) for ln in text.splitlines())
                          else n.removesuffix("_total"), labels, v) for n, labels, v in theirs)
        assert ours == renamed
    assert parse(odd)[0].labels == {"path": "C:\\x", "say": 'a "b" c}', "n": "1\n2"}


def test_the_quantile_of_bucket_counts_follows_the_raw_observations() -> None:
    """Latencies drawn from a log-normal, counted into Redpanda's buckets: the bucket
    quantile lies in the same bucket as numpy's quantile of the raw values (a bucket's
    interpolation is as exact as the buckets allow), for several quantiles."""
    rng = np.random.default_rng(46)
    raw = rng.lognormal(mean=np.log(0.003), sigma=0.8, size=20_000)
    cumulative = {b: float((raw <= b).sum()) for b in BOUNDS}
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = float(np.quantile(raw, q))
        found = quantile(cumulative, q)
        assert found is not None
        upper = next(b for b in BOUNDS if exact <= b)
        lower = max([0.0, *(b for b in BOUNDS if b < upper)])
        assert lower <= found <= upper, (q, exact, found)
    assert quantile({b: 0.0 for b in BOUNDS}, 0.99) is None


def test_a_kafka_meter_becomes_a_rate_from_its_second_read() -> None:
    """The exporter's family as the agent writes it (labels from the rules): MessagesInPerSec's
    Count over two reads 0.5 s apart is a rate; the produce request versions are summed; a
    percentile in ms is in seconds; a meter the broker creates later gives no rate at first."""
    def text(messages: float, produce_v9: float, produce_v10: float | None) -> str:
        lines = [
            f'kafka_jmx{{attribute="Count",domain="kafka.server",name="MessagesInPerSec",'
            f'type="BrokerTopicMetrics"}} {messages}',
            f'kafka_jmx{{attribute="Count",domain="kafka.network",name="RequestsPerSec",'
            f'request="Produce",type="RequestMetrics",version="9"}} {produce_v9}',
            'kafka_jmx{attribute="99thPercentile",domain="kafka.network",name="TotalTimeMs",'
            'request="Produce",type="RequestMetrics"} 12.5',
        ]
        if produce_v10 is not None:
            lines.append(f'kafka_jmx{{attribute="Count",domain="kafka.network",'
                         f'name="RequestsPerSec",request="Produce",type="RequestMetrics",'
                         f'version="10"}} {produce_v10}')
        return "# TYPE kafka_jmx untyped\n" + "\n".join(lines) + "\n"

    state = BrokerState()
    assert kafka_interpret(parse(text(1000, 10, None)), state) == {
        "produce_total_time_p99_seconds": 0.0125}
    state.seconds = 0.5
    values = kafka_interpret(parse(text(1600, 70, None)), state)
    assert values["messages_in_per_second"] == pytest.approx(1200.0)
    assert values["produce_requests_per_second"] == pytest.approx(120.0)
    values = kafka_interpret(parse(text(2100, 80, 5)), state)
    assert values["messages_in_per_second"] == pytest.approx(1000.0)
    assert values["produce_requests_per_second"] == pytest.approx(30.0)  # (80 + 5 - 70) / 0.5


def test_every_kafka_metric_has_its_mbean_exported() -> None:
    """Each declared metric's MBean is one the agent's rules include (the native name is the
    ObjectName and attribute)."""
    for m in KAFKA_METRICS:
        bean = m.native.split(" ")[0]
        assert any(b == bean or (b.endswith(",*") and bean.startswith(b[:-2]))
                   for b in MBEANS), m.name


def test_the_docs_show_the_rules_streambench_writes() -> None:
    """docs/metrics.md gives the exporter's rules for an existing cluster: the same text."""
    text = (DOCS / "metrics.md").read_text()
    block = re.search(r"```yaml\n(includeObjectNames:.*?)```", text, re.S)
    assert block is not None and block.group(1) == rules_yaml()


def test_named_endpoints() -> None:
    assert named_endpoints("broker-1=http://127.0.0.1:1/metrics,broker-2=http://h:2/m") == {
        "broker-1": "http://127.0.0.1:1/metrics", "broker-2": "http://h:2/m"}
    with pytest.raises(ValueError, match="BROKER=URL"):
        named_endpoints("http://127.0.0.1:1/metrics")


@pytest.mark.parametrize("target, said", [
    ("kafka:metrics=ftp://h:1@127.0.0.1:9", "not an http(s) URL"),
    ("redpanda:metrics=+@127.0.0.1:9", "expected URL"),
    ("kafka:metrics=http://127.0.0.1:1/metrics", "existing cluster"),
])
def test_a_bad_metrics_option_is_one_line(target: str, said: str) -> None:
    res = run_cli(["run", target, "--headless", "--duration", "1"], timeout_s=60)
    assert res.returncode == 2, res.stderr
    assert said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
