"""A real two-node Ray cluster on this machine for the tests of `run --cluster`: a head and one
more node started with `ray start`, each with one CPU and a resource of its own (sb_node_0,
sb_node_1) so that where an actor ran can be told, node 1's wall clock shifted by
+200 ms for its load actors (the test hook of loadgen.clocks); the dashboard off, a small object store, a
temp dir of its own. It is started once per session, and stopped at the end by its own
processes (never `ray stop`, which would end every Ray on the machine), none left."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from loadgen.clocks import WALL_SHIFT_ENV

RAY = str(Path(sys.executable).with_name("ray"))
NODE_1_SHIFT_MS = 200.0
OBJECT_STORE_BYTES = 80 * 1024 * 1024  # Ray's least is 75 MiB


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

    def _ours(self, part: str) -> bool:
        # the Ray Client server names only the head's address (Ray puts the host's own address
        # for 127.0.0.1), the other processes the temp dir
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
        """The streambench load actors alive on the cluster's nodes."""
        alive = []
        for p in self.processes():
            with contextlib.suppress(psutil.Error):
                if "LoadActor" in " ".join(p.cmdline()):
                    alive.append(p)
        return alive

    def no_load_actor_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.load_actors():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True


def _ray_start(args: list[str], env_vars: dict[str, str] | None = None) -> None:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env_vars or {})}
    done = subprocess.run([RAY, "start", "--node-ip-address=127.0.0.1", "--num-cpus=1",
                           f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats",
                           *args], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"ray start {' '.join(args)} failed: {done.stderr[-2000:]}"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    with two_node_cluster() as cluster:
        yield cluster


@contextlib.contextmanager
def two_node_cluster() -> Iterator[RayCluster]:
    """The cluster, up while the block runs (also tests/bench/ray_placement.py's)."""
    # short: Ray's socket paths under it must stay within 107 characters
    temp_dir = Path(tempfile.mkdtemp(prefix="sbray-", dir="/tmp"))
    gcs, client = free_port(), free_port()
    cluster = RayCluster(f"127.0.0.1:{gcs}", f"ray://127.0.0.1:{client}", temp_dir, 2)
    try:
        _ray_start(["--head", f"--port={gcs}", f"--ray-client-server-port={client}",
                    "--include-dashboard=false", f"--temp-dir={temp_dir}",
                    "--resources=" + json.dumps({"sb_node_0": 1})])
        # node 1's load actors see its wall clock 200 ms ahead (the test hook), so that every
        # run on the cluster times e2e across a clock offset
        _ray_start([f"--address=127.0.0.1:{gcs}", "--resources=" + json.dumps({"sb_node_1": 1})],
                   {WALL_SHIFT_ENV: str(NODE_1_SHIFT_MS)})
        yield cluster
    finally:
        procs = cluster.processes()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not cluster.processes(), "Ray processes of the test cluster left running"
