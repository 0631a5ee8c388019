"""RabbitMQ Streams with the node as a container: the real compose file (compose/rabbitmq.yml)
running an offline-built image of Debian's rabbitmq-server in the public image's layout.
Nothing lost or read twice, the lag drained, every listener on loopback, a `broker.` setting in
force on the node (read back with rabbitmqctl in the container), and nothing labelled with the
run left afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.containers import images
from tests.containers.conftest import nothing_labelled
from tests.integration.conftest import run_cli, run_json

pytestmark = pytest.mark.integration

IMAGE = "streambench-test/rabbitmq:3.10"


@pytest.fixture(scope="module")
def rabbitmq_image(docker_images: dict[str, str]) -> Iterator[str]:
    images._build(IMAGE, "rabbitmq")
    before = os.environ.get("STREAMBENCH_IMAGE_RABBITMQ")
    os.environ["STREAMBENCH_IMAGE_RABBITMQ"] = IMAGE
    yield IMAGE
    if before is None:
        os.environ.pop("STREAMBENCH_IMAGE_RABBITMQ", None)
    else:
        os.environ["STREAMBENCH_IMAGE_RABBITMQ"] = before


def test_docker_run_delivers_every_message_once(rabbitmq_image, tmp_path):
    out = tmp_path / "run"
    res = run_cli(["run", "rabbitmq:runtime=docker,broker.stream.frame_max=2097152", "--rate",
                   "500", "--duration", "3", "--warmup", "1", "--partitions", "2",
                   "--track-delivery", "--headless", "--out", str(out)], timeout_s=240)
    assert res.returncode == 0, res.stderr[-2000:]
    meta = run_json(out)
    target = meta["targets"][0]
    assert target["runtime"] == "docker" and target["version"] == "3.10.8", target
    assert all(v.startswith(("127.0.0.1:", "http://127.0.0.1:")) for v in target["endpoints"].values())
    settings = target["settings"]
    assert settings["broker.stream.frame_max"] == {"value": "2097152", "source": "user",
                                                   "read_back": True}
    assert settings["broker.stream.advertised_host"] == {
        "value": "127.0.0.1", "source": "streambench default", "read_back": True}
    totals = meta["totals"][0]
    assert totals["produced"] == 2000 and totals["consumed"] == 2000, totals
    assert totals["duplicates"] == 0 and totals["drained"], totals
    nothing_labelled(meta["run_id"])
