"""Redis stacks: a local redis-server process, or an existing server (external runtime)."""

from __future__ import annotations

import asyncio
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from compose.docker import DOCKER_PROBE_TIMEOUT_S, ComposeStack
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
from loadgen.core.security import PLAINTEXT, ClientSecurity
from loadgen.core.settings import settings_of
from loadgen.core.stack import Progress, Stack, StackDescription, announce_runtime
from loadgen.core.target import Target, join_host_port, split_host_port

DATA_PREFIX = "streambench-redis-"
MIN_VERSION = (7, 0)  # XINFO GROUPS reports `lag` from 7.0 on
# a server streambench starts takes a connection per consumer and producer: 10,000
# subscriptions (the workload's maximum) need more than Redis's default of 10,000 clients. The
# server lowers it to what its limit of open files allows (and says so in its log); each client
# it could take costs it about 50 bytes
MAX_CLIENTS = "32768"


def parse_address(address: str, default_port: int = 6379) -> tuple[str, int]:
    try:
        return split_host_port(address, default_port)
    except ValueError as exc:
        raise TargetError(f"bad address {address!r}: {exc}; expected HOST:PORT, "
                         "e.g. 127.0.0.1:6379") from None


async def ping(host: str, port: int, timeout_s: float,
               security: ClientSecurity = PLAINTEXT) -> str:
    """Version of the redis server at host:port; raises OSError/RedisError when unreachable."""
    # one attempt: redis-py's default retries would wait out a TLS handshake with a plaintext
    # port several times over
    conn = aioredis.Redis(host=host, port=port, socket_connect_timeout=timeout_s,
                          socket_timeout=timeout_s, decode_responses=True,
                          retry=Retry(NoBackoff(), 0), **security.redis_kwargs())
    try:
        await conn.ping()
        info = await conn.info("server")
        return str(info.get("redis_version", ""))
    finally:
        await conn.aclose()


def check_version(version: str, where: str) -> None:
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if parts and parts < MIN_VERSION:
        raise StackError(f"{where} runs Redis {version}; streambench needs Redis 7.0 or newer "
                         "(consumer-group lag)")


@dataclass(frozen=True)
class RedisServerOptions:
    """The server settings of a Redis target, typed once from its options."""

    aof: bool
    fsync: str  # appendfsync: everysec | always | no (with aof)
    port: int  # 0: a free loopback port
    # `conf.` settings: redis-server directives over streambench's own, (name, value)
    conf: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, target: Target) -> RedisServerOptions:
        o = target.options
        conf = tuple((k, str(v)) for k, v in settings_of(target, "conf").items())
        return cls(bool(o.get("aof")), str(o.get("fsync") or "everysec"), int(o.get("port") or 0),
                   conf)

    def directives(self) -> dict[str, str]:
        """The persistence directives streambench sets, then the `conf.` settings."""
        own = {"appendonly": "yes", "appendfsync": self.fsync} if self.aof else {"appendonly": "no"}
        return {**own, **dict(self.conf)}

    def argv(self) -> list[str]:
        return [arg for name, value in self.directives().items() for arg in (f"--{name}", value)]

    def describe(self) -> dict[str, str]:
        config = {"appendonly": "yes" if self.aof else "no"}
        if self.aof:
            config["appendfsync"] = self.fsync
        return config


class RedisLocalStack(OneNodeLocalStack):
    NODE = "redis"
    SERVER = "redis-server"
    LOGS = ("redis.log", "redis.stdout")

    def __init__(self, target: Target, label: str) -> None:
        self._target = target
        self._label = label
        self._node: LocalNode | None = None
        self._dir: Path | None = None
        self._opts = RedisServerOptions.of(target)
        self._port = self._opts.port
        self._version = ""

    def _argv(self, binary: str, port: int, data: Path) -> list[str]:
        return [binary, *(arg for name, value in self._own(port, data).items()
                          for arg in (f"--{name}", value)), *self._opts.argv()]

    @staticmethod
    def _own(port: int, data: Path) -> dict[str, str]:
        return {"port": str(port), "bind": "127.0.0.1", "dir": str(data), "save": "",
                "daemonize": "no", "protected-mode": "yes", "logfile": str(data / "redis.log"),
                "maxclients": MAX_CLIENTS}

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        binary = shutil.which("redis-server")
        if binary is None:
            raise StackError("redis-server not found: install it (Debian/Ubuntu: apt-get install "
                             "redis-server) or point the target at a server with redis@HOST:PORT")
        if self._port and port_in_use(self._port):
            raise StackError(f"port {self._port} on 127.0.0.1 is already in use; choose another "
                             f"with {self._target.platform}:port=N or leave port unset")
        self._dir = make_data_dir(DATA_PREFIX)
        progress(f"{self._label}: starting redis-server")
        for _attempt in range(3):
            port = self._port or free_port()
            node = self._node = LocalNode(self.NODE, self._argv(binary, port, self._dir),
                                          self._dir / "redis.stdout")
            node.start()
            if await self._wait_listening(node, port, 10.0):
                self._port = port
                return
            log = tail(self._dir / "redis.log") or tail(node.log)
            node.stop()
            self._node = None
            if self._opts.port or "Address already in use" not in log:
                raise StackError(f"{self._label}: redis-server did not start: {log or 'no output'}")
        raise StackError(f"{self._label}: no free loopback port for redis-server after 3 tries")

    async def _wait_listening(self, node: LocalNode, port: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if not node.running:
                return False
            try:
                self._version = await ping("127.0.0.1", port, 1.0)
                return True
            except (OSError, RedisError):
                await asyncio.sleep(0.05)
        return False

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await ping("127.0.0.1", self._port, timeout_s)
        except (OSError, RedisError) as exc:
            raise StackError(f"{self._label}: redis-server on port {self._port} does not answer "
                             f"PING: {exc}") from None
        check_version(self._version, "the local redis-server")

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        if not await self._wait_listening(node, self._port, timeout_s):
            assert self._dir is not None
            log = tail(self._dir / "redis.log") or tail(node.log)
            raise StackError(f"{self._label}: redis-server did not answer on port {self._port} "
                             f"after a start: {log or 'no output'}")

    def describe(self) -> StackDescription:
        config = {**self._opts.describe(), "data_dir": str(self._dir)}
        pid = self._node.pid if self._node is not None and self._node.running else None
        return StackDescription(
            runtime="local",
            endpoints={"redis": f"127.0.0.1:{self._port}"},
            pids=(pid,) if pid is not None else (),
            version=self._version,
            config=config,
            broker_settings=({**self._own(self._port, self._dir), **self._opts.directives()}
                             if self._dir is not None else self._opts.directives()),
        )


class RedisExternalStack(Stack):
    runtime = "external"

    def __init__(self, target: Target, label: str) -> None:
        assert target.address is not None
        self._label = label
        self._host, self._port = parse_address(target.address)
        self._where = join_host_port(self._host, self._port)
        self._security = ClientSecurity.of(target)
        self._version = ""

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing server at {self._where}")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await asyncio.wait_for(ping(self._host, self._port, 5.0, self._security),
                                                   timeout_s)
        except (OSError, RedisError, TimeoutError) as exc:
            reason = connect_failure(exc, tls=self._security.tls is not None)
            raise StackError(f"{self._label}: cannot reach redis at {self._where}: "
                             f"{reason}") from None
        check_version(self._version, self._where)

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        return StackDescription(runtime="external",
                                endpoints={"redis": self._where},
                                version=self._version)

# ---- the docker runtime ---------------------------------------------------------------------

class RedisDockerStack(ComposeStack):
    product = "redis"

    def __init__(self, target: Target, label: str) -> None:
        super().__init__(target, label)
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
        return {"port": str(self._port), "bind": "127.0.0.1", "dir": "/data", "save": "",
                "maxclients": MAX_CLIENTS}

    def override(self) -> dict[str, dict[str, object]]:
        """The `conf.` directives after the file's own arguments (the command is replaced whole)."""
        if not self._opts.conf:
            return {}
        own = [arg for name, value in self._own().items() for arg in (f"--{name}", value)]
        return {"redis": {"command": ["redis-server", *own, *self._opts.argv()]}}

    def written(self, services: dict[str, object]) -> dict[str, str]:
        return {**self._own(), **self._opts.directives()}

    async def probe(self) -> bool:
        try:
            self._version = await ping("127.0.0.1", self._port, DOCKER_PROBE_TIMEOUT_S)
        except (OSError, RedisError, TimeoutError):
            return False
        return True

    async def ready(self, timeout_s: float, progress: Progress) -> None:
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
