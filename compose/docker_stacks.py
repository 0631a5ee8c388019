"""The platforms as compose projects (docker runtime): which compose file, which ports and
settings, which services are brokers, and when the platform counts as ready."""

from __future__ import annotations

import os

from compose.docker import ComposeStack, compose_images, memory_bytes
from compose.pulsar import STOCK_NAMESPACE, AdminError, PulsarAdmin, create_namespace, ready_check
from loadgen.core.errors import StackError
from loadgen.core.settings import settings_of, text
from loadgen.core.stack import Progress
from loadgen.core.target import Target

PROBE_TIMEOUT_S = 2.0
SHAPES = (1, 3)  # the compose files hold 1- and 3-broker clusters
KAFKA_IMAGE_ENV = "STREAMBENCH_IMAGE_KAFKA"
PULSAR_PREFIX = "PULSAR_PREFIX_"
# a compose file of each platform's docker runtime (the others of a platform run the same images)
_FILES = {"redis": "redis.yml", "kafka": "kafka.yml", "kafka-zk": "kafka-zk.yml",
          "redpanda": "redpanda.yml", "pulsar": "pulsar.yml",
          "nats": "nats.yml", "pravega": "pravega.yml", "rabbitmq": "rabbitmq.yml"}


def _kafka_image(target: Target) -> dict[str, str]:
    """kafka:version=4.1.0 picks apache/kafka:4.1.0, unless the image variable is set."""
    version = str(target.options.get("version") or "")
    if target.platform == "kafka" and "version" in target.explicit and not os.environ.get(KAFKA_IMAGE_ENV):
        return {KAFKA_IMAGE_ENV: f"apache/kafka:{version}"}
    return {}


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


def images_of(target: Target) -> list[str]:
    """The images the docker runtime of the target's platform runs ([] for a platform without
    one), with the image variables and options applied."""
    name = _FILES.get(target.platform)
    if name is None:
        return []
    return compose_images([name], {**os.environ, **_kafka_image(target)})


class RedisDockerStack(ComposeStack):
    product = "redis"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        # each platform's client is imported by its own stacks alone: a process that runs
        # another platform's load never loads it
        from compose.redis import RedisServerOptions
        self._port = 0
        self._opts = RedisServerOptions.of(target)

    def files(self) -> list[str]:
        return ["redis.yml"]

    def settings(self) -> dict[str, str]:
        opts = self._target.options
        self._port = self.take_port(int(opts.get("port") or 0))
        return {"STREAMBENCH_REDIS_PORT": str(self._port),
                "STREAMBENCH_REDIS_AOF": "yes" if opts.get("aof") else "no",
                "STREAMBENCH_REDIS_FSYNC": str(opts.get("fsync") or "everysec")}

    def brokers(self) -> list[str]:
        return ["redis"]

    def _own(self) -> dict[str, str]:
        """What compose/redis.yml gives redis-server besides the persistence directives."""
        return {"port": str(self._port), "bind": "127.0.0.1", "dir": "/data", "save": ""}

    def override(self) -> dict[str, dict[str, object]]:
        """The `conf.` directives after the file's own arguments (the command is replaced whole)."""
        if not self._opts.conf:
            return {}
        own = [arg for name, value in self._own().items() for arg in (f"--{name}", value)]
        return {"redis": {"command": ["redis-server", *own, *self._opts.argv()]}}

    def written(self, services: dict[str, object]) -> dict[str, str]:
        return {**self._own(), **self._opts.directives()}

    async def probe(self) -> bool:
        from redis.exceptions import RedisError

        from compose.redis import ping
        try:
            self._version = await ping("127.0.0.1", self._port, PROBE_TIMEOUT_S)
        except (OSError, RedisError, TimeoutError):
            return False
        return True

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        from compose.redis import check_version
        await super().ready(timeout_s, progress)
        check_version(self._version, f"the image {self._images.get('redis')}")

    def endpoints(self) -> dict[str, str]:
        return {"redis": f"127.0.0.1:{self._port}"}

    def config(self) -> dict[str, str]:
        opts = self._target.options
        config = {"appendonly": "yes" if opts.get("aof") else "no"}
        if opts.get("aof"):
            config["appendfsync"] = str(opts.get("fsync") or "everysec")
        return config


def _cluster_size(target: Target) -> int:
    count = int(target.options.get("brokers") or 1)
    if count not in SHAPES:
        raise StackError(f"target {target.spec!r}: the docker runtime runs 1 or 3 brokers "
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
        from aiokafka.errors import KafkaError

        from compose.kafka import broker_count
        try:
            found = await broker_count(self._bootstrap(), PROBE_TIMEOUT_S)
        except (KafkaError, OSError, TimeoutError):
            return False
        return found >= self._count

    def endpoints(self) -> dict[str, str]:
        return {"kafka": self._bootstrap()}


class KafkaDockerStack(KafkaApiDockerStack):
    """Apache Kafka, KRaft (combined broker+controller nodes) or ZooKeeper mode."""

    product = "Kafka"

    def __init__(self, target: Target, label: str, zookeeper: bool) -> None:
        super().__init__(target, label)
        self._zookeeper = zookeeper
        self._version = str(target.options.get("version") or "")

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
            from compose.kafka import random_cluster_id
            env["STREAMBENCH_KAFKA_CLUSTER_ID"] = random_cluster_id()
            env.update(_kafka_image(self._target))
            for i in range(self._count):
                env[f"STREAMBENCH_KAFKA_CONTROLLER_PORT_{i + 1}"] = str(self.take_port(0))
        return env

    def brokers(self) -> list[str]:
        return [f"kafka-{i + 1}" for i in range(self._count)]

    def override(self) -> dict[str, dict[str, object]]:
        """The target's `broker.` settings as the image's KAFKA_* variables, on every broker."""
        env = {kafka_env_name(k): text(v) for k, v in settings_of(self._target, "broker").items()}
        return {broker: {"environment": env} for broker in self.brokers()} if env else {}

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

    def files(self) -> list[str]:
        return ["redpanda.yml" if self._count == 1 else f"redpanda-{self._count}.yml"]

    def settings(self) -> dict[str, str]:
        self._ports = self._client_ports()
        env = {}
        for i, port in enumerate(self._ports, start=1):
            env[f"STREAMBENCH_KAFKA_PORT_{i}"] = str(port)
            for name in ("RPC", "ADMIN", "PROXY", "SCHEMA"):
                env[f"STREAMBENCH_REDPANDA_{name}_PORT_{i}"] = str(self.take_port(0))
        # Seastar takes whole cores and a fixed memory size: derive them from the limits
        if self._cpus:
            env["STREAMBENCH_REDPANDA_SMP"] = str(max(1, int(self._cpus)))
        if self._memory:
            env["STREAMBENCH_REDPANDA_MEMORY"] = f"{max(256, int(memory_bytes(self._memory) * 0.8 / 2**20))}M"
        return env

    def brokers(self) -> list[str]:
        return [f"redpanda-{i + 1}" for i in range(self._count)]

    def config(self) -> dict[str, str]:
        return {"brokers": str(self._count)}


class PulsarDockerStack(ComposeStack):
    """Pulsar standalone: ready when the admin API lists the cluster."""

    product = "Pulsar"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        self._port = 0
        self._admin_port = 0

    def files(self) -> list[str]:
        return ["pulsar.yml"]

    def settings(self) -> dict[str, str]:
        self._port = self.take_port(int(self._target.options.get("port") or 0))
        self._admin_port = self.take_port(0)
        return {"STREAMBENCH_PULSAR_PORT": str(self._port),
                "STREAMBENCH_PULSAR_ADMIN_PORT": str(self._admin_port)}

    def brokers(self) -> list[str]:
        return ["pulsar"]

    def override(self) -> dict[str, dict[str, object]]:
        """The target's `broker.` settings the image's way: bin/apply-config-from-env.py sets a
        key of conf/standalone.conf from PULSAR_PREFIX_<key> (appending a key the file lacks)."""
        env = {f"{PULSAR_PREFIX}{k}": text(v) for k, v in settings_of(self._target, "broker").items()}
        return {"pulsar": {"environment": env}} if env else {}

    def written(self, services: dict[str, object]) -> dict[str, str]:
        """The standalone.conf keys the service's variables set (the file's and the target's):
        the keys are camelCase, the image's other variables (PULSAR_MEM…) upper case."""
        service = services.get("pulsar")
        env = service.get("environment") if isinstance(service, dict) else None
        if not isinstance(env, dict):
            return {}
        found = {}
        for name, value in env.items():
            key = name[len(PULSAR_PREFIX):] if name.startswith(PULSAR_PREFIX) else name
            if name.startswith(PULSAR_PREFIX) or name[:1].islower():
                found[key] = "" if value is None else str(value)
        return found

    def _admin_url(self) -> str:
        return f"http://127.0.0.1:{self._admin_port}"

    async def probe(self) -> bool:
        """The admin API answers and a topic can be made in the namespace the standalone creates
        (it answers before it has made it)."""
        admin = PulsarAdmin(self._admin_url(), timeout_s=PROBE_TIMEOUT_S)
        try:
            self._version = await ready_check(admin, STOCK_NAMESPACE)
        except (OSError, AdminError, ValueError, TimeoutError):
            return False
        return True

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        await super().ready(timeout_s, progress)
        await create_namespace(self._admin_url(), str(self._target.options["namespace"]),
                               self._label)

    def endpoints(self) -> dict[str, str]:
        return {"pulsar": f"pulsar://127.0.0.1:{self._port}", "pulsar-admin": self._admin_url()}


