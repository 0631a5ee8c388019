"""Kafka stacks: Apache Kafka from its Maven Central jars on a local Java 17 runtime, in KRaft
mode (combined broker+controller nodes) or ZooKeeper mode (Kafka 3.9), 1 or more brokers on
loopback ports; or an existing Kafka-API cluster (Kafka, Redpanda) by address.

Every node is its own process group that dies with streambench; data, configs and logs live in
one temp dir that down() removes (a streambench killed outright leaves it for the next start to
clean up)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import TopicPartition
from aiokafka.client import AIOKafkaClient
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaConnectionError, KafkaError

from compose.docker import DOCKER_PROBE_TIMEOUT_S, ComposeStack, compose_images, memory_bytes
from compose.java import find_java, java_major
from compose.jmx import METRICS_ENDPOINT, agent_option, endpoint_list, exporter_jar, write_rules
from compose.kafka_links import KafkaLinks
from compose.maven import assemble, classpath
from compose.net import connect_failure
from compose.process import (
    LocalNode,
    free_port,
    keep_logs,
    make_data_dir,
    node_fault,
    nodes_down,
    port_in_use,
    start_process,
    stop_process,
    tail,
)
from loadgen.core.errors import StackError, TargetError
from loadgen.core.interventions import LEADER, PROXIED_OPTION, Intervention
from loadgen.core.security import PLAINTEXT, ClientSecurity
from loadgen.core.settings import settings_of, text
from loadgen.core.stack import Progress, Stack, StackDescription, announce_runtime
from loadgen.core.target import Target, join_host_port, split_host_port

# aiokafka logs connection failures at ERROR; without a handler Python prints them on stderr,
# which would garble the one-line errors and the dashboard. Failures reach the user as errors.
logging.getLogger("aiokafka").addHandler(logging.NullHandler())

DATA_PREFIX = "streambench-kafka-"
KAFKA_3 = "3.9.1"
KAFKA_4 = "4.1.0"
VERSION_ALIASES = {"3": KAFKA_3, "3.9": KAFKA_3, "4": KAFKA_4, "4.1": KAFKA_4}
JAVA_MIN = 17
DEFAULT_PORT = 9092
EXTERNAL_TIMEOUT_S = 15.0
ZOOKEEPER_HEAP = "512M"
ZOOKEEPER_NODE = "zookeeper"  # the fault hooks' name of the ZooKeeper node
ZK_TICK_MS = 2000  # the local ZooKeeper's tickTime
ZK_SESSION_TIMEOUT_MS = 18000  # Kafka's default zookeeper.session.timeout.ms
TOOL_HEAP = "256M"
# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS
JVM_PERFORMANCE = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                   "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
                   "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]


def parse_version(text: str) -> str:
    """`3.9`, `4` or an exact release (3.9.x, 4.x.y) -> the exact release."""
    version = VERSION_ALIASES.get(text, text)
    if not re.fullmatch(r"(3\.9|4\.\d+)\.\d+", version):
        raise ValueError(f"expected 3.9, 4 or an exact 3.9.x / 4.x.y release (aliases: "
                         f"3.9 = {KAFKA_3}, 4 = {KAFKA_4})")
    return version


def parse_zookeeper_version(text: str) -> str:
    version = parse_version(text)
    if not version.startswith("3.9."):
        raise ValueError("ZooKeeper mode exists only up to Kafka 3.9; use the kafka target for 4.x")
    return version


def parse_bootstrap(address: str) -> list[tuple[str, int]]:
    """`HOST[:PORT][,HOST[:PORT]...]` (port 9092 when left out)."""
    servers = []
    for item in filter(None, (a.strip() for a in address.split(","))):
        try:
            servers.append(split_host_port(item, DEFAULT_PORT))
        except ValueError as exc:
            raise TargetError(f"bad address {item!r}: {exc}; expected HOST:PORT[,HOST:PORT…], "
                             "e.g. 127.0.0.1:9092") from None
    if not servers:
        raise TargetError(f"bad address {address!r}: expected HOST:PORT[,HOST:PORT…]")
    return servers


def bootstrap_text(servers: Sequence[tuple[str, int]]) -> str:
    """`HOST:PORT,…` as the clients take it: an IPv6 host in brackets (aiokafka, librdkafka
    and Kafka's own tools read `::1:9092` as an address without a port)."""
    return ",".join(join_host_port(h, p) for h, p in servers)


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def coordinates(version: str) -> list[str]:
    """The broker, the tools and the logging backend the release's own distribution ships."""
    if _major(version) >= 4:
        logging_backend = ["org.apache.logging.log4j:log4j-slf4j-impl:2.24.3",
                           "org.apache.logging.log4j:log4j-core:2.24.3"]
    else:
        logging_backend = ["org.slf4j:slf4j-reload4j:1.7.36"]
    return [f"org.apache.kafka:kafka_2.13:{version}", f"org.apache.kafka:kafka-tools:{version}",
            *logging_backend]


_LOG4J = """\
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={stream}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
"""

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = {stream2}
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


@dataclass(frozen=True)
class KafkaRuntime:
    """One Kafka release on one Java: the command lines of its broker, ZooKeeper and tools."""

    java: str
    version: str
    jars: tuple[Path, ...]

    @property
    def classpath(self) -> str:
        return classpath(self.jars)

    def write_logging(self, path: Path, level: str, stderr: bool = False) -> Path:
        """A logging config for this release's backend (reload4j for 3.x, log4j2 for 4.x)."""
        text = (_LOG4J2 if _major(self.version) >= 4 else _LOG4J).format(
            level=level, stream="System.err" if stderr else "System.out",
            stream2="SYSTEM_ERR" if stderr else "SYSTEM_OUT")
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return path

    def _logging_opt(self, config: Path) -> str:
        if _major(self.version) >= 4:
            return f"-Dlog4j2.configurationFile={config}"
        return f"-Dlog4j.configuration=file:{config}"

    def argv(self, main: str, args: Sequence[str], heap: str, logging_config: Path,
             jvm: Sequence[str] = ()) -> list[str]:
        return [self.java, f"-Xmx{heap}", f"-Xms{heap}", *JVM_PERFORMANCE, *jvm,
                self._logging_opt(logging_config), "-cp", self.classpath, main, *args]

    def tool_argv(self, main: str, *args: str) -> list[str]:
        """A Kafka command-line tool (ProducerPerformance, ConsumerGroupCommand, …) logging
        warnings to stderr, like the stock bin/kafka-*.sh scripts."""
        config = self.write_logging(self.jars[0].parent / "streambench-tools-logging.properties",
                                    "WARN", stderr=True)
        return [self.java, f"-Xmx{TOOL_HEAP}", self._logging_opt(config), "-cp", self.classpath,
                main, *args]


async def kafka_runtime(version: str, progress: Progress, label: str = "kafka") -> KafkaRuntime:
    """Java (checked) and the release's jars (assembled from Maven Central on first use)."""
    java = find_java()
    major = java_major(java)
    if major < JAVA_MIN:
        raise StackError(f"{java} is Java {major}; Kafka needs Java {JAVA_MIN} or newer: install "
                         "openjdk-17-jre-headless or point JAVA_HOME at a newer Java")
    jars = await assemble(f"kafka-{version}", coordinates(version),
                          lambda message: progress(f"{label}: {message}"), what=f"Kafka {version}")
    return KafkaRuntime(java, version, tuple(jars))


def random_cluster_id() -> str:
    """What `kafka-storage.sh random-uuid` prints: 16 random bytes, base64url, no padding
    (never starting with '-', which command lines would take for an option)."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _properties(values: dict[str, object]) -> str:
    return "".join(f"{k}={v}\n" for k, v in values.items())


async def broker_count(bootstrap: str, timeout_s: float,
                       security: ClientSecurity = PLAINTEXT) -> int:
    """How many brokers the cluster's metadata lists, as the first bootstrap server that answers
    tells it; raises KafkaError/OSError/TimeoutError.

    The metadata comes from the bootstrap connection itself: a request to a broker picked from
    the metadata (what the admin client's describe_cluster does) can pick one that was just
    killed and is still listed until its session times out."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000),
                            client_id="streambench-ready", **security.kafka_kwargs())
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        return len(client.cluster.brokers())
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def partition_leaders(bootstrap: str, timeout_s: float) -> dict[int, int]:
    """Node id → how many partitions of the topics other than Kafka's own it leads."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000),
                            client_id="streambench-leaders")
    try:
        await asyncio.wait_for(client.bootstrap(), timeout_s)
        cluster = await asyncio.wait_for(client.fetch_all_metadata(), timeout_s)
        led: dict[int, int] = {}
        for topic in cluster.topics(exclude_internal_topics=True):
            for p in cluster.partitions_for_topic(topic) or ():
                node = cluster.leader_for_partition(TopicPartition(topic, p))
                if node is not None and node >= 0:
                    led[node] = led.get(node, 0) + 1
        return led
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def handshake(servers: Sequence[tuple[str, int]], timeout_s: float,
                    security: ClientSecurity) -> None:
    """One connection with the target's TLS and SASL settings to one of the servers: raises
    what went wrong (a refused handshake or credentials), which the clients' bootstrap only
    logs."""
    error: BaseException | None = None
    for host, port in servers:
        try:
            conn = await asyncio.wait_for(create_conn(host, port, client_id="streambench-ready",
                                                      request_timeout_ms=int(timeout_s * 1000),
                                                      **security.kafka_kwargs()), timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            error = exc
            continue
        conn.close()
        return
    assert error is not None
    raise error


async def probe(servers: Sequence[tuple[str, int]], timeout_s: float) -> None:
    """Open a TCP connection to one of the servers; raises OSError/TimeoutError for the last."""
    error: BaseException | None = None
    for host, port in servers:
        try:
            _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            error = exc
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return
    assert error is not None
    raise error


@dataclass
class _Layout:
    """The loopback ports of one local cluster."""

    ports: list[int]
    controller_ports: list[int] = field(default_factory=list)
    zookeeper_port: int = 0
    metrics_ports: list[int] = field(default_factory=list)  # each broker's JMX exporter


class KafkaLocalStack(Stack):
    """`brokers` Kafka nodes on 127.0.0.1: combined broker+controller nodes (KRaft), or brokers
    next to one ZooKeeper (zookeeper=True)."""

    runtime = "local"

    def __init__(self, target: Target, label: str, zookeeper: bool) -> None:
        opts = target.options
        self._target = target
        self._label = label
        self._zookeeper = zookeeper
        self._count = int(opts["brokers"])
        self._heap = str(opts["heap"])
        self._version = str(opts["version"])
        self._port = int(opts.get("port") or 0)
        self._dir: Path | None = None
        self._zk: LocalNode | None = None
        self._brokers: list[LocalNode] = []
        self._layout: _Layout | None = None
        self._written: dict[str, str] = {}  # the first broker's server.properties
        # ZooKeeper mode: when each broker was killed (its ZooKeeper session outlives it)
        self._killed_at: dict[str, float] = {}
        # KRaft with network faults asked for: the links behind Toxiproxy (compose.kafka_links)
        self._proxied = bool(opts.get(PROXIED_OPTION)) and not zookeeper
        self._links: KafkaLinks | None = None

    @property
    def _mode(self) -> str:
        return "zookeeper" if self._zookeeper else "kraft"

    def _bootstrap(self) -> str:
        """The brokers' own addresses (behind proxies: their listener left unproxied)."""
        assert self._layout is not None
        if self._links is not None:
            return self._links.direct_bootstrap()
        return ",".join(f"127.0.0.1:{p}" for p in self._layout.ports)

    def _check_heaps(self) -> None:
        """Refuse, before any JVM starts, a cluster whose heaps outgrow the machine's memory."""
        import psutil

        units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
        heap = self._heap.lower()
        each = int(heap[:-1]) * units[heap[-1]] if heap[-1] in units else int(heap)
        total = psutil.virtual_memory().total
        if each * self._count > total:
            raise StackError(f"{self._label}: {self._count:,} brokers with a heap of {self._heap} "
                             f"each need {each * self._count / 2**30:,.1f} GiB, more than this "
                             f"machine's {total / 2**30:,.1f} GiB of memory; use fewer brokers "
                             "or a smaller heap=")

    def _choose_ports(self) -> _Layout:
        n = self._count
        if self._port:
            wanted = list(range(self._port, self._port + n))
            if wanted[-1] > 65535:
                raise StackError(f"port {self._port} + {n} brokers runs past 65535; choose a lower port")
            for p in wanted:
                if port_in_use(p):
                    which = "" if n == 1 else f" (broker {p - self._port + 1} of {n} takes port {p})"
                    raise StackError(f"port {p} on 127.0.0.1 is already in use{which}; choose "
                                     f"another with {self._target.platform}:port=N or leave port unset")
            ports = wanted
        else:
            ports = self._free_ports(n, ())
        metrics = self._free_ports(n, ports)
        if self._zookeeper:
            return _Layout(ports, zookeeper_port=self._free_ports(1, ports + metrics)[0],
                           metrics_ports=metrics)
        return _Layout(ports, controller_ports=self._free_ports(n, ports + metrics),
                       metrics_ports=metrics)

    @staticmethod
    def _free_ports(n: int, taken: Sequence[int]) -> list[int]:
        found: list[int] = []
        while len(found) < n:
            p = free_port()
            if p not in found and p not in taken:
                found.append(p)
        return found

    def _broker_config(self, i: int, data: Path, cluster_rf: int) -> dict[str, object]:
        common: dict[str, object] = {
            "log.dirs": data,
            "num.partitions": 1,
            "offsets.topic.replication.factor": cluster_rf,
            "transaction.state.log.replication.factor": cluster_rf,
            "transaction.state.log.min.isr": min(2, cluster_rf),
            # the stock config/server.properties sets this for development set-ups: consumers
            # of a new group get their partitions at once instead of after 3 s
            "group.initial.rebalance.delay.ms": 0,
        }
        return {**self._layout_config(i), **common,
                # `broker.` settings of the target (its profile, config file, its own)
                **settings_of(self._target, "broker")}

    def _layout_config(self, i: int) -> dict[str, object]:
        assert self._layout is not None
        lay = self._layout
        if self._links is not None:
            return self._links.listener_config(i)
        if self._zookeeper:
            return {
                "broker.id": i,
                "zookeeper.connect": f"127.0.0.1:{lay.zookeeper_port}",
                "zookeeper.connection.timeout.ms": 18000,
                "listeners": f"PLAINTEXT://127.0.0.1:{lay.ports[i]}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{lay.ports[i]}",
            }
        voters = ",".join(f"{n + 1}@127.0.0.1:{p}" for n, p in enumerate(lay.controller_ports))
        return {
            "process.roles": "broker,controller",
            "node.id": i + 1,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{lay.ports[i]},"
                         f"CONTROLLER://127.0.0.1:{lay.controller_ports[i]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{lay.ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        self._check_heaps()
        runtime = await kafka_runtime(self._version, progress, self._label)
        agent = await exporter_jar(lambda message: progress(f"{self._label}: {message}"))
        self._layout = self._choose_ports()
        self._dir = root = make_data_dir(DATA_PREFIX)
        await self._start_links(progress)
        broker_logging = runtime.write_logging(root / "broker-logging.properties", "INFO")
        rules = write_rules(root / "jmx-exporter.yaml")
        rf = min(3, self._count)
        configs = []
        for i in range(self._count):
            node_dir = root / f"broker-{i + 1}"
            node_dir.mkdir()
            config = node_dir / "server.properties"
            values = self._broker_config(i, node_dir / "data", rf)
            if i == 0:
                self._written = {k: str(v) for k, v in values.items()}
            config.write_text(_properties(values))
            configs.append(config)
        if self._zookeeper:
            self._start_zookeeper(runtime, root)
        else:
            await self._format(runtime, configs, broker_logging, progress)
        what = "broker" if self._count == 1 else f"{self._count} brokers"
        progress(f"{self._label}: starting Kafka {self._version} ({self._mode}, {what}, heap {self._heap})")
        for i, config in enumerate(configs):
            jvm = [agent_option(agent, self._layout.metrics_ports[i], rules)]
            node = LocalNode(f"broker-{i + 1}",
                             runtime.argv("kafka.Kafka", [str(config)], self._heap, broker_logging,
                                          jvm),
                             config.parent / "broker.log", cwd=config.parent)
            node.start()
            self._brokers.append(node)

    async def _start_links(self, progress: Progress) -> None:
        """With network faults asked for, the proxies in front of every link, before the
        brokers that advertise them start."""
        if not self._proxied:
            return
        assert self._layout is not None
        # every port the layout holds is taken, whatever else it comes to hold
        taken = [p for v in vars(self._layout).values() for p in (v if isinstance(v, list) else [v])]
        self._links = KafkaLinks(self._label, self._layout.ports, taken)
        await self._links.start(progress)

    async def network_fault(self, item: Intervention, broker: str | None, side: str | None) -> str:
        """One network fault on the links of one broker (broker-N; None: every broker), on
        one side (clients, peers; None: both)."""
        if self._links is None:
            return await super().network_fault(item, broker, side)
        names = [n for n in self.brokers() if n != ZOOKEEPER_NODE]
        led = ""
        if broker == LEADER:
            broker, led = await self._leader()
        done = await self._links.apply(item, None if broker is None else names.index(broker), side)
        return done.replace(":", f" ({led}):", 1) if led else done

    async def _leader(self) -> tuple[str, str]:
        """The broker that leads the most partitions of the topics other than Kafka's own,
        and how many of them, as the brokers' own listeners tell it now."""
        try:
            led = await partition_leaders(self._bootstrap(), 5.0)
        except (KafkaError, OSError, TimeoutError) as exc:
            raise StackError(f"{self._label}: cannot find the partitions' leader: "
                             f"{type(exc).__name__}: {exc}") from None
        if not led:
            raise StackError(f"{self._label}: no partition has a leader now")
        node, count = max(led.items(), key=lambda kv: (kv[1], -kv[0]))
        return f"broker-{node}", f"leads {count} of {sum(led.values())} partitions"

    def _start_zookeeper(self, runtime: KafkaRuntime, root: Path) -> None:
        assert self._layout is not None
        zk_dir = root / "zookeeper"
        zk_dir.mkdir()
        config = zk_dir / "zoo.cfg"
        config.write_text(_properties({
            "dataDir": zk_dir / "data",
            "clientPort": self._layout.zookeeper_port,
            "clientPortAddress": "127.0.0.1",
            "maxClientCnxns": 0,
            "admin.enableServer": "false",
            "tickTime": ZK_TICK_MS,
        }))
        logging_config = runtime.write_logging(zk_dir / "logging.properties", "INFO")
        self._zk = LocalNode(ZOOKEEPER_NODE,
                             runtime.argv("org.apache.zookeeper.server.quorum.QuorumPeerMain",
                                          [str(config)], ZOOKEEPER_HEAP, logging_config),
                             zk_dir / "zookeeper.log", cwd=zk_dir)
        self._zk.start()

    async def _format(self, runtime: KafkaRuntime, configs: list[Path], logging_config: Path,
                      progress: Progress) -> None:
        """kafka-storage.sh format for every node, all with one cluster id."""
        progress(f"{self._label}: formatting the KRaft storage of {len(configs)} node(s)")
        cluster_id = random_cluster_id()
        procs = []
        for config in configs:
            argv = runtime.argv("kafka.tools.StorageTool",
                                ["format", "-t", cluster_id, "-c", str(config)], TOOL_HEAP,
                                logging_config)
            log = config.parent / "format.log"
            procs.append((start_process(argv, log, cwd=config.parent), log))
        try:
            while any(p.poll() is None for p, _ in procs):
                await asyncio.sleep(0.1)
        finally:
            for p, _ in procs:
                stop_process(p, grace_s=1)
        for p, log in procs:
            if p.returncode != 0:
                raise StackError(f"{self._label}: formatting the KRaft storage failed: "
                                 f"{tail(log, 3) or 'no output'}")

    def _nodes(self) -> list[LocalNode]:
        return ([self._zk] if self._zk is not None else []) + self._brokers

    def log_files(self) -> list[Path]:
        return [node.log for node in [*self._brokers, *([self._zk] if self._zk else [])]]

    def _check_alive(self) -> None:
        for node in self._nodes():
            if node.proc is not None and node.proc.poll() is not None:
                raise StackError(f"{self._label}: {node.name} exited (code {node.proc.returncode}) "
                                 f"before Kafka was ready: {_reason(node.log)}")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        bootstrap = self._bootstrap()
        seen = -1
        while True:
            self._check_alive()
            try:
                found = await broker_count(bootstrap, 5.0)
            except (KafkaError, OSError, TimeoutError):
                found = 0
            if found >= self._count:
                self._check_alive()
                return
            if found != seen and self._count > 1:
                progress(f"{self._label}: {found} of {self._count} brokers registered")
                seen = found
            if loop.time() > deadline:
                node = self._brokers[0]
                raise StackError(f"{self._label}: Kafka not ready after {timeout_s:.0f} s "
                                 f"({found} of {self._count} brokers registered); {node.name} "
                                 f"log: {tail(node.log, 3) or 'empty'}")
            await asyncio.sleep(0.5)

    # -- faults --

    def brokers(self) -> list[str]:
        names = [f"broker-{i + 1}" for i in range(self._count)]
        return names + ([ZOOKEEPER_NODE] if self._zookeeper else [])

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        """A restarted broker answers on its own port with every broker in its metadata (it
        has rejoined the cluster); ZooKeeper accepts connections."""
        assert self._layout is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        if node is self._zk:
            servers, wanted = [("127.0.0.1", self._layout.zookeeper_port)], 0
        else:
            port = self._layout.ports[self._brokers.index(node)]
            servers, wanted = [("127.0.0.1", port)], self._count
        found = 0
        while True:
            if not node.running:
                raise StackError(f"{self._label}: {node.name} exited (code "
                                 f"{node.proc.returncode if node.proc else None}) after a start: "
                                 f"{_reason(node.log)}")
            try:
                if wanted:
                    found = await broker_count(bootstrap_text(servers), 5.0)
                else:
                    await probe(servers, 5.0)
                if found >= wanted:
                    return
            except (KafkaError, OSError, TimeoutError):
                pass
            if loop.time() > deadline:
                raise StackError(f"{self._label}: {node.name} not ready {timeout_s:.0f} s after a "
                                 f"start ({found} of {wanted} brokers in its metadata); log: "
                                 f"{tail(node.log, 3) or 'empty'}")
            await asyncio.sleep(0.5)

    def down_brokers(self) -> dict[str, str]:
        return nodes_down(self._nodes())

    async def _apply_fault(self, action: str, broker: str) -> str:
        node = next((n for n in self._nodes() if n.name == broker), None)
        if node is None:
            raise StackError(f"{self._label}: {broker} is not running (the stack is not up)")
        waited = 0.0
        if action == "start" and not node.running and broker in self._killed_at:
            waited = await self._session_gone(broker)
        done = await node_fault(self._label, node, action, self._node_ready)
        if action == "kill" and self._zookeeper and node is not self._zk:
            self._killed_at[broker] = time.monotonic()
        elif action in ("start", "restart"):
            self._killed_at.pop(broker, None)
        if waited:
            done += (f" (after {waited:.1f} s for ZooKeeper to expire the killed broker's "
                     "session)")
        return done

    async def _session_gone(self, broker: str) -> float:
        """ZooKeeper mode: a broker killed holds its registration (/brokers/ids/N, an ephemeral
        node) until ZooKeeper expires its session, and a broker started before that exits with
        NodeExists. Waits out the rest of the session timeout since the kill; the seconds
        waited."""
        timeout_ms = settings_of(self._target, "broker").get("zookeeper.session.timeout.ms",
                                                             ZK_SESSION_TIMEOUT_MS)
        # ZooKeeper grants at most 20 ticks (tickTime 2,000 ms) and expires a session within
        # a tick of its timeout
        granted_s = min(float(str(timeout_ms)), 20 * ZK_TICK_MS) / 1000 + ZK_TICK_MS / 1000
        left = self._killed_at[broker] + granted_s - time.monotonic()
        if left <= 0:
            return 0.0
        await asyncio.sleep(left)
        return left

    async def down(self) -> None:
        try:
            # brokers first (they deregister from ZooKeeper on the way out), all at once
            brokers = [n.proc for n in self._brokers if n.proc is not None]
            await asyncio.gather(*(asyncio.to_thread(stop_process, p, 10.0) for p in brokers))
            if self._zk is not None and self._zk.proc is not None:
                await asyncio.to_thread(stop_process, self._zk.proc, 5.0)
        finally:
            for node in self._nodes():
                if node.proc is not None and node.proc.poll() is None:
                    stop_process(node.proc, grace_s=0)  # interrupted above: no grace left
                node.proc = None
            links, self._links = self._links, None
            if links is not None:
                await links.stop(self.context.log_dir)
            if self._dir is not None:
                keep_logs(self.log_files(), self._dir, self.context.log_dir)
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def describe(self) -> StackDescription:
        config = {"mode": self._mode, "brokers": str(self._count), "heap": self._heap,
                  "data_dir": str(self._dir)}
        pids = tuple(n.proc.pid for n in self._nodes() if n.proc is not None and n.running)
        endpoints = {"kafka": self._bootstrap()}
        if self._layout is not None:
            endpoints[METRICS_ENDPOINT] = endpoint_list({
                f"broker-{i + 1}": f"http://127.0.0.1:{p}/metrics"
                for i, p in enumerate(self._layout.metrics_ports)})
        links = self._links
        return StackDescription(runtime="local", endpoints=endpoints, pids=pids,
                                version=self._version, config=config,
                                broker_settings=dict(self._written),
                                client_endpoints=({"kafka": links.client_bootstrap()}
                                                  if links is not None else {}),
                                proxies=links.describe() if links is not None else {})


def _reason(log: Path) -> str:
    """The line of a broker log that says why it stopped, else its last lines."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return "no log"
    for ln in lines:
        if "Address already in use" in ln or "BindException" in ln:
            return "a port it needs is already in use: " + ln.strip()[:300]
    for ln in reversed(lines):
        if " ERROR " in ln or "Exception" in ln:
            return ln.strip()[:300]
    return tail(log, 3) or "no output"


class KafkaExternalStack(Stack):
    """An existing Kafka-API cluster (Kafka, Redpanda): nothing started or stopped."""

    runtime = "external"

    def __init__(self, target: Target, label: str, product: str) -> None:
        assert target.address is not None
        self._label = label
        self._product = product
        self._servers = parse_bootstrap(target.address)
        self._security = ClientSecurity.of(target)
        self._brokers = 0
        self._metrics = bool(target.options.get("metrics"))

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing cluster at {bootstrap_text(self._servers)}")
        if not self._metrics:
            progress(f"{self._label}: no broker metrics (metrics=URL[+URL…] names the brokers' "
                     "Prometheus endpoints)")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        where = f"{self._product} at {bootstrap_text(self._servers)}"
        timeout = min(timeout_s, EXTERNAL_TIMEOUT_S)
        try:
            await probe(self._servers, min(5.0, timeout))
        except (OSError, TimeoutError) as exc:
            raise StackError(f"{self._label}: cannot reach {where}: {connect_failure(exc)}") from None
        tls = self._security.tls is not None
        try:
            await handshake(self._servers, min(10.0, timeout), self._security)
        except (KafkaError, OSError, TimeoutError) as exc:
            reason = connect_failure(exc, tls=tls)
            if not tls and isinstance(exc, KafkaConnectionError):
                reason = (f"{reason} (the broker closed the connection: a TLS listener? add tls "
                          "or ca=PATH to the target)")
            raise StackError(f"{self._label}: cannot connect to {where}: {reason}") from None
        try:
            self._brokers = await broker_count(bootstrap_text(self._servers), timeout, self._security)
        except (KafkaError, OSError, TimeoutError) as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            raise StackError(f"{self._label}: {where} accepts connections but does not answer "
                             f"the Kafka protocol: {reason}") from None

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        return StackDescription(runtime="external",
                                endpoints={"kafka": bootstrap_text(self._servers)},
                                config={"brokers": str(self._brokers)})

# ---- the docker runtime ---------------------------------------------------------------------

SHAPES = (1, 3)  # the compose files hold 1- and 3-broker clusters
KAFKA_IMAGE_ENV = "STREAMBENCH_IMAGE_KAFKA"


# variables of the apache/kafka image that configure the JVM or the image, not server properties
_KAFKA_IMAGE_VARS = frozenset({
    "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS",
    "KAFKA_JMX_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_VERSION", "KAFKA_LOG4J_ROOT_LOGLEVEL",
    "KAFKA_LOG4J_LOGGERS", "KAFKA_TOOLS_LOG4J_LOGLEVEL"})


def kafka_env_name(prop: str) -> str:
    """The apache/kafka image's variable of a server property: `-` -> `___`, `_` -> `__`,
    `.` -> `_`, upper case, KAFKA_ in front (log.dirs -> KAFKA_LOG_DIRS)."""
    return "KAFKA_" + prop.replace("_", "__").replace("-", "___").replace(".", "_").upper()


def kafka_property(name: str) -> str | None:
    """The server property a variable of the image sets (None: not a property)."""
    if not name.startswith("KAFKA_") or name in _KAFKA_IMAGE_VARS:
        return None
    rest = name[len("KAFKA_"):].lower()
    return rest.replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")


def _kafka_image(target: Target) -> dict[str, str]:
    """kafka:version=4.1.0 picks apache/kafka:4.1.0, unless the image variable is set."""
    version = str(target.options.get("version") or "")
    if target.platform == "kafka" and "version" in target.explicit and not os.environ.get(KAFKA_IMAGE_ENV):
        return {KAFKA_IMAGE_ENV: f"apache/kafka:{version}"}
    return {}


def _cluster_size(target: Target) -> int:
    count = int(target.options.get("brokers") or 1)
    if count not in SHAPES:
        raise TargetError(f"target {target.spec!r}: the docker runtime runs 1 or 3 brokers "
                         f"(compose files of those shapes); use brokers=1 or brokers=3, or "
                         "runtime=local for other sizes")
    return count


class KafkaApiDockerStack(ComposeStack):
    """Kafka-API brokers (Kafka in KRaft or ZooKeeper mode, Redpanda): ready when every broker
    is in the cluster metadata."""

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        self._count = _cluster_size(target)
        self._ports: list[int] = []

    def _client_ports(self) -> list[int]:
        first = int(self._target.options.get("port") or 0)
        if not first:
            return [self.take_port(0) for _ in range(self._count)]
        return [self.take_port(first + i) for i in range(self._count)]

    def _bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self._ports)

    async def probe(self) -> bool:
        try:
            found = await broker_count(self._bootstrap(), DOCKER_PROBE_TIMEOUT_S)
        except (KafkaError, OSError, TimeoutError):
            return False
        return found >= self._count

    def endpoints(self) -> dict[str, str]:
        return {"kafka": self._bootstrap()}


# where the JMX exporter's jar and rules are mounted in a broker's container
_AGENT_JAR = "/opt/streambench/jmx_prometheus_javaagent.jar"
_AGENT_RULES = "/opt/streambench/jmx-exporter.yaml"


class KafkaDockerStack(KafkaApiDockerStack):
    """Apache Kafka, KRaft (combined broker+controller nodes) or ZooKeeper mode."""

    product = "Kafka"

    def __init__(self, target: Target, label: str, zookeeper: bool) -> None:
        super().__init__(target, label)
        self._zookeeper = zookeeper
        self._version = str(target.options.get("version") or "")
        self._agent: Path | None = None  # the JMX exporter's jar, mounted into each broker
        self._metrics_ports: list[int] = []

    async def up(self, progress: Progress) -> None:
        self._agent = await exporter_jar(lambda message: progress(f"{self._label}: {message}"))
        await super().up(progress)

    def files(self) -> list[str]:
        base = "kafka-zk" if self._zookeeper else "kafka"
        return [f"{base}.yml" if self._count == 1 else f"{base}-{self._count}.yml"]

    def settings(self) -> dict[str, str]:
        self._ports = self._client_ports()
        env = {f"STREAMBENCH_KAFKA_PORT_{i + 1}": str(p) for i, p in enumerate(self._ports)}
        env["STREAMBENCH_KAFKA_HEAP"] = str(self._target.options.get("heap") or "1G")
        if self._zookeeper:
            env.update({"STREAMBENCH_ZOOKEEPER_PORT": str(self.take_port(0)),
                        "STREAMBENCH_ZOOKEEPER_PEER_PORT": str(self.take_port(0)),
                        "STREAMBENCH_ZOOKEEPER_ELECTION_PORT": str(self.take_port(0))})
        else:
            env["STREAMBENCH_KAFKA_CLUSTER_ID"] = random_cluster_id()
            env.update(_kafka_image(self._target))
            for i in range(self._count):
                env[f"STREAMBENCH_KAFKA_CONTROLLER_PORT_{i + 1}"] = str(self.take_port(0))
        self._metrics_ports = [self.take_port(0) for _ in range(self._count)]
        return env

    def brokers(self) -> list[str]:
        return [f"kafka-{i + 1}" for i in range(self._count)]

    def override(self) -> dict[str, dict[str, object]]:
        """The target's `broker.` settings as the image's KAFKA_* variables, on every broker;
        and the JMX exporter agent on each (its jar and rules mounted, KAFKA_OPTS)."""
        env = {kafka_env_name(k): text(v) for k, v in settings_of(self._target, "broker").items()}
        found: dict[str, dict[str, object]] = {}
        for broker, port in zip(self.brokers(), self._metrics_ports, strict=True):
            found[broker] = {"environment": {**env, **self._agent_env(port)}}
            if self._agent is not None:
                rules = write_rules(self.scratch_dir() / "jmx-exporter.yaml")
                found[broker]["volumes"] = [f"{self._agent}:{_AGENT_JAR}:ro",
                                            f"{rules}:{_AGENT_RULES}:ro"]
        return {b: f for b, f in found.items() if f["environment"] or "volumes" in f}

    def _agent_env(self, port: int) -> dict[str, str]:
        if self._agent is None:
            return {}
        return {"KAFKA_OPTS": agent_option(Path(_AGENT_JAR), port, Path(_AGENT_RULES))}

    def endpoints(self) -> dict[str, str]:
        found = super().endpoints()
        if self._agent is not None:
            found[METRICS_ENDPOINT] = endpoint_list({
                b: f"http://127.0.0.1:{p}/metrics"
                for b, p in zip(self.brokers(), self._metrics_ports, strict=True)})
        return found

    def written(self, services: dict[str, object]) -> dict[str, str]:
        """The server properties of the first broker's KAFKA_* variables (the file's and the
        target's)."""
        service = services.get(self.brokers()[0])
        env = service.get("environment") if isinstance(service, dict) else None
        if not isinstance(env, dict):
            return {}
        return {prop: "" if value is None else str(value) for name, value in env.items()
                if (prop := kafka_property(name)) is not None}

    def config(self) -> dict[str, str]:
        return {"mode": "zookeeper" if self._zookeeper else "kraft", "brokers": str(self._count),
                "heap": str(self._target.options.get("heap") or "1G")}


class RedpandaDockerStack(KafkaApiDockerStack):
    product = "Redpanda"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        self._admin: list[int] = []  # each broker's Admin API port

    def files(self) -> list[str]:
        return ["redpanda.yml" if self._count == 1 else f"redpanda-{self._count}.yml"]

    def settings(self) -> dict[str, str]:
        self._ports = self._client_ports()
        env = {}
        for i, port in enumerate(self._ports, start=1):
            env[f"STREAMBENCH_KAFKA_PORT_{i}"] = str(port)
            for name in ("RPC", "ADMIN", "PROXY", "SCHEMA"):
                env[f"STREAMBENCH_REDPANDA_{name}_PORT_{i}"] = str(self.take_port(0))
        self._admin = [int(env[f"STREAMBENCH_REDPANDA_ADMIN_PORT_{i}"])
                       for i in range(1, self._count + 1)]
        # Seastar takes whole cores and a fixed memory size: derive them from the limits
        if self._cpus:
            env["STREAMBENCH_REDPANDA_SMP"] = str(max(1, int(self._cpus)))
        if self._memory:
            env["STREAMBENCH_REDPANDA_MEMORY"] = f"{max(256, int(memory_bytes(self._memory) * 0.8 / 2**20))}M"
        return env

    def brokers(self) -> list[str]:
        return [f"redpanda-{i + 1}" for i in range(self._count)]

    def endpoints(self) -> dict[str, str]:
        """The Kafka API, and each broker's /public_metrics on its Admin API port."""
        return {**super().endpoints(), METRICS_ENDPOINT: endpoint_list({
            b: f"http://127.0.0.1:{p}/public_metrics" for b, p in zip(self.brokers(), self._admin,
                                                                     strict=True)})}

    def config(self) -> dict[str, str]:
        return {"brokers": str(self._count)}


def kafka_images(target: Target) -> list[str]:
    """The images the docker runtime of a Kafka-API target runs (kafka, kafka-zk, redpanda)."""
    name = {"kafka-zk": "kafka-zk.yml", "redpanda": "redpanda.yml"}.get(target.platform, "kafka.yml")
    return compose_images([name], {**os.environ, **_kafka_image(target)})
