"""The Prometheus JMX exporter, attached as a Java agent to the Kafka brokers streambench starts:
it serves the few MBeans Kafka's broker metrics are read from (loadgen.platforms.kafka's broker
metrics) as Prometheus text on a loopback port of each broker's own.

The agent's jar comes from Maven Central into the jar cache on first use (compose/maven.py). Its
rules keep each MBean's own name: one family, `kafka_jmx`, with the object name's parts and the
attribute as labels, so the reader can say which MBean a figure is."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from compose.maven import assemble
from loadgen.core.stack import Progress

EXPORTER_VERSION = "1.0.1"
EXPORTER = f"io.prometheus.jmx:jmx_prometheus_javaagent:{EXPORTER_VERSION}"
# the endpoints' key in a stack description: `broker=URL,…`
METRICS_ENDPOINT = "metrics"
FAMILY = "kafka_jmx"

# the MBeans read (ObjectName patterns: `,*` for the request versions Kafka 3.x keeps apart)
MBEANS = (
    "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce",
    "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer",
    "kafka.network:type=RequestMetrics,name=RequestQueueTimeMs,request=Produce",
    "kafka.network:type=RequestMetrics,name=RequestQueueTimeMs,request=FetchConsumer",
    "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,*",
    "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec",
    "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
    "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
    "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
    "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs",
    "kafka.controller:type=KafkaController,name=ActiveControllerCount",
    "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
)

# the exporter matches `domain<key=value, …><>attribute`; an optional request and version
_PATTERN = (r"(kafka\.\w+)<type=(\w+), name=(\w+)(?:, request=(\w+))?(?:, version=(\d+))?><>"
            r"(99thPercentile|Count|Value)")


def rules_yaml() -> str:
    """The agent's configuration: only MBEANS, as one family with their names as labels."""
    beans = "".join(f"  - \"{b}\"\n" for b in MBEANS)
    return (f"includeObjectNames:\n{beans}"
            "rules:\n"
            f"  - pattern: '{_PATTERN}'\n"
            f"    name: {FAMILY}\n"
            "    type: UNTYPED\n"
            "    labels:\n"
            "      domain: \"$1\"\n"
            "      type: \"$2\"\n"
            "      name: \"$3\"\n"
            "      request: \"$4\"\n"
            "      version: \"$5\"\n"
            "      attribute: \"$6\"\n")


async def exporter_jar(progress: Progress) -> Path:
    """The agent's jar, fetched into the jar cache on first use."""
    jars = await assemble(f"jmx-exporter-{EXPORTER_VERSION}", [EXPORTER], progress,
                          what="Prometheus JMX exporter")
    return next(j for j in jars if j.name.startswith("jmx_prometheus_javaagent"))


def agent_option(jar: Path, port: int, config: Path, host: str = "127.0.0.1") -> str:
    """The JVM option attaching the agent, serving on host:port only."""
    return f"-javaagent:{jar}={host}:{port}:{config}"


def write_rules(path: Path) -> Path:
    path.write_text(rules_yaml())
    return path


def endpoint_list(urls: Mapping[str, str]) -> str:
    """The stack description's value of METRICS_ENDPOINT: `broker=URL,…` in broker order."""
    return ",".join(f"{broker}={url}" for broker, url in urls.items())
