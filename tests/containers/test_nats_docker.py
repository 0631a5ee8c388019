"""NATS JetStream with the server as a container: the real compose file (compose/nats.yml)
running an offline-built image of Debian's nats-server in the public image's layout. Every
message consumed once, the lag drained, both listeners on loopback, a kill and a start of the
container, a `broker.` setting in force in the container (the server's /varz), and nothing
labelled with the run left afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow.dataset as ds
import pytest

from analysis.labels import ending
from tests.containers import images
from tests.containers.conftest import nothing_labelled
from tests.integration.conftest import run_cli, run_json
from tui.bench.recording import RecordingError, load_recording

pytestmark = pytest.mark.integration

IMAGE = "streambench-test/nats:2.9"


@pytest.fixture(scope="module")
def nats_image(docker_images: dict[str, str]) -> Iterator[str]:
    images._build(IMAGE, "nats")
    before = os.environ.get("STREAMBENCH_IMAGE_NATS")
    os.environ["STREAMBENCH_IMAGE_NATS"] = IMAGE
    yield IMAGE
    if before is None:
        os.environ.pop("STREAMBENCH_IMAGE_NATS", None)
    else:
        os.environ["STREAMBENCH_IMAGE_NATS"] = before


def test_docker_run_with_a_kill_and_a_start(nats_image, tmp_path):
    out = tmp_path / "run"
    res = run_cli(["run", "nats:runtime=docker,broker.max_payload=2MB", "--rate", "500",
                   "--duration", "6", "--warmup", "1", "--partitions", "2", "--track-delivery",
                   "--headless", "--out", str(out),
                   "--at", "2s:kill=nats", "--at", "3s:start=nats"], timeout_s=240)
    assert res.returncode == 0, res.stderr[-2000:]
    meta = run_json(out)
    (target,) = meta["targets"]
    assert target["runtime"] == "docker" and target["version"] == "2.9.10", target
    assert all(v.startswith(("127.0.0.1:", "http://127.0.0.1:")) for v in target["endpoints"].values())
    assert target["settings"]["broker.max_payload"] == {"value": str(2 * 2**20), "source": "user",
                                                        "read_back": True}
    (totals,) = meta["totals"]
    assert totals["drained"] and totals["final_lag"] == 0, totals
    broker = ds.dataset(out / "broker", format="parquet").to_table().to_pydict()
    stored = sum(v for n, v in zip(broker["name"], broker["value"], strict=True)
                 if n.startswith("partition."))
    # every stored message consumed once, however many publishes the kill cut off
    assert totals["consumed"] - totals["duplicates"] == stored
    assert 0 < totals["produced"] <= stored <= totals["produced"] + totals["send_errors"]
    events = ds.dataset(out / "events", format="parquet").to_table().to_pydict()["kind"]
    assert events.index("fault-kill") < events.index("fault-start") and "broker-died" not in events
    nothing_labelled(meta["run_id"])


def test_setting_newer_than_the_image(nats_image, tmp_path):
    """The durable profile's jetstream.sync_interval on the 2.9 image: the server refuses its
    configuration file; the run ends in one line that says what to do, nothing left."""
    out = tmp_path / "run"
    res = run_cli(["run", "nats:runtime=docker,profile=durable", "--rate", "100", "--duration",
                   "2", "--headless", "--out", str(out)], timeout_s=120)
    assert res.returncode == 3, res.stderr[-2000:]  # the broker does not start
    last = res.stderr.strip().splitlines()[-1]
    assert 'unknown field "sync_interval"' in last, last
    assert "nats-server 2.10 or newer" in last and "version=2.10.27" in last, last
    assert "Traceback" not in res.stderr
    # run.json marks the run as failed, with the same line; replay refuses it naming the reason
    meta = run_json(out)
    assert meta["failed"] in last and meta["stopped_early"] is True and "ended" in meta
    assert ending(meta).startswith("failed: ")
    with pytest.raises(RecordingError, match=r"failed before its first second: .*sync_interval"):
        load_recording(out)
    nothing_labelled(meta["run_id"])
