"""A real two-node Ray cluster on this machine for the tests of `run --cluster`: a head and one
more node started with `ray start`, each with one CPU and a resource of its own (sb_node_0,
sb_node_1) so that where an actor ran can be told, node 1's wall clock shifted by
+200 ms for its load actors (the test hook of loadgen.clocks); the dashboard off, a small object store, a
temp dir of its own. It is started once per session, and stopped at the end by its own
processes (never `ray stop`, which would end every Ray on the machine), none left.

The cluster lives in a network namespace of its own with only loopback up (`LoopbackNet`):
Ray binds its GCS, raylets, object managers and workers to the machine's interface address,
not loopback, even when told --node-ip-address=127.0.0.1, unless loopback is the only address
there is. What talks to the cluster or to brokers its actors load (a coordinator, a
redis-server, a client reading a stream) runs in the same namespace: a test process enters it
for a block (`LoopbackNet.entered`), and what it starts there inherits it."""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadgen.clocks import WALL_SHIFT_ENV

RAY = str(Path(sys.executable).with_name("ray"))
NODE_1_SHIFT_MS = 200.0
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's least is 75 MiB


CLONE_NEWNET = 0x40000000  # <sched.h>
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    """Move the calling thread (only it) into the network namespace open at `fd`."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def on_loopback(ip: str) -> bool:
    """127.0.0.0/8 or ::1, also written as IPv6 (::ffff:127.0.0.1, as Ray's sockets are)."""
    address = ipaddress.ip_address(ip)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


def without_ray_route_warning(stderr: str) -> list[str]:
    """The lines of a Ray driver's stderr but the warning Ray's own C++ code prints in a
    namespace with no route out (it probes the route to a public DNS address, finds none and
    falls back to the host name, which this machine resolves to 127.0.0.1)."""
    return [line for line in stderr.strip().splitlines()
            if not re.search(r"network_util\.cc:\d+: Failed to determine local IP via external "
                             r"connectivity", line)]


def machine_addresses() -> set[str]:
    """The addresses of the calling thread's network namespace but loopback."""
    return {a.address.split("%")[0] for nic in psutil.net_if_addrs().values() for a in nic
            if a.family in (socket.AF_INET, socket.AF_INET6)
            and not on_loopback(a.address.split("%")[0])}


@dataclass
class LoopbackNet:
    """A network namespace with only loopback up, held by a process of its own (`cat` on a
    pipe: it ends when the pipe closes, also if the test process dies)."""

    holder: subprocess.Popen[bytes]
    outside: set[str]  # the machine's own addresses, which nothing in here may name

    @property
    def path(self) -> str:
        return f"/proc/{self.holder.pid}/ns/net"

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace."""
        return ["nsenter", f"--net={self.path}", *argv]

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The calling thread inside the namespace while the block runs: the sockets it
        opens, the threads and processes it starts are there (and stay there)."""
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            ours = os.open(self.path, os.O_RDONLY)
            try:
                _setns(ours)
            finally:
                os.close(ours)
            try:
                yield
            finally:
                _setns(back)
        finally:
            os.close(back)

    def members(self) -> list[psutil.Process]:
        """The processes in the namespace but its holder and this one."""
        inode = os.stat(self.path).st_ino
        found = []
        for p in psutil.process_iter():
            if p.pid in (self.holder.pid, os.getpid()):
                continue
            with contextlib.suppress(OSError, psutil.Error):
                if os.stat(f"/proc/{p.pid}/ns/net").st_ino == inode:
                    found.append(p)
        return found


@contextlib.contextmanager
def loopback_net() -> Iterator[LoopbackNet]:
    """A LoopbackNet while the block runs; at its end every process in it is stopped and the
    namespace goes with its holder."""
    holder = subprocess.Popen(["unshare", "--net", "--", "sh", "-c",
                               "ip link set lo up && echo up && exec cat"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    net = LoopbackNet(holder, machine_addresses())
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"up\n", (
            "could not make a network namespace with loopback up (unshare --net needs root)")
        yield net
    finally:
        members = net.members() if holder.poll() is None else []
        _stop(members)
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(10)
        assert not [p for p in members if p.is_running()], "processes left in the namespace"


def _stop(procs: list[psutil.Process]) -> None:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RayCluster:
    gcs: str  # the head's HOST:PORT, for a driver of its own
    client: str  # ray://HOST:PORT, for Ray Client
    temp_dir: Path
    nodes: int
    net: LoopbackNet  # where every node runs and listens
    started_output: str = field(default="", repr=False)  # what `ray start` printed

    def _ours(self, part: str) -> bool:
        # the Ray Client server names only the head's address, the other processes the temp dir
        return str(self.temp_dir) in part or (part.startswith("--address=")
                                              and part.endswith(":" + self.gcs.rsplit(":", 1)[1]))

    def processes(self) -> list[psutil.Process]:
        """The cluster's processes: those that name its temp dir or head and what they started."""
        found: dict[int, psutil.Process] = {}
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if any(self._ours(part) for part in p.info["cmdline"] or ()):
                    found[p.pid] = p
                    for child in p.children(recursive=True):
                        found[child.pid] = child
        return list(found.values())

    def load_actors(self) -> list[psutil.Process]:
        """The streambench actors alive on the cluster's nodes: load actors and tick relays."""
        alive = []
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                command = " ".join(p.cmdline())
                if "LoadActor" in command or "TickRelay" in command:
                    alive.append(p)
        return alive

    def no_load_actor_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.load_actors():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True


    def sockets(self) -> list[tuple[psutil.Process, Any]]:
        """Every internet socket of the cluster's processes, as seen from the calling thread's
        network namespace (psutil reads this process's /proc/net)."""
        found = []
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                found += [(p, c) for c in p.net_connections("inet")]
        return found


def ray_start(net: LoopbackNet, args: list[str], env_vars: dict[str, str] | None = None) -> str:
    """`ray start` inside `net`; its output."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env_vars or {})}
    done = subprocess.run(net.command([RAY, "start", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                                       f"--object-store-memory={OBJECT_STORE_BYTES}",
                                       "--disable-usage-stats", *args]),
                          capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"ray start {' '.join(args)} failed: {done.stderr[-2000:]}"
    return done.stdout + done.stderr


@contextlib.contextmanager
def extra_node(cluster: RayCluster, resource: str,
               env_vars: dict[str, str] | None = None) -> Iterator[None]:
    """One more node of `cluster` (with one of the Ray resource `resource`) while the block
    runs; then its processes are stopped (the raylet first, on SIGTERM, which tells the head
    the node is gone) and the cluster is as before."""
    before = {p.pid for p in cluster.processes()}
    ray_start(cluster.net, [f"--address={cluster.gcs}", "--resources=" + json.dumps({resource: 1})],
              env_vars)
    started = [p for p in cluster.processes() if p.pid not in before]  # the node's own
    cluster.nodes += 1
    try:
        yield
    finally:
        raylets = [p for p in started if p.name() == "raylet"]
        assert len(raylets) == 1, f"the extra node's raylet: {raylets}"
        _stop(raylets)
        _stop([c for p in started if p.is_running() for c in [p, *p.children(recursive=True)]])
        cluster.nodes -= 1


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    with two_node_cluster() as cluster:
        yield cluster


@contextlib.contextmanager
def two_node_cluster() -> Iterator[RayCluster]:
    """The cluster, up while the block runs (also the Ray benchmarks' in tests/bench)."""
    # short: Ray's socket paths under it must stay within 107 characters
    temp_dir = Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp"))
    gcs, client = free_port(), free_port()
    with loopback_net() as net:
        cluster = RayCluster(f"127.0.0.1:{gcs}", f"ray://127.0.0.1:{client}", temp_dir, 2, net)
        try:
            said = ray_start(net, ["--head", f"--port={gcs}", f"--ray-client-server-port={client}",
                                   "--include-dashboard=false", f"--temp-dir={temp_dir}",
                                   "--resources=" + json.dumps({"sb_node_0": 1})])
            # node 1's load actors see its wall clock 200 ms ahead (the test hook), so that
            # every run on the cluster times e2e across a clock offset
            said += ray_start(net, [f"--address=127.0.0.1:{gcs}",
                                    "--resources=" + json.dumps({"sb_node_1": 1})],
                              {WALL_SHIFT_ENV: str(NODE_1_SHIFT_MS)})
            cluster.started_output = said
            yield cluster
        finally:
            _stop(cluster.processes())
            shutil.rmtree(temp_dir, ignore_errors=True)
            assert not cluster.processes(), "Ray processes of the test cluster left running"
