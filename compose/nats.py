"""NATS JetStream stacks: a local nats-server process (JetStream on, its own store dir, client and
monitoring ports on loopback), the same server in a container, or an existing server (external
runtime). `open_connection` is the one way streambench connects to a server: it gives up at the
first refused or failed attempt instead of retrying forever, as the client library would."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.errors import Error as NatsError

from compose.docker import ComposeStack
from compose.gobuild import go_program
from compose.net import connect_failure
from compose.process import (
    LocalNode,
    OneNodeLocalStack,
    free_port,
    make_data_dir,
    port_in_use,
    tail,
)
from loadgen.core.errors import StackError, TargetError
from loadgen.core.settings import settings_of
from loadgen.core.stack import Progress, Stack, StackDescription, announce_runtime
from loadgen.core.target import Target, split_host_port

DATA_PREFIX = "streambench-nats-"
CONTAINER_CONF = "/etc/nats/streambench.conf"  # the docker runtime's mounted settings
GO_MODULE = "github.com/nats-io/nats-server/v2"
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.:+-]+")
# the configuration file settings of nats-server 2.10 (server/opts.go) that 2.9.10 does not know
SINCE_2_10 = frozenset({
    'log_max_num', 'logfile_max_num', 'logtime_utc', 'max_closed_clients',
    'no_fast_producer_stall', 'ocsp_cache', 'prof_block_rate', 'jetstream.prev_ek',
    'jetstream.prev_encryption_key', 'jetstream.prev_key', 'jetstream.request_queue_limit',
    'jetstream.sync', 'jetstream.sync_interval',
})
DEFAULT_PORT = 4222
MONITOR_ENDPOINT = "nats-monitor"  # the key of the monitoring URL in a stack's endpoints
MIN_VERSION = (2, 9)  # JetStream pull consumers with batch + expires, consumer info counters
PROBE_TIMEOUT_S = 2.0
# where Debian puts the server; not on every user's PATH
SERVER_PATHS = ("/usr/sbin/nats-server", "/usr/local/bin/nats-server")

Callback = Callable[[], Awaitable[None]]


class ConnectFailed(Exception):
    """No connection to a NATS server; the reason is in its message."""


def parse_address(address: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    text = address.strip()
    if text.startswith("nats://"):
        text = text[len("nats://"):]
    try:
        return split_host_port(text, default_port)
    except ValueError as exc:
        raise TargetError(f"bad address {address!r}: {exc}; expected HOST:PORT, "
                         "e.g. 127.0.0.1:4222") from None


def endpoint_of(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def open_connection(endpoint: str, name: str, timeout_s: float = 5.0, *,
                          reconnect: bool = True, disconnected: Callback | None = None,
                          reconnected: Callback | None = None) -> NATS:
    """A connection to the server at HOST:PORT, or ConnectFailed at the first failed attempt.

    Once connected, a connection with `reconnect` tries again every half second for as long as
    it is open (a broker killed and started again by a fault gets its clients back)."""
    loop = asyncio.get_running_loop()
    first_error: asyncio.Future[BaseException] = loop.create_future()

    async def on_error(exc: Exception) -> None:
        if not first_error.done():
            first_error.set_result(exc)

    async def on_disconnect() -> None:
        if disconnected is not None:
            await disconnected()

    async def on_reconnect() -> None:
        if reconnected is not None:
            await reconnected()

    connecting: asyncio.Future[NATS] = asyncio.ensure_future(nats.connect(
        f"nats://{endpoint}", name=name, connect_timeout=timeout_s, allow_reconnect=reconnect,
        max_reconnect_attempts=-1 if reconnect else 0, reconnect_time_wait=0.5,
        error_cb=on_error, disconnected_cb=on_disconnect, reconnected_cb=on_reconnect,
        pending_size=8 * 2**20,
        # the subjects are streambench's own (stream names made safe) or the server's (acks):
        # checking each publish's subject again is a tenth of a producer's time
        skip_subject_validation=True))
    either: list[asyncio.Future[Any]] = [connecting, first_error]
    done, _ = await asyncio.wait(either, timeout=timeout_s,
                                 return_when=asyncio.FIRST_COMPLETED)
    if connecting in done and connecting.exception() is None:
        return connecting.result()
    connecting.cancel()
    await asyncio.gather(connecting, return_exceptions=True)
    if first_error.done():
        reason = connect_failure(first_error.result())
    elif connecting.done() and not connecting.cancelled() and connecting.exception() is not None:
        reason = connect_failure(connecting.exception())  # type: ignore[arg-type]
    else:
        reason = f"no answer within {timeout_s:g} s"
    raise ConnectFailed(reason)


async def server_version(endpoint: str, timeout_s: float) -> str:
    """The version of the server at HOST:PORT once JetStream answers; ConnectFailed when the
    server cannot be reached, StackError when JetStream is off."""
    nc = await open_connection(endpoint, "streambench-probe", timeout_s, reconnect=False)
    try:
        try:
            await nc.jsm().account_info()
        except (NatsError, TimeoutError) as exc:
            raise StackError(f"the NATS server at {endpoint} has JetStream off or not ready "
                             f"({type(exc).__name__}); start it with -js") from None
        return version_text(nc)
    finally:
        await nc.close()


def version_text(nc: NATS) -> str:
    """`2.9.10` of the server a connection reached (the client shows `<nats server v2.9.10>`)."""
    found = re.search(r"\d+\.\d+\.\d+[\w.+-]*", str(nc.connected_server_version))
    return found.group(0) if found else ""


def check_version(version: str, where: str) -> None:
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if parts and parts < MIN_VERSION:
        raise StackError(f"{where} runs NATS {version}; streambench needs nats-server 2.9 or newer")


def _monitor_answers(url: str, timeout_s: float) -> None:
    with urllib.request.urlopen(f"{url}/varz", timeout=timeout_s) as response:
        json.loads(response.read())


def find_server() -> str | None:
    found = shutil.which("nats-server")
    if found:
        return found
    return next((p for p in SERVER_PATHS if os.access(p, os.X_OK)), None)


@dataclass(frozen=True)
class NatsServerOptions:
    """The server settings of a NATS target, typed once from its options."""

    port: int  # 0: a free loopback port
    max_memory: str  # JetStream memory store limit, e.g. 1G
    max_file: str  # JetStream file store limit
    version: str | None = None  # a release to build with Go; None: the installed server
    # `broker.` settings: NAME or jetstream.NAME -> value as written
    settings: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, target: Target) -> NatsServerOptions:
        o = target.options
        return cls(int(o.get("port") or 0), str(o.get("max_memory") or "1G"),
                   str(o.get("max_file") or "10G"), o.get("version") or None,
                   tuple((k, str(v)) for k, v in settings_of(target, "broker").items()))

    def written(self, limits: bool = True) -> dict[str, str]:
        """What streambench writes into the configuration file, NAME or jetstream.NAME ->
        value: its own JetStream limits (unless not `limits`), then the `broker.` settings."""
        own = ({"jetstream.max_memory_store": self.max_memory,
                "jetstream.max_file_store": self.max_file} if limits else {})
        return {**own, **dict(self.settings)}

    def config_file(self, limits: bool = True) -> str:
        """The settings the command line has no flag for (the rest are flags: see argv)."""
        top: list[str] = []
        block: list[str] = []
        for name, value in self.written(limits).items():
            space, _, rest = name.partition(".")
            if space == "jetstream" and rest:
                block.append(f"  {rest}: {config_value(value)}\n")
            else:
                top.append(f"{name}: {config_value(value)}\n")
        return "".join(top) + "jetstream {\n" + "".join(block) + "}\n"

    def too_new(self, version: str) -> list[str]:
        """The `broker.` settings a server of `version` does not know."""
        if _release(version) >= (2, 10):
            return []
        return [name for name, _ in self.settings if name in SINCE_2_10]


def config_value(text: str) -> str:
    """A setting's value as the configuration file takes it: as it is when it is a number, a
    size (8MB), a duration (2m) or a word, else as a quoted string."""
    return text if _PLAIN_VALUE.fullmatch(text) else json.dumps(text)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:2])


def installed_version(binary: str) -> str:
    """`2.9.10` of a nats-server program (it prints `nats-server: v2.9.10`), or ""."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    found = re.search(r"\d+\.\d+\.\d+", out)
    return found.group(0) if found else ""


class NatsLocalStack(OneNodeLocalStack):
    NODE = "nats"
    SERVER = "nats-server"
    LOGS = ("nats.log", "nats.stdout")

    def __init__(self, target: Target, label: str) -> None:
        self._target = target
        self._label = label
        self._opts = NatsServerOptions.of(target)
        self._node: LocalNode | None = None
        self._dir: Path | None = None
        self._port = self._opts.port
        self._monitor_port = 0
        self._version = ""

    def _endpoint(self) -> str:
        return f"127.0.0.1:{self._port}"

    def _argv(self, binary: str, data: Path) -> list[str]:
        # JetStream on with its store in the run's data dir, clients and monitoring on loopback
        return [binary, "-c", str(data / "nats.conf"), "-js", "-sd", str(data / "store"),
                "-a", "127.0.0.1", "-p", str(self._port), "-m", str(self._monitor_port),
                "-l", str(data / "nats.log")]

    async def _binary(self, progress: Progress) -> str:
        """The nats-server program to run: the release asked for (built once), else the
        installed one; StackError when a `broker.` setting is newer than that server."""
        if self._opts.version:
            binary = str(await go_program("nats-server", GO_MODULE, self._opts.version,
                                          "nats-server", progress))
        else:
            found = find_server()
            if found is None:
                raise StackError("nats-server not found: install it (Debian/Ubuntu: apt-get "
                                 "install nats-server), build one with nats:version=X.Y.Z or "
                                 "point the target at a server with nats@HOST:PORT")
            binary = found
        version = await asyncio.to_thread(installed_version, binary)
        if missing := self._opts.too_new(version):
            raise StackError(f"{self._label}: nats-server {version} has no setting "
                             f"{', '.join(missing)} (nats-server 2.10 or newer has): add "
                             "nats:version=2.10.27 to build one with Go")
        return binary

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        binary = await self._binary(progress)
        if self._port and port_in_use(self._port):
            raise StackError(f"port {self._port} on 127.0.0.1 is already in use; choose another "
                             f"with {self._target.platform}:port=N or leave port unset")
        self._dir = make_data_dir(DATA_PREFIX)
        progress(f"{self._label}: starting nats-server (JetStream)")
        for _attempt in range(3):
            self._port = self._opts.port or free_port()
            self._monitor_port = free_port()
            (self._dir / "nats.conf").write_text(self._opts.config_file())
            node = self._node = LocalNode(self.NODE, self._argv(binary, self._dir),
                                          self._dir / "nats.stdout")
            node.start()
            if await self._wait_ready(node, 15.0):
                return
            log = self._log(node)
            node.stop()
            self._node = None
            if self._opts.port or "address already in use" not in log.lower():
                raise StackError(f"{self._label}: nats-server did not start: {log or 'no output'}")
        raise StackError(f"{self._label}: no free loopback port for nats-server after 3 tries")

    def _log(self, node: LocalNode) -> str:
        assert self._dir is not None
        return tail(self._dir / "nats.log") or tail(node.log)

    async def _wait_ready(self, node: LocalNode, timeout_s: float) -> bool:
        """True once the server answers and JetStream with it; False when it exited or the
        time is up."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not node.running:
                return False
            try:
                self._version = await server_version(self._endpoint(), PROBE_TIMEOUT_S)
                return True
            except (ConnectFailed, StackError):
                await asyncio.sleep(0.1)
        return False

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await server_version(self._endpoint(), timeout_s)
        except ConnectFailed as exc:
            raise StackError(f"{self._label}: nats-server on port {self._port} does not answer: "
                             f"{exc}") from None
        check_version(self._version, "the local nats-server")

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        if not await self._wait_ready(node, timeout_s):
            raise StackError(f"{self._label}: nats-server did not answer on port {self._port} "
                             f"after a start: {self._log(node) or 'no output'}")

    def describe(self) -> StackDescription:
        pid = self._node.pid if self._node is not None and self._node.running else None
        return StackDescription(
            runtime="local",
            endpoints={"nats": self._endpoint(),
                       MONITOR_ENDPOINT: f"http://127.0.0.1:{self._monitor_port}"},
            pids=(pid,) if pid is not None else (),
            version=self._version,
            config={"jetstream_max_memory": self._opts.max_memory,
                    "jetstream_max_file": self._opts.max_file, "data_dir": str(self._dir)},
            broker_settings=self._opts.written(),
        )


class NatsDockerStack(ComposeStack):
    """nats-server in a container on the host network, JetStream on, both ports on loopback."""

    product = "NATS"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
        self._opts = NatsServerOptions.of(target)
        self._port = 0
        self._monitor_port = 0

    def files(self) -> list[str]:
        return ["nats.yml"]

    def settings(self) -> dict[str, str]:
        self._port = self.take_port(self._opts.port)
        self._monitor_port = self.take_port(0)
        return {"STREAMBENCH_NATS_PORT": str(self._port),
                "STREAMBENCH_NATS_MONITOR_PORT": str(self._monitor_port)}

    def brokers(self) -> list[str]:
        return ["nats"]

    async def probe(self) -> bool:
        try:
            self._version = await server_version(f"127.0.0.1:{self._port}", PROBE_TIMEOUT_S)
        except (ConnectFailed, StackError):
            return False
        return True

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            await super().ready(timeout_s, progress)
        except StackError as exc:
            newer = self._opts.too_new("2.9")
            if newer and "unknown field" in str(exc):
                raise StackError(f"{exc} ({', '.join(newer)}: nats-server 2.10 or newer; set "
                                 "STREAMBENCH_IMAGE_NATS to such an image, or use runtime=local "
                                 "with version=2.10.27)") from None
            raise
        check_version(self._version, f"the image {self._images.get('nats')}")

    def endpoints(self) -> dict[str, str]:
        return {"nats": f"127.0.0.1:{self._port}",
                MONITOR_ENDPOINT: f"http://127.0.0.1:{self._monitor_port}"}

    def config(self) -> dict[str, str]:
        return {"jetstream_limits": "server defaults"}

    def override(self) -> dict[str, dict[str, object]]:
        """The `broker.` settings in a configuration file mounted into the container, read with
        -c after the file's own flags (which win over it; none of them can be a setting)."""
        if not self._opts.settings:
            return {}
        conf = self.scratch_dir() / "nats.conf"
        conf.write_text(self._opts.config_file(limits=False))
        conf.chmod(0o644)
        return {"nats": {
            "command": ["-js", "-sd", "/data", "-a", "127.0.0.1", "-p", str(self._port),
                        "-m", str(self._monitor_port), "-c", CONTAINER_CONF],
            "volumes": [f"{conf}:{CONTAINER_CONF}:ro"]}}

    def written(self, services: dict[str, object]) -> dict[str, str]:
        return self._opts.written(limits=False)


class NatsExternalStack(Stack):
    runtime = "external"

    def __init__(self, target: Target, label: str) -> None:
        assert target.address is not None
        self._label = label
        self._host, self._port = parse_address(target.address)
        self._monitor = str(target.options.get("monitor") or "")
        self._version = ""

    def _endpoint(self) -> str:
        return endpoint_of(self._host, self._port)

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing server at {self._endpoint()}")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await server_version(self._endpoint(), min(timeout_s, 10.0))
        except ConnectFailed as exc:
            raise StackError(f"{self._label}: cannot reach NATS at {self._endpoint()}: {exc}") from None
        check_version(self._version, self._endpoint())
        if self._monitor:
            try:
                await asyncio.to_thread(_monitor_answers, self._monitor, 5.0)
            except (OSError, ValueError, urllib.error.URLError) as exc:
                raise StackError(f"{self._label}: the monitoring endpoint {self._monitor} does not "
                                 f"answer: {connect_failure(exc)}") from None

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        endpoints = {"nats": self._endpoint()}
        if self._monitor:
            endpoints[MONITOR_ENDPOINT] = self._monitor
        return StackDescription(runtime="external", endpoints=endpoints, version=self._version)
