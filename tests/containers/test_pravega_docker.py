"""Pravega with the standalone as a container: the real compose file (compose/pravega.yml)
running an offline-built image of the standalone's Maven Central jars on Debian's Java 17, laid
out like the public pravega/pravega image (its entry point appends the standalone's default
ports and an every-interface listener to JAVA_OPTS, which the compose file's
PRAVEGA_STANDALONE_OPTS must win over). Every message consumed once, the segment store and
ZooKeeper on loopback only, the container killed by a fault, its output kept in the run
directory, and nothing labelled with a run left afterwards."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from compose.process import free_port
from tests.containers import images
from tests.containers.conftest import nothing_labelled
from tests.integration.conftest import CLI, run_cli, run_json

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 240
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1"}


@pytest.fixture(scope="module")
def pravega_image(docker_images: dict[str, str]) -> Iterator[str]:
    image = images.pravega()
    before = os.environ.get("STREAMBENCH_IMAGE_PRAVEGA")
    os.environ["STREAMBENCH_IMAGE_PRAVEGA"] = image
    yield image
    if before is None:
        os.environ.pop("STREAMBENCH_IMAGE_PRAVEGA", None)
    else:
        os.environ["STREAMBENCH_IMAGE_PRAVEGA"] = before


def _listening() -> dict[int, set[str]]:
    """Every listening TCP port of the host's network (the container's included), with the
    addresses it is bound to."""
    found: dict[int, set[str]] = {}
    for c in psutil.net_connections("tcp"):
        if c.status == psutil.CONN_LISTEN and c.laddr:
            found.setdefault(c.laddr.port, set()).add(c.laddr.ip)
    return found


def _compose_log(run_dir: Path) -> str:
    (log,) = (run_dir / "logs").glob("0-*/compose.log")
    return log.read_text(errors="replace")


def test_docker_run_consumes_every_message_once(pravega_image, tmp_path):
    """The ports streambench gives reach the standalone (not the entry point's defaults), the
    segment store and ZooKeeper listen on 127.0.0.1 only, 2,000 messages are read once each,
    and a `broker.` setting reaches the emulator in the container (it prints it at start)."""
    out = tmp_path / "run"
    controller, segment_store = free_port(), free_port()
    while segment_store == controller:
        segment_store = free_port()
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("w") as o, stderr.open("w") as e:
        proc = subprocess.Popen(
            [*CLI, "run", f"pravega:runtime=docker,port={controller},segment_store_port={segment_store},"
             "broker.singlenode.metrics.reporting.interval=7",
             "--rate", "500", "--duration", "3", "--warmup", "1", "--partitions", "2",
             "--track-delivery", "--headless", "--out", str(out)],
            stdout=o, stderr=e, stdin=subprocess.DEVNULL)
        seen: dict[int, set[str]] = {}
        deadline = time.monotonic() + RUN_TIMEOUT_S
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                for port, addresses in _listening().items():
                    seen.setdefault(port, set()).update(addresses)
                time.sleep(0.5)
        finally:
            if proc.poll() is None:
                proc.kill()
            code = proc.wait(timeout=30)
    err = stderr.read_text()
    assert code == 0, err[-2000:]
    assert "Traceback" not in err
    # while the run went on: the segment store on loopback only (the entry point's default is
    # every interface), the controller's gRPC server on its port (it takes no address)
    assert seen.get(segment_store) and seen[segment_store] <= LOOPBACK, seen
    assert seen.get(controller), seen
    meta = run_json(out)
    (target,) = meta["targets"]
    assert target["runtime"] == "docker" and target["version"] == "0.13.0", target
    assert target["endpoints"] == {"pravega": f"tcp://127.0.0.1:{controller}",
                                   "pravega-segmentstore": f"tcp://127.0.0.1:{segment_store}"}
    (totals,) = meta["totals"]
    assert totals["produced"] == 2000 and totals["consumed"] == 2000, totals
    assert totals["duplicates"] == 0 and totals["send_errors"] == 0, totals
    assert totals["drained"] and totals["final_lag"] == 0, totals
    # the container's output, kept: the standalone started on the ports given
    log = _compose_log(out)
    ports = re.search(r"ZK port (\d+), Controller port (\d+), SegmentStore port (\d+)", log)
    assert ports is not None, log[-2000:]
    zookeeper = int(ports[1])
    assert (int(ports[2]), int(ports[3])) == (controller, segment_store)
    assert zookeeper not in (2181, controller, segment_store)
    assert seen.get(zookeeper) and seen[zookeeper] <= LOOPBACK, seen.get(zookeeper)
    assert f"running locally now. You could access it at 127.0.0.1:{controller}" in log
    assert re.search(r"\smetricsReportInterval=7\s", log), log[:3000]  # the stock value is 60
    assert target["settings"]["broker.singlenode.metrics.reporting.interval"] == {
        "value": "7", "source": "user", "read_back": False}
    assert target["settings"]["broker.singlenode.zk.port"] == {
        "value": str(zookeeper), "source": "streambench default", "read_back": False}
    nothing_labelled(meta["run_id"])


def test_kill_fault_on_the_container(pravega_image, tmp_path):
    """The container killed 2 s into a 4 s measuring phase: the producer and the consumer lose
    their connection within 1.5 s, a tick every second through the outage, the run exits 0 (the
    kill was asked for), the killed container's output is kept, and it is removed."""
    out = tmp_path / "run"
    res = run_cli(["run", "pravega:runtime=docker", "--rate", "500", "--duration", "4", "--warmup",
                   "1", "--partitions", "2", "--headless", "--out", str(out),
                   "--at", "2s:kill=pravega"], timeout_s=RUN_TIMEOUT_S)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    meta = run_json(out)
    assert meta["broker_failures"] == []
    events = sorted(ds.dataset(out / "events", format="parquet").to_table().to_pylist(),
                    key=lambda e: e["time"])
    kinds = [e["kind"] for e in events]
    (kill,) = [e for e in events if e["kind"] == "fault-kill"]
    assert "container" in kill["detail"], kill
    assert "broker-died" not in kinds  # a fault's kill is expected
    lost = [e for e in events if e["kind"] == "connection-lost"]
    assert sorted(e["detail"].split(":")[0] for e in lost) == [
        "consumer 0 of streambench-sub-0", "producer 0"], lost
    assert all(0 <= (e["time"] - kill["time"]).total_seconds() < 1.5 for e in lost), lost
    ticks = sorted(ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()["time"])
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)]
    assert ticks[-1] > kill["time"] and max(gaps) < 1.5, gaps
    (outcome,) = [e for e in events if e["kind"] in ("recovered", "not-recovered")]
    assert outcome["kind"] == "not-recovered" and "kill pravega" in outcome["detail"]
    (totals,) = meta["totals"]
    assert totals["produced"] > 0 and totals["send_errors"] > 0 and not totals["drained"], totals
    assert "running locally now" in _compose_log(out)
    nothing_labelled(meta["run_id"])
