"""Settings on a real local Pulsar standalone: a run with the stock waits and settings of each
namespace, and one with `profile=latency`, one standalone at a time; what each run records as
in force, read back from the broker's runtime configuration where it tells it. (The latency the
profile saves is measured by tests/bench/pulsar_latency_profile.py: a timing goal, not a test.)"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import CLI
from tests.integration.test_pulsar import standalone_pids

pytestmark = pytest.mark.integration

COMMON = "runtime=local,heap=512m,fsync=false"
DEFAULT = (f"pulsar:{COMMON},broker.brokerDeleteInactiveTopicsFrequencySeconds=123,"
           "consumer.receiver_queue_size=500,producer.send_timeout_millis=20000")
LATENCY = f"pulsar:{COMMON},profile=latency"


def _run(spec: str, out: Path) -> dict:
    res = subprocess.run([*CLI, "run", spec, "--rate", "1000", "--size", "1024", "--duration",
                          "2", "--warmup", "0", "--headless", "--out", str(out)],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
                         env={**os.environ, "STREAMBENCH_READY_TIMEOUT": "300"})
    assert res.returncode == 0, res.stderr[-2000:]
    (target,) = json.loads((out / "run.json").read_text())["targets"]
    return dict(target["settings"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    before = standalone_pids()
    root = tmp_path_factory.mktemp("pulsar-settings")
    found = {}
    for name, spec in (("default", DEFAULT), ("latency", LATENCY)):
        found[name] = _run(spec, root / name)
    yield found
    assert standalone_pids() - before == set(), "a standalone outlived its run"


def test_settings_read_back_from_the_standalone(runs):
    default, latency = runs["default"], runs["latency"]
    check = "broker.managedLedgerNewEntriesCheckDelayInMillis"
    assert default[check] == {"value": "10", "source": "platform default", "read_back": True}
    assert latency[check] == {"value": "0", "source": "profile", "read_back": True}
    assert default["broker.brokerDeleteInactiveTopicsFrequencySeconds"] == {
        "value": "123", "source": "user", "read_back": True}
    # the bookie's settings are not in the broker's runtime configuration: as written
    assert latency["broker.journalMaxGroupWaitMSec"] == {"value": "0", "source": "profile",
                                                         "read_back": False}
    assert default["broker.journalSyncData"] == {"value": "false", "source": "user",
                                                 "read_back": False}  # fsync=false
    assert default["producer.batching_enabled"]["value"] == "true"
    assert latency["producer.batching_enabled"] == {"value": "false", "source": "profile",
                                                    "read_back": False}
    assert default["consumer.receiver_queue_size"] == {"value": "500", "source": "user",
                                                       "read_back": False}
    assert default["producer.send_timeout_millis"]["value"] == "20000"
