"""Redis stacks: a local redis-server process, or an existing server (external runtime)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from compose.process import (
    free_port,
    port_in_use,
    remove_stale_dirs,
    start_process,
    stop_and_remove,
    stop_process,
    tail,
)
from compose.stack import Progress, Stack, StackDescription
from loadgen.errors import StackError
from loadgen.target import Target

DATA_PREFIX = "streambench-redis-"
MIN_VERSION = (7, 0)  # XINFO GROUPS reports `lag` from 7.0 on


def parse_address(address: str, default_port: int = 6379) -> tuple[str, int]:
    host, sep, port_text = address.rpartition(":")
    if not sep:
        return address, default_port
    host = host.strip("[]")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise StackError(f"bad address {address!r}: expected HOST:PORT, e.g. 127.0.0.1:6379")
    return host or "127.0.0.1", int(port_text)


async def ping(host: str, port: int, timeout_s: float) -> str:
    """Version of the redis server at host:port; raises OSError/RedisError when unreachable."""
    conn = aioredis.Redis(host=host, port=port, socket_connect_timeout=timeout_s,
                          socket_timeout=timeout_s, decode_responses=True)
    try:
        await conn.ping()
        info = await conn.info("server")
        return str(info.get("redis_version", ""))
    finally:
        await conn.aclose()


def connect_failure(exc: BaseException) -> str:
    """A short reason for a failed connection, without the client library's noise."""
    text = str(exc)
    if "refused" in text or "111" in text:
        return "connection refused (nothing listens there?)"
    if isinstance(exc, TimeoutError) or "imed out" in text:
        return "timed out"
    if "Name or service not known" in text or "resolve" in text:
        return "unknown host"
    return text.split(". ")[0] or type(exc).__name__


def _check_version(version: str, where: str) -> None:
    parts = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if parts and parts < MIN_VERSION:
        raise StackError(f"{where} runs Redis {version}; streambench needs Redis 7.0 or newer "
                         "(consumer-group lag)")


class RedisLocalStack(Stack):
    runtime = "local"

    def __init__(self, target: Target, label: str) -> None:
        self._target = target
        self._label = label
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self._port = int(target.options.get("port") or 0)
        self._version = ""

    def _argv(self, binary: str, port: int, data: Path) -> list[str]:
        opts = self._target.options
        argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                "--save", "", "--daemonize", "no", "--protected-mode", "yes",
                "--logfile", str(data / "redis.log")]
        if opts.get("aof"):
            argv += ["--appendonly", "yes", "--appendfsync", str(opts.get("fsync") or "everysec")]
        else:
            argv += ["--appendonly", "no"]
        return argv

    async def up(self, progress: Progress) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise StackError("redis-server not found: install it (Debian/Ubuntu: apt-get install "
                             "redis-server) or point the target at a server with redis@HOST:PORT")
        if self._port and port_in_use(self._port):
            raise StackError(f"port {self._port} on 127.0.0.1 is already in use; choose another "
                             f"with {self._target.platform}:port=N or leave port unset")
        remove_stale_dirs(DATA_PREFIX)
        self._dir = Path(tempfile.mkdtemp(prefix=f"{DATA_PREFIX}{os.getpid()}-"))
        progress(f"{self._label}: starting redis-server")
        for _attempt in range(3):
            port = self._port or free_port()
            self._proc = start_process(self._argv(binary, port, self._dir),
                                       self._dir / "redis.stdout")
            if await self._wait_listening(port, 10.0):
                self._port = port
                return
            log = tail(self._dir / "redis.log") or tail(self._dir / "redis.stdout")
            stop_process(self._proc)
            self._proc = None
            if self._target.options.get("port") or "Address already in use" not in log:
                raise StackError(f"{self._label}: redis-server did not start: {log or 'no output'}")
        raise StackError(f"{self._label}: no free loopback port for redis-server after 3 tries")

    async def _wait_listening(self, port: int, timeout_s: float) -> bool:
        assert self._proc is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            if self._proc.poll() is not None:
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
        _check_version(self._version, "the local redis-server")

    async def down(self) -> None:
        proc, data_dir, self._proc, self._dir = self._proc, self._dir, None, None
        logs = [data_dir / "redis.log", data_dir / "redis.stdout"] if data_dir is not None else []
        await stop_and_remove(proc, data_dir, logs, self.context.log_dir)

    def describe(self) -> StackDescription:
        opts = self._target.options
        config = {"appendonly": "yes" if opts.get("aof") else "no", "data_dir": str(self._dir)}
        if opts.get("aof"):
            config["appendfsync"] = str(opts.get("fsync") or "everysec")
        return StackDescription(
            runtime="local",
            endpoints={"redis": f"127.0.0.1:{self._port}"},
            pids=(self._proc.pid,) if self._proc is not None else (),
            version=self._version,
            config=config,
        )


class RedisExternalStack(Stack):
    runtime = "external"

    def __init__(self, target: Target, label: str) -> None:
        assert target.address is not None
        self._label = label
        self._host, self._port = parse_address(target.address)
        self._version = ""

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing server at {self._host}:{self._port}")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        try:
            self._version = await asyncio.wait_for(ping(self._host, self._port, 5.0), timeout_s)
        except (OSError, RedisError, TimeoutError) as exc:
            reason = connect_failure(exc)
            raise StackError(f"{self._label}: cannot reach redis at {self._host}:{self._port}: "
                             f"{reason}") from None
        _check_version(self._version, f"{self._host}:{self._port}")

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        return StackDescription(runtime="external",
                                endpoints={"redis": f"{self._host}:{self._port}"},
                                version=self._version)
