"""Pulsar stacks: a Pulsar standalone (broker, in-process BookKeeper, RocksDB metadata) from
the release's binary distribution on Maven Central, started by the release's own `bin/pulsar
standalone` on a local Java 17; or an existing cluster given by its service and admin URLs.

The distribution is fetched once into the streambench cache and unpacked next to it. Each local
standalone gets free loopback ports, a config derived from the release's conf/standalone.conf,
and a temp dir for its data and logs that down() removes.

The admin REST API (stdlib urllib, run in a worker thread) serves readiness, topic creation and
the collector: pulsar-client has no admin API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from compose.docker import DOCKER_PROBE_TIMEOUT_S, ComposeStack
from compose.java import find_java, heap_megabytes, java_major
from compose.maven import Coordinate, assemble, cache_dir
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
from loadgen.core.security import PLAINTEXT, ClientSecurity
from loadgen.core.settings import settings_of, text
from loadgen.core.stack import Progress, Stack, StackDescription, announce_runtime
from loadgen.core.target import Target

PULSAR_VERSION = "4.0.8"
DISTRIBUTION = Coordinate("org.apache.pulsar", "pulsar-server-distribution", PULSAR_VERSION,
                          "tar.gz", "bin")
DATA_PREFIX = "streambench-pulsar-"
# StackDescription.endpoints keys (the docker runtime's stack uses the same)
ADMIN_ENDPOINT = "pulsar-admin"
JAVA_MIN = 17
CLUSTER = "standalone"
STOCK_NAMESPACE = "public/default"  # what a standalone creates
# the advertised listener a client names to be handed the proxy in front of the standalone
# (network faults; StackDescription.config["client_listener"])
CLIENT_LISTENER = "clients"
DEFAULT_SERVICE_PORT = 6650
DEFAULT_ADMIN_PORT = 8080
START_TIMEOUT_S = 240.0
PROGRESS_EVERY_S = 5.0
_UNPACKED = ".streambench-complete"
_PROBE_TOPIC = "streambench-ready-probe"


class AdminError(Exception):
    """The admin REST API answered with an HTTP error; `reason` is Pulsar's own text."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status
        self.reason = reason


class PulsarAdmin:
    """The few admin REST calls streambench needs. Each runs urllib in a worker thread, so a
    slow broker never stalls the event loop."""

    def __init__(self, url: str, timeout_s: float = 10.0,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.url = url.rstrip("/")
        self._timeout_s = timeout_s
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if security.token is not None:
            self._headers["Authorization"] = f"Bearer {security.token.reveal()}"
        self._tls = security.ssl_context() if self.url.startswith("https://") else None

    def _call(self, method: str, path: str, body: Any) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s,
                                        context=self._tls) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise AdminError(exc.code, _reason(exc)) from None
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError:  # e.g. brokers/version: a bare version labelled application/json
            return text.decode(errors="replace")

    async def get(self, path: str) -> Any:
        return await asyncio.to_thread(self._call, "GET", path, None)

    async def put(self, path: str, body: Any = None) -> None:
        await asyncio.to_thread(self._call, "PUT", path, body)

    async def delete(self, path: str) -> None:
        await asyncio.to_thread(self._call, "DELETE", path, None)

    async def version(self) -> str:
        return str(await self.get("/admin/v2/brokers/version"))


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("reason") or exc.reason)
    except (ValueError, AttributeError, OSError):
        return str(exc.reason)


def unreachable(exc: BaseException) -> str:
    """A short reason for a failed admin call."""
    if isinstance(exc, AdminError):
        if exc.status == 401:
            return (f"the admin API refused the credentials (HTTP 401: {exc.reason}); give a "
                    "valid token with token_file= or token_env=")
        if exc.status == 403:
            return f"the token's role may not do this (HTTP 403: {exc.reason})"
        return exc.reason
    return connect_failure(exc)


def topic_path(persistent: bool, namespace: str, topic: str) -> str:
    """`persistent/public/default/<topic>`, as the admin API's paths spell a topic."""
    return f"{'persistent' if persistent else 'non-persistent'}/{namespace}/{topic}"


def topic_name(persistent: bool, namespace: str, topic: str) -> str:
    """`persistent://public/default/<topic>`, as clients spell it."""
    return f"{'persistent' if persistent else 'non-persistent'}://{namespace}/{topic}"


# ---- addresses ------------------------------------------------------------------------------

_SERVICE_SCHEMES = ("pulsar", "pulsar+ssl")
_ADMIN_SCHEMES = ("http", "https")


def parse_address(address: str) -> tuple[str, str]:
    """`pulsar://HOST:6650,http://HOST:8080` (either part may be left out; the other then
    defaults to the same host on the standard port) -> (service URL, admin URL)."""
    service = admin = None
    for item in filter(None, (a.strip() for a in address.split(","))):
        parts = urllib.parse.urlsplit(item)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if not parts.hostname or port == -1 or parts.path not in ("", "/"):
            raise TargetError(f"bad Pulsar address {item!r}: expected pulsar://HOST:PORT and/or "
                              "http://HOST:PORT, e.g. pulsar@pulsar://127.0.0.1:6650,http://127.0.0.1:8080")
        if parts.scheme in _SERVICE_SCHEMES and service is None:
            service = f"{parts.scheme}://{parts.netloc}"
        elif parts.scheme in _ADMIN_SCHEMES and admin is None:
            admin = f"{parts.scheme}://{parts.netloc}"
        else:
            raise TargetError(f"bad Pulsar address {address!r}: give one pulsar:// service URL and "
                              "one http:// admin URL, separated by a comma")
    if service is None and admin is None:
        raise TargetError(f"bad Pulsar address {address!r}: expected pulsar://HOST:PORT,http://HOST:PORT")
    if service is None:
        assert admin is not None
        service = f"pulsar://{_netloc(urllib.parse.urlsplit(admin).hostname)}:{DEFAULT_SERVICE_PORT}"
    if admin is None:
        admin = f"http://{_netloc(urllib.parse.urlsplit(service).hostname)}:{DEFAULT_ADMIN_PORT}"
    return service, admin


def _netloc(host: str | None) -> str:
    host = host or "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def host_port(url: str, default: int) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default


# ---- options --------------------------------------------------------------------------------

def parse_namespace(text: str) -> str:
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", text):
        raise ValueError("expected TENANT/NAMESPACE, e.g. public/default")
    return text


@dataclass(frozen=True)
class PulsarTargetConfig:
    """What the run files record about a Pulsar target (labels for the report)."""

    persistent: bool
    subscription: str
    batching: bool
    batch_max_messages: int
    batch_max_bytes: int
    batch_delay_ms: int
    namespace: str
    # `producer.` / `consumer.` settings: keyword arguments of create_producer / subscribe,
    # over streambench's own
    producer: tuple[tuple[str, Any], ...] = ()
    consumer: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, target: Target) -> PulsarTargetConfig:
        o = target.options
        producer = settings_of(target, "producer")
        return cls(bool(o["persistent"]), str(o["subscription"]),
                   bool(producer.get("batching_enabled", o["batching"])),
                   int(producer.get("batching_max_messages", o["batch_max_messages"])),
                   int(producer.get("batching_max_allowed_size_in_bytes", o["batch_max_bytes"])),
                   int(producer.get("batching_max_publish_delay_ms", o["batch_delay_ms"])),
                   str(o["namespace"]), tuple(producer.items()),
                   tuple(settings_of(target, "consumer").items()))

    def describe(self) -> dict[str, str]:
        config = {
            "persistent": "true" if self.persistent else "false",
            "topic_domain": "persistent" if self.persistent else "non-persistent",
            "subscription_type": self.subscription,
            "batching": "true" if self.batching else "false",
            "namespace": self.namespace,
        }
        if self.batching:
            config.update(batch_max_messages=str(self.batch_max_messages),
                          batch_max_bytes=str(self.batch_max_bytes),
                          batch_delay_ms=str(self.batch_delay_ms))
        return config


# ---- the distribution -----------------------------------------------------------------------

def _unpack(archive: Path, home: Path) -> None:
    """Unpack the release archive into `home` (atomically: a partial unpack never counts)."""
    root = home.parent
    for stale in root.glob(f".{home.name}.unpack-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    work = root / f".{home.name}.unpack-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
        (unpacked,) = [p for p in work.iterdir() if p.is_dir()]
        (unpacked / _UNPACKED).write_text(PULSAR_VERSION)
        # another streambench may have finished first (keep its copy: it may be running it);
        # what stands there without the marker is an interrupted unpack
        if not (home / _UNPACKED).is_file():
            shutil.rmtree(home, ignore_errors=True)
            try:
                unpacked.rename(home)
            except OSError:
                if not (home / _UNPACKED).is_file():
                    raise
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise StackError(f"cannot unpack the Pulsar distribution {archive}: {exc}") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)


async def distribution(progress: Progress, label: str) -> Path:
    """The unpacked Pulsar release (bin/, conf/, lib/), fetched from Maven Central on first use."""
    home = cache_dir() / "pulsar" / f"apache-pulsar-{PULSAR_VERSION}"
    if (home / _UNPACKED).is_file():
        return home
    name = f"pulsar-{PULSAR_VERSION}-distribution"

    def tell(message: str) -> None:
        progress(f"{label}: {message}")

    await assemble(name, [str(DISTRIBUTION)], tell, what=f"Pulsar {PULSAR_VERSION}")
    archive = cache_dir() / "jars" / name / DISTRIBUTION.file_name
    if not archive.is_file():
        raise StackError(f"the Pulsar distribution is missing from {archive.parent}; remove that "
                         "directory so that the next run fetches it again")
    tell(f"unpacking Pulsar {PULSAR_VERSION} into {home} (first use only)")
    await asyncio.to_thread(_unpack, archive, home)
    return home


def check_java(label: str) -> str:
    java = find_java()
    major = java_major(java)
    if major < JAVA_MIN:
        raise StackError(f"{label}: {java} is Java {major}; Pulsar {PULSAR_VERSION} needs Java "
                         f"{JAVA_MIN} or newer: install openjdk-17-jre-headless or point JAVA_HOME "
                         "at a newer Java")
    return java


def standalone_conf(stock: str, overrides: dict[str, str]) -> str:
    """The release's standalone.conf with `overrides` replacing (or appended to) its keys."""
    lines = []
    seen = set()
    for line in stock.splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)=", line)
        if m and m.group(1) in overrides:
            key = m.group(1)
            line = f"{key}={overrides[key]}"
            seen.add(key)
        lines.append(line)
    lines += ["", "# streambench"] + [f"{k}={v}" for k, v in overrides.items() if k not in seen]
    return "\n".join(lines) + "\n"


# ---- stacks ---------------------------------------------------------------------------------

# the broker's stats periods on the standalone streambench starts (a `broker.` setting overrides)
STATS_EVERY_SECOND = {"statsUpdateFrequencyInSecs": "1", "statsUpdateInitialDelayInSecs": "1",
                      "managedLedgerStatsPeriodSeconds": "1"}


class PulsarLocalStack(Stack):
    """One Pulsar standalone on 127.0.0.1: broker service and admin (web service) on free ports
    (or the ones given), the in-process bookie bound to loopback, function worker off."""

    runtime = "local"
    NODE = "pulsar"  # the fault hooks' name of the standalone

    def __init__(self, target: Target, label: str) -> None:
        opts = target.options
        self._target = target
        self._label = label
        self._config = PulsarTargetConfig.of(target)
        self._heap = str(opts["heap"])
        self._fsync = bool(opts["fsync"])
        self._port = int(opts.get("port") or 0)
        self._admin_port = int(opts.get("admin_port") or 0)
        self._node: LocalNode | None = None
        self._dir: Path | None = None
        self._version = ""
        self._written: dict[str, str] = {}  # what the standalone.conf sets over the stock one

    @property
    def _service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self._port}"

    @property
    def _admin_url(self) -> str:
        return f"http://127.0.0.1:{self._admin_port}"

    def _check_ports(self) -> None:
        for value, option in ((self._port, "port"), (self._admin_port, "admin_port")):
            if value and port_in_use(value):
                raise StackError(f"port {value} on 127.0.0.1 is already in use; choose another with "
                                 f"{self._target.platform}:{option}=N or leave {option} unset")
        if self._port and self._port == self._admin_port:
            raise StackError("port and admin_port must differ")

    def _pick_ports(self) -> tuple[int, int]:
        port = self._port or free_port()
        admin = self._admin_port or free_port()
        while admin == port:
            admin = free_port()
        return port, admin

    def _write_conf(self, home: Path, port: int, admin_port: int) -> Path:
        assert self._dir is not None
        overrides = {
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "brokerServicePort": str(port),
            "webServicePort": str(admin_port),
            "clusterName": CLUSTER,
            "functionsWorkerEnabled": "false",
            # the in-process bookie reads this file too: bind it to loopback, and fsync its
            # journal per write (BookKeeper's default) unless fsync=false
            "listeningInterface": "lo",
            "journalSyncData": "true" if self._fsync else "false",
            # the topic stats and storage latencies /metrics shows are the last period's:
            # a second's, so the broker metrics follow the ticks (Pulsar's default is a minute)
            **STATS_EVERY_SECOND,
        }
        overrides.update(_listeners(port, self.context.advertised.get("pulsar")))
        # `broker.` settings of the target (its profile, its config file, its own) over these
        overrides.update({k: text(v) for k, v in settings_of(self._target, "broker").items()})
        self._written = overrides
        conf = self._dir / "standalone.conf"
        conf.write_text(standalone_conf((home / "conf" / "standalone.conf").read_text(), overrides))
        return conf

    def _argv_env(self, home: Path, java: str, conf: Path) -> tuple[list[str], dict[str, str]]:
        assert self._dir is not None
        heap_mb = heap_megabytes(self._heap)
        env = {
            **os.environ,
            "JAVA_HOME": str(Path(java).resolve().parent.parent),
            # the stock heap-to-direct-memory ratio (2g heap, 4g direct) at the chosen heap
            "PULSAR_MEM": f"-Xms{heap_mb}m -Xmx{heap_mb}m -XX:MaxDirectMemorySize={2 * heap_mb}m",
            "PULSAR_LOG_DIR": str(self._dir / "logs"),
        }
        argv = [shutil.which("bash") or "/bin/bash", str(home / "bin" / "pulsar"), "standalone",
                "--config", str(conf), "--no-functions-worker", "--no-stream-storage",
                "--bookkeeper-dir", str(self._dir / "bookkeeper"),
                "--metadata-dir", str(self._dir / "metadata")]
        return argv, env

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        self._check_ports()
        java = check_java(self._label)
        home = await distribution(progress, self._label)
        self._dir = make_data_dir(DATA_PREFIX)
        fsync = "" if self._fsync else ", journal fsync off"
        progress(f"{self._label}: starting Pulsar {PULSAR_VERSION} standalone (heap {self._heap}{fsync})")
        wanted = (self._port, self._admin_port)
        for _attempt in range(3):
            port, admin_port = self._pick_ports()
            conf = self._write_conf(home, port, admin_port)
            argv, env = self._argv_env(home, java, conf)
            log = self._dir / "pulsar.out"
            node = self._node = LocalNode(self.NODE, argv, log, cwd=self._dir, env=env)
            # from the event loop's (main) thread: the broker's death signal is tied to it
            node.start()
            self._port, self._admin_port = port, admin_port
            if await self._wait_started(node, progress, START_TIMEOUT_S):
                await self._create_namespace()
                return
            text = tail(log, 8)
            node.stop()
            self._node = None
            if any(wanted) or "Address already in use" not in text:
                raise StackError(f"{self._label}: Pulsar standalone did not start: "
                                 f"{_last_error(log) or text or 'no output'} (log: {log})")
            self._port, self._admin_port = wanted  # a free port was taken meanwhile: pick again
        raise StackError(f"{self._label}: no free loopback ports for Pulsar after 3 tries")

    async def _wait_started(self, node: LocalNode, progress: Progress, timeout_s: float) -> bool:
        """Until the admin API lists the cluster and the default namespace exists (the
        standalone creates both after its web service opens); False if the process died."""
        admin = PulsarAdmin(self._admin_url, timeout_s=5.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        told = started
        while loop.time() - started < timeout_s:
            if not node.running:
                return False
            try:
                clusters = await admin.get("/admin/v2/clusters")
                namespaces = await admin.get(f"/admin/v2/namespaces/{STOCK_NAMESPACE.split('/')[0]}")
                if CLUSTER in clusters and STOCK_NAMESPACE in namespaces:
                    return True
            except (OSError, AdminError, ValueError):
                pass
            if loop.time() - told >= PROGRESS_EVERY_S:
                told = loop.time()
                progress(f"{self._label}: Pulsar standalone starting ({loop.time() - started:.0f} s)")
            await asyncio.sleep(0.5)
        raise StackError(f"{self._label}: Pulsar standalone did not answer on {self._admin_url} within "
                         f"{timeout_s:.0f} s (log: {self._dir}/pulsar.out)")

    async def _create_namespace(self) -> None:
        await create_namespace(self._admin_url, self._config.namespace, self._label)

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        admin = PulsarAdmin(self._admin_url)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                self._version = await asyncio.wait_for(ready_check(admin, self._config.namespace),
                                                       max(0.1, deadline - loop.time()))
                return
            except TimeoutError as exc:
                # one admin call that outlasted its own time-out (a busy machine): again, until
                # the stack's deadline
                if loop.time() < deadline - 1.0:
                    continue
                failure: BaseException = exc
            except (OSError, AdminError, ValueError) as exc:
                failure = exc
            raise StackError(f"{self._label}: the Pulsar standalone on {self._admin_url} is not "
                             f"ready: {unreachable(failure)}") from None

    def brokers(self) -> list[str]:
        return [self.NODE]

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        if not await self._wait_started(node, lambda message: None, max(timeout_s, START_TIMEOUT_S)):
            log = node.log
            raise StackError(f"{self._label}: the Pulsar standalone exited after a start: "
                             f"{_last_error(log) or tail(log, 3) or 'no output'} (log: {log})")

    def down_brokers(self) -> dict[str, str]:
        return nodes_down([self._node] if self._node is not None else [])

    async def _apply_fault(self, action: str, broker: str) -> str:
        if self._node is None:
            raise StackError(f"{self._label}: the Pulsar standalone is not running (the stack is not up)")
        return await node_fault(self._label, self._node, action, self._node_ready,
                                ready_timeout_s=START_TIMEOUT_S)

    def log_files(self) -> list[Path]:
        if self._dir is None:
            return []
        return [self._dir / "pulsar.out", *sorted((self._dir / "logs").glob("*.log"))]

    async def down(self) -> None:
        logs = self.log_files()
        node, data_dir, self._node, self._dir = self._node, self._dir, None, None
        await stop_and_remove(node.proc if node is not None else None, data_dir, logs,
                              self.context.log_dir)

    def describe(self) -> StackDescription:
        config = {**self._config.describe(), "journalSyncData": "true" if self._fsync else "false",
                  "heap": self._heap, "data_dir": str(self._dir),
                  **({"client_listener": CLIENT_LISTENER} if "pulsar" in self.context.advertised
                     else {})}
        node = self._node
        return StackDescription(
            runtime="local",
            endpoints={"pulsar": self._service_url, ADMIN_ENDPOINT: self._admin_url},
            pids=(node.proc.pid,) if node is not None and node.proc is not None and node.running else (),
            version=self._version,
            config=config,
            broker_settings=dict(self._written),
        )


def _listeners(port: int, proxy: str | None) -> dict[str, str]:
    """With a proxy in front of the standalone's clients (network faults): two advertised
    listeners, the broker's own for itself (its internal client, bundle ownership) and the
    proxy's, which the clients name in their lookups (CLIENT_LISTENER). Pulsar binds only
    brokerServicePort, and refuses advertisedAddress beside advertisedListeners."""
    if proxy is None:
        return {}
    return {"advertisedAddress": "",
            "advertisedListeners": f"internal:pulsar://127.0.0.1:{port},"
                                   f"{CLIENT_LISTENER}:pulsar://{proxy}",
            "internalListenerName": "internal"}


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


async def create_namespace(admin_url: str, namespace: str, label: str) -> None:
    """The namespace a target asks for on a standalone streambench started, when it is not the
    one the standalone makes."""
    if namespace == STOCK_NAMESPACE:
        return
    admin = PulsarAdmin(admin_url)
    tenant = namespace.split("/")[0]
    try:
        with contextlib.suppress(AdminError):  # 409: the tenant exists (e.g. `public`)
            await admin.put(f"/admin/v2/tenants/{tenant}", {"allowedClusters": [CLUSTER]})
        await admin.put(f"/admin/v2/namespaces/{namespace}")
    except (OSError, AdminError, ValueError) as exc:
        raise StackError(f"{label}: cannot create namespace {namespace}: "
                         f"{unreachable(exc)}") from None


async def ready_check(admin: PulsarAdmin, namespace: str) -> str:
    """The broker's version, once the admin API answers and a topic can be created in
    `namespace` (which also makes the broker own the namespace's first bundle)."""
    clusters = await admin.get("/admin/v2/clusters")
    if not clusters:
        raise AdminError(503, "the cluster has no clusters configured yet")
    tenant = namespace.split("/")[0]
    try:
        namespaces = await admin.get(f"/admin/v2/namespaces/{tenant}")
    except AdminError as exc:
        raise AdminError(exc.status, f"namespace {namespace}: {exc.reason}") from None
    if namespace not in namespaces:
        raise AdminError(404, f"namespace {namespace} does not exist (set one with "
                              "pulsar:namespace=TENANT/NAMESPACE)")
    probe = f"/admin/v2/{topic_path(True, namespace, f'{_PROBE_TOPIC}-{os.getpid()}-{time.time_ns()}')}"
    await admin.put(probe)
    with contextlib.suppress(AdminError):
        await admin.delete(f"{probe}?force=true")
    return await admin.version()


class PulsarExternalStack(Stack):
    runtime = "external"

    def __init__(self, target: Target, label: str) -> None:
        assert target.address is not None
        local_only = sorted(target.explicit & {"admin_port", "heap", "fsync"})
        if local_only:
            raise TargetError(f"target {target.spec!r}: {', '.join(local_only)} apply to a local "
                              "standalone only, not to an existing cluster")
        self._label = label
        self._config = PulsarTargetConfig.of(target)
        self._service, self._admin = parse_address(target.address)
        self._security = ClientSecurity.of(target)
        self._version = ""

    async def up(self, progress: Progress) -> None:
        progress(f"{self._label}: using the existing cluster at {self._service} (admin {self._admin})")

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        admin = PulsarAdmin(self._admin, timeout_s=min(10.0, timeout_s), security=self._security)
        try:
            self._version = await asyncio.wait_for(ready_check(admin, self._config.namespace), timeout_s)
        except (OSError, AdminError, ValueError, TimeoutError) as exc:
            raise StackError(f"{self._label}: cannot reach the Pulsar admin API at {self._admin}: "
                             f"{unreachable(exc)}") from None
        host, port = host_port(self._service, DEFAULT_SERVICE_PORT)
        try:
            await probe_tcp(host, port, min(10.0, timeout_s))
        except (OSError, TimeoutError) as exc:
            raise StackError(f"{self._label}: cannot reach the Pulsar service at {self._service}: "
                             f"{unreachable(exc)}") from None

    async def down(self) -> None:
        return None

    def describe(self) -> StackDescription:
        return StackDescription(runtime="external",
                                endpoints={"pulsar": self._service, ADMIN_ENDPOINT: self._admin},
                                version=self._version, config=self._config.describe())

# ---- the docker runtime ---------------------------------------------------------------------

PULSAR_PREFIX = "PULSAR_PREFIX_"


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
        admin = PulsarAdmin(self._admin_url(), timeout_s=DOCKER_PROBE_TIMEOUT_S)
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
