"""Pulsar with the standalone as a container: the real compose file (compose/pulsar.yml) running
an offline-built image of the Pulsar release from Maven Central in the public image's layout.
Every message consumed once, the lag drained, the listeners on loopback, `broker.` settings in
force in the container as the broker's own admin API tells them (a key standalone.conf has,
replaced; one it lacks, appended), and nothing labelled with the run left afterwards."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.containers import images
from tests.containers.conftest import nothing_labelled
from tests.integration.conftest import run_cli, run_json

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def pulsar_image(docker_images: dict[str, str]) -> Iterator[str]:
    image = images.pulsar()
    before = os.environ.get("STREAMBENCH_IMAGE_PULSAR")
    os.environ["STREAMBENCH_IMAGE_PULSAR"] = image
    yield image
    if before is None:
        os.environ.pop("STREAMBENCH_IMAGE_PULSAR", None)
    else:
        os.environ["STREAMBENCH_IMAGE_PULSAR"] = before


def test_docker_run_with_broker_settings(pulsar_image, tmp_path):
    out = tmp_path / "run"
    spec = ("pulsar:runtime=docker,broker.managedLedgerNewEntriesCheckDelayInMillis=0,"
            "broker.maxMessageSize=2097152")
    res = run_cli(["run", spec, "--rate", "500", "--duration", "3", "--warmup", "1",
                   "--partitions", "2", "--track-delivery", "--headless", "--out", str(out)],
                  timeout_s=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    meta = run_json(out)
    (target,) = meta["targets"]
    assert target["runtime"] == "docker" and target["version"].startswith("4.0"), target
    assert all(v.startswith(("pulsar://127.0.0.1:", "http://127.0.0.1:"))
               for v in target["endpoints"].values()), target["endpoints"]
    settings = target["settings"]
    # replaced in standalone.conf (stock: 10) and appended to it (stock: absent, 5 MiB built in)
    assert settings["broker.managedLedgerNewEntriesCheckDelayInMillis"] == {
        "value": "0", "source": "user", "read_back": True}
    assert settings["broker.maxMessageSize"] == {"value": "2097152", "source": "user",
                                                 "read_back": True}
    assert settings["broker.bindAddress"] == {"value": "127.0.0.1", "source": "streambench default",
                                              "read_back": True}
    totals = meta["totals"][0]
    assert totals["produced"] == 2000 and totals["consumed"] == 2000, totals
    assert totals["duplicates"] == 0 and totals["drained"] and totals["final_lag"] == 0, totals
    # the image's script said what it set, in the container's output kept with the run
    (log,) = (out / "logs").glob("0-*/compose.log")
    text = log.read_text(errors="replace")
    assert "maxMessageSize = 2097152" in text and "managedLedgerNewEntriesCheckDelayInMillis = 0" in text
    nothing_labelled(meta["run_id"])
