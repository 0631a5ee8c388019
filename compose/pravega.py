"""Pravega stacks: the Pravega standalone (`io.pravega.local.LocalPravegaEmulator`: ZooKeeper,
controller and segment store in one JVM) from its Maven Central jars on a local Java 17; the
public standalone image (docker runtime, compose/pravega.yml); or an existing cluster given by
its controller URI (`pravega@tcp://HOST:9090`).

The standalone keeps its streams in memory (in-memory tier-1 log and long-term storage, the
emulator's fixed choice), so a killed or restarted standalone comes back empty: scopes, streams
and reader groups are gone. Its ZooKeeper and segment store listen on 127.0.0.1 only; the
controller's gRPC server takes a port, not an address, and listens on every interface (the
clients here reach it on 127.0.0.1). The controller's REST server and the segment store's admin
gateway and REST listener are off."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from pathlib import Path

from compose.docker import ComposeStack
from compose.java import find_java, java_major
from compose.maven import assemble, classpath
from compose.net import connect_failure, probe_tcp
from compose.process import (
    LocalNode,
    free_port,
    make_data_dir,
    node_fault,
    nodes_down,
    port_in_use,
    stop_and_remove,
    tail,
)
from loadgen.core.errors import StackError, TargetError
from loadgen.core.settings import settings_of, text
from loadgen.core.stack import Progress, Stack, StackDescription, announce_runtime
from loadgen.core.target import Target

PRAVEGA_VERSION = "0.13.0"
# Maven's nearest-wins mediation picks Hadoop's protobuf-java 2.5 for the standalone's
# classpath, on which the controller's gRPC services fail (GeneratedMessageV3 missing): name
# the 3.x that protobuf-java-util of the same tree wants
COORDINATES = (f"io.pravega:pravega-standalone:{PRAVEGA_VERSION}",
               "com.google.protobuf:protobuf-java:3.20.1")
# Jars of the tree left off the classpath: a second SLF4J binding (the standalone logs through
# reload4j, configured here), and two of the three Bouncy Castle providers, whose classes clash
# (an older bcprov's ASN.1 tables under the newer provider break the segment store's token
# checks, so every client request fails)
_LEFT_OUT = ("logback-classic-", "bc-fips-", "bcprov-jdk15on-")
MAIN_CLASS = "io.pravega.local.LocalPravegaEmulator"
READY_LINE = "Pravega Sandbox is running locally now"
DATA_PREFIX = "streambench-pravega-"
_SHELL_WORD = re.compile(r"[^\s*?\[\]]*")  # a value the start script passes on unchanged
JAVA_MIN = 17
DEFAULT_CONTROLLER_PORT = 9090
CONTROLLER_ENDPOINT = "pravega"  # StackDescription.endpoints: the controller URI
SEGMENT_STORE_ENDPOINT = "pravega-segmentstore"
START_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 5.0
PROGRESS_EVERY_S = 5.0

_LOG4J = """\
log4j.rootLogger=WARN, out
log4j.logger.io.pravega.local=INFO
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1} - %m%n
"""


def parse_address(address: str) -> str:
    """`tcp://HOST:PORT` or `HOST:PORT` (or `HOST`, port 9090) -> the controller URI
    `tcp://HOST:PORT` the client takes."""
    text = address.strip()
    parts = urllib.parse.urlsplit(text if "://" in text else f"tcp://{text}")
    try:
        port = parts.port or DEFAULT_CONTROLLER_PORT
    except ValueError:
        port = -1
    if parts.scheme != "tcp" or not parts.hostname or port <= 0 or parts.path not in ("", "/"):
        raise TargetError(f"bad Pravega address {address!r}: expected the controller as "
                          "tcp://HOST:PORT, e.g. pravega@tcp://127.0.0.1:9090")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"tcp://{host}:{port}"


def host_port(uri: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(uri)
    return parts.hostname or "127.0.0.1", parts.port or DEFAULT_CONTROLLER_PORT


async def controller_answers(uri: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """"" when the controller at `uri` takes a TCP connection, else why not."""
    host, port = host_port(uri)
    try:
        await probe_tcp(host, port, timeout_s)
    except (OSError, TimeoutError) as exc:
        return connect_failure(exc)
    return ""


def check_java(label: str) -> str:
    java = find_java()
    major = java_major(java)
    if major < JAVA_MIN:
        raise StackError(f"{label}: {java} is Java {major}; Pravega {PRAVEGA_VERSION} needs Java "
                         f"{JAVA_MIN} or newer: install openjdk-17-jre-headless or point JAVA_HOME "
                         "at a newer Java")
    return java


async def standalone_jars(progress: Progress, label: str) -> list[Path]:
    """The standalone's classpath, fetched from Maven Central on first use."""

    def tell(message: str) -> None:
        progress(f"{label}: {message}")

    jars = await assemble(f"pravega-{PRAVEGA_VERSION}", COORDINATES, tell,
                          what=f"Pravega {PRAVEGA_VERSION}")
    return [j for j in jars if not j.name.startswith(_LEFT_OUT)]


def standalone_settings(zk_port: int, controller_port: int, segment_store_port: int,
                        published: str | None = None) -> dict[str, str]:
    """What streambench writes into the emulator's config file: its own `singlenode.*` keys,
    and the segment store's `pravegaservice.*` keys. The segment store publishes its own
    listener, or `published` (HOST:PORT of a proxy in front of it, for network faults): the
    controller hands that address to the clients (and uses it itself)."""
    host, port = (published.rsplit(":", 1) if published
                  else ("127.0.0.1", str(segment_store_port)))
    return {
        "singlenode.zk.port": str(zk_port),
        "singlenode.controller.rpc.port": str(controller_port),
        "singlenode.segmentStore.port": str(segment_store_port),
        "singlenode.controller.rest.enable": "false",
        "singlenode.admin.gateway.enable": "false",
        "singlenode.metrics.enable": "false",
        "pravegaservice.service.listener.port": str(segment_store_port),
        "pravegaservice.service.published.port": port,
        "pravegaservice.service.listener.host.nameOrIp": "127.0.0.1",
        "pravegaservice.service.published.host.nameOrIp": host,
        "pravegaservice.admin.gateway.enable": "false",
        "pravegaservice.rest.listener.enable": "false",
    }


def _escaped(text_: str) -> str:
    """A value as java.util.Properties reads it back (backslashes kept, leading spaces kept)."""
    out = text_.replace("\\", "\\\\")
    return "\\" + out if out.startswith(" ") else out


def standalone_properties(zk_port: int, controller_port: int, segment_store_port: int,
                          broker: dict[str, str] | None = None, published: str | None = None) -> str:
    """The emulator's config file: streambench's settings, then the target's `broker.` ones.
    The emulator reads its `singlenode.*` keys from it, the segment store its components' keys
    (`pravegaservice.*`, `writer.*`, …) over its built-in settings."""
    settings = {**standalone_settings(zk_port, controller_port, segment_store_port, published),
                **(broker or {})}
    return "".join(f"{key}={_escaped(value)}\n" for key, value in settings.items())


class PravegaLocalStack(Stack):
    """One Pravega standalone: controller and segment store on free loopback ports (or the
    ones given), its own ZooKeeper on another, data and logs in a temp dir down() removes."""

    runtime = "local"
    NODE = "pravega"  # the fault hooks' name of the standalone

    def __init__(self, target: Target, label: str) -> None:
        opts = target.options
        self._target = target
        self._label = label
        self._heap = str(opts["heap"])
        self._port = int(opts.get("port") or 0)
        self._ss_port = int(opts.get("segment_store_port") or 0)
        self._node: LocalNode | None = None
        self._dir: Path | None = None
        self._broker = {key: text(value) for key, value in settings_of(target, "broker").items()}
        self._written: dict[str, str] = dict(self._broker)

    @property
    def _controller(self) -> str:
        return f"tcp://127.0.0.1:{self._port}"

    def _check_ports(self) -> None:
        for value, option in ((self._port, "port"), (self._ss_port, "segment_store_port")):
            if value and port_in_use(value):
                raise StackError(f"port {value} on 127.0.0.1 is already in use; choose another with "
                                 f"{self._target.platform}:{option}=N or leave {option} unset")
        if self._port and self._port == self._ss_port:
            raise StackError("port and segment_store_port must differ")

    def _pick_ports(self) -> tuple[int, int, int]:
        taken: set[int] = set()

        def pick(wanted: int) -> int:
            port = wanted or free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        return pick(self._port), pick(self._ss_port), pick(0)

    def _argv(self, java: str, jars: list[Path], props: Path) -> list[str]:
        assert self._dir is not None
        return [java, f"-Xms{self._heap}", f"-Xmx{self._heap}", f"-XX:MaxDirectMemorySize={self._heap}",
                f"-Djava.io.tmpdir={self._dir / 'tmp'}",
                f"-Dsinglenode.configurationFile={props}",
                f"-Dlog4j.configuration=file:{self._dir / 'log4j.properties'}",
                "-cp", classpath(jars), MAIN_CLASS]

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        self._check_ports()
        java = check_java(self._label)
        jars = await standalone_jars(progress, self._label)
        self._dir = make_data_dir(DATA_PREFIX)
        (self._dir / "tmp").mkdir()
        (self._dir / "log4j.properties").write_text(_LOG4J)
        progress(f"{self._label}: starting Pravega {PRAVEGA_VERSION} standalone (heap {self._heap}, "
                 "streams in memory)")
        wanted = (self._port, self._ss_port)
        for _attempt in range(3):
            port, ss_port, zk_port = self._pick_ports()
            props = self._dir / "standalone.properties"
            published = self.context.advertised.get(SEGMENT_STORE_ENDPOINT)
            props.write_text(standalone_properties(zk_port, port, ss_port, self._broker, published))
            self._written = {**standalone_settings(zk_port, port, ss_port, published), **self._broker}
            log = self._dir / "pravega.out"
            node = self._node = LocalNode(self.NODE, self._argv(java, jars, props), log, cwd=self._dir)
            node.start()  # from the event loop's (main) thread: the death signal is tied to it
            self._port, self._ss_port = port, ss_port
            if await self._wait_started(node, progress, START_TIMEOUT_S):
                return
            text = tail(log, 8)
            node.stop()
            self._node = None
            if any(wanted) or "Address already in use" not in text:
                raise StackError(f"{self._label}: Pravega standalone did not start: "
                                 f"{_last_error(log) or text or 'no output'} (log: {log})")
            self._port, self._ss_port = wanted  # a free port was taken meanwhile: pick again
        raise StackError(f"{self._label}: no free loopback ports for Pravega after 3 tries")

    async def _wait_started(self, node: LocalNode, progress: Progress, timeout_s: float) -> bool:
        """Until the emulator says it runs and both its ports take connections; False if the
        process died."""
        loop = asyncio.get_running_loop()
        started = told = loop.time()
        since = node.log.stat().st_size if node.log.exists() else 0
        while loop.time() - started < timeout_s:
            if not node.running:
                return False
            if _logged_since(node.log, since, READY_LINE):
                try:
                    await probe_tcp("127.0.0.1", self._port, PROBE_TIMEOUT_S)
                    await probe_tcp("127.0.0.1", self._ss_port, PROBE_TIMEOUT_S)
                    return True
                except (OSError, TimeoutError):
                    pass
            if loop.time() - told >= PROGRESS_EVERY_S:
                told = loop.time()
                progress(f"{self._label}: Pravega standalone starting ({loop.time() - started:.0f} s)")
            await asyncio.sleep(0.25)
        raise StackError(f"{self._label}: Pravega standalone did not answer on {self._controller} "
                         f"within {timeout_s:.0f} s (log: {node.log})")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        why = await controller_answers(self._controller, min(timeout_s, PROBE_TIMEOUT_S))
        if why:
            raise StackError(f"{self._label}: the Pravega controller on {self._controller} is not "
                             f"ready: {why}")

    def brokers(self) -> list[str]:
        return [self.NODE]

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        if not await self._wait_started(node, lambda message: None, max(timeout_s, START_TIMEOUT_S)):
            raise StackError(f"{self._label}: the Pravega standalone exited after a start: "
                             f"{_last_error(node.log) or tail(node.log, 3) or 'no output'} "
                             f"(log: {node.log})")

    def down_brokers(self) -> dict[str, str]:
        return nodes_down([self._node] if self._node is not None else [])

    async def _apply_fault(self, action: str, broker: str) -> str:
        if self._node is None:
            raise StackError(f"{self._label}: the Pravega standalone is not running (the stack is not up)")
        detail = await node_fault(self._label, self._node, action, self._node_ready,
                                  ready_timeout_s=START_TIMEOUT_S)
        if action in ("start", "restart"):
            detail += " (streams in memory: it starts empty)"
        return detail

    def log_files(self) -> list[Path]:
        return [self._dir / "pravega.out"] if self._dir is not None else []

    async def down(self) -> None:
        logs = self.log_files()
        node, data_dir, self._node, self._dir = self._node, self._dir, None, None
        await stop_and_remove(node.proc if node is not None else None, data_dir, logs,
                              self.context.log_dir)

    def describe(self) -> StackDescription:
        node = self._node
        return StackDescription(
            runtime="local",
            endpoints={CONTROLLER_ENDPOINT: self._controller,
                       SEGMENT_STORE_ENDPOINT: f"tcp://127.0.0.1:{self._ss_port}"},
            pids=(node.proc.pid,) if node is not None and node.proc is not None and node.running else (),
            version=PRAVEGA_VERSION,
            config={"scope": str(self._target.options["scope"]), "heap": self._heap,
                    "storage": "in-memory (standalone)", "data_dir": str(self._dir)},
            broker_settings=dict(self._written),
        )


def _logged_since(log: Path, offset: int, line: str) -> bool:
    try:
        with log.open("rb") as f:
            f.seek(offset)
            return line.encode() in f.read()
    except OSError:
        return False


def _last_error(log: Path) -> str:
    """The most telling line of a failed start: the last ERROR or exception line."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if " ERROR " in line or "Exception:" in line or line.startswith("Error"):
            return line.strip()[:300]
    return ""


class PravegaDockerStack(ComposeStack):
    """The public standalone image on the host network (compose/pravega.yml): controller,
    segment store and ZooKeeper on loopback ports streambench picks (or the ones given), the
    controller's gRPC server on every interface as in the local runtime."""

    product = "Pravega"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        self._port = 0
        self._ss_port = 0
        self._zk_port = 0
        self._broker = {key: text(value) for key, value in settings_of(target, "broker").items()}

    def files(self) -> list[str]:
        return ["pravega.yml"]

    def _settings(self) -> dict[str, str]:
        return {**standalone_settings(self._zk_port, self._port, self._ss_port), **self._broker}

    def override(self) -> dict[str, dict[str, object]]:
        """The `broker.` settings as -D options after the file's own in PRAVEGA_STANDALONE_OPTS
        (the variable is replaced whole; the start script splits it at white space)."""
        if not self._broker:
            return {}
        odd = sorted(k for k, v in self._broker.items() if not _SHELL_WORD.fullmatch(v))
        if odd:
            raise StackError(f"{self._label}: broker.{odd[0]}={self._broker[odd[0]]!r}: the docker "
                             "runtime passes settings on the start script's command line, which "
                             "splits them at spaces and expands * ? [ ]; use runtime=local for "
                             "such a value")
        opts = " ".join(f"-D{key}={value}" for key, value in self._settings().items())
        return {"pravega": {"environment": {"PRAVEGA_STANDALONE_OPTS": opts}}}

    def written(self, services: dict[str, object]) -> dict[str, str]:
        return self._settings()

    def settings(self) -> dict[str, str]:
        self._port = self.take_port(int(self._target.options.get("port") or 0))
        self._ss_port = self.take_port(int(self._target.options.get("segment_store_port") or 0),
                                       "segment_store_port")
        self._zk_port = self.take_port(0)
        return {"STREAMBENCH_PRAVEGA_PORT": str(self._port),
                "STREAMBENCH_PRAVEGA_SEGMENT_STORE_PORT": str(self._ss_port),
                "STREAMBENCH_PRAVEGA_ZK_PORT": str(self._zk_port),
                "STREAMBENCH_PRAVEGA_HEAP": str(self._target.options["heap"])}

    def brokers(self) -> list[str]:
        return ["pravega"]

    async def probe(self) -> bool:
        """Both the controller and the segment store take connections (on the ports given to
        the standalone through PRAVEGA_STANDALONE_OPTS, see compose/pravega.yml)."""
        for port in (self._port, self._ss_port):
            if await controller_answers(f"tcp://127.0.0.1:{port}", 2.0):
                return False
        self._version = PRAVEGA_VERSION
        return True

    def endpoints(self) -> dict[str, str]:
        return {CONTROLLER_ENDPOINT: f"tcp://127.0.0.1:{self._port}",
                SEGMENT_STORE_ENDPOINT: f"tcp://127.0.0.1:{self._ss_port}"}

    def config(self) -> dict[str, str]:
        return {"scope": str(self._target.options["scope"]), "heap": str(self._target.options["heap"]),
                "storage": "in-memory (standalone)"}


class PravegaExternalStack(Stack):
    runtime = "external"

    def __init__(self, target: Target, label: str) -> None:
        assert target.address is not None
        local_only = sorted(target.explicit & {"heap", "segment_store_port"})
        if local_only:
            raise TargetError(f"target {target.spec!r}: {', '.join(local_only)} apply to a "
                              "standalone streambench starts, not to an existing cluster")
        self._label = label
        self._scope = str(target.options["scope"])
        self._controller = parse_address(target.address)

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing cluster with its controller at {self._controller}")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        why = await controller_answers(self._controller, min(timeout_s, 10.0))
        if why:
            raise StackError(f"{self._label}: cannot reach the Pravega controller at "
                             f"{self._controller}: {why}")

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        return StackDescription(runtime="external", endpoints={CONTROLLER_ENDPOINT: self._controller},
                                config={"scope": self._scope})
