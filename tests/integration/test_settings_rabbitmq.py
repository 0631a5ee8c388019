"""`broker.` and `topic.` settings of RabbitMQ Streams on a real local rabbitmq-server: a run whose
node streambench starts with rabbitmq.conf keys of the target's, and whose streams are created
with its arguments; run.json records them with their sources, read back from the node itself
(its application parameters, through rabbitmqctl) and from the management API (the stream's
arguments), and the clients' keyword arguments as given. Bad keys, broker settings for an
existing server and the durable profile end before anything starts, with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.configuration import non_default_rows
from compose.rabbitmq import epmd_binary, script
from tests.integration.conftest import run_cli, run_json
from tests.integration.test_rabbitmq import _erlang_pids

pytestmark = pytest.mark.integration

SPEC = ("rabbitmq:runtime=local,broker.stream.frame_max=2097152,"
        "broker.collect_statistics_interval=2000,broker.disk_free_limit.absolute=1GB,"
        "topic.x-max-age=1h,max_length_bytes=50000000")


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    if script("rabbitmq-server") is None or epmd_binary() is None:
        pytest.fail("rabbitmq-server is not installed (bash .ci/host-deps.sh test installs it)")


def test_run_records_the_settings_the_node_holds(tmp_path: Path):
    before = _erlang_pids()
    run_dir = tmp_path / "run"
    res = run_cli(["run", SPEC, "--rate", "200", "--duration", "2", "--warmup", "0",
                   "--headless", "--out", str(run_dir)], timeout_s=240)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not _erlang_pids() - before  # the node is gone with the run
    (target,) = run_json(run_dir)["targets"]
    settings = target["settings"]
    # the user's keys, as the node's application parameters hold them
    assert settings["broker.stream.frame_max"] == {"value": "2097152", "source": "user",
                                                   "read_back": True}
    assert settings["broker.collect_statistics_interval"] == {"value": "2000", "source": "user",
                                                              "read_back": True}
    assert settings["broker.disk_free_limit.absolute"] == {"value": "1GB", "source": "user",
                                                           "read_back": True}
    # streambench's own keys, and a default of the platform, read back too
    assert settings["broker.stream.advertised_host"] == {
        "value": "127.0.0.1", "source": "streambench default", "read_back": True}
    assert settings["broker.stream.heartbeat"] == {"value": "60", "source": "platform default",
                                                   "read_back": True}
    # a listener key sets a list the node does not tell back key by key: as written
    assert settings["broker.listeners.tcp.1"]["source"] == "streambench default"
    assert settings["broker.listeners.tcp.1"]["read_back"] is False
    # the stream's arguments, as the management API lists them
    assert settings["topic.x-max-age"] == {"value": "1h", "source": "user", "read_back": True}
    assert settings["topic.x-max-length-bytes"] == {"value": "50000000", "source": "user",
                                                    "read_back": True}
    assert settings["topic.x-queue-type"] == {"value": "stream", "source": "streambench default",
                                              "read_back": True}
    # the clients' keyword arguments: streambench's publisher class, rbfly's own timeout
    assert settings["producer.cls"] == {"value": "PublisherBatchFast",
                                        "source": "streambench default", "read_back": False}
    assert settings["consumer.timeout"] == {"value": "0", "source": "platform default",
                                            "read_back": False}
    # what the metadata view and the report's configuration table list: not the defaults
    rows = non_default_rows(settings)
    assert ["broker.stream.frame_max", "2097152", "user"] in rows
    assert ["topic.x-max-age", "1h", "user"] in rows
    assert not any(name == "broker.stream.heartbeat" for name, _, _ in rows)
    totals = run_json(run_dir)["totals"][0]
    assert totals["produced"] == totals["consumed"] == 400


BAD = [
    ("rabbitmq:broker.stream.fram_max=1", "did you mean stream.frame_max?"),
    ("rabbitmq:broker.stream.listeners.tcp.1=5552", "set by streambench"),
    ("rabbitmq:broker.mqtt.listeners.tcp.default=1883", "rabbitmq_mqtt plugin"),
    ("rabbitmq:topic.x-max-lenght-bytes=5", "did you mean x-max-length-bytes?"),
    ("rabbitmq:broker.stream.frame_max=2097152@127.0.0.1:5552",
     "broker settings apply to brokers streambench starts itself"),
    ("rabbitmq:profile=durable", "RabbitMQ streams do not fsync a write"),
    ("rabbitmq:producer.clss=Publisher", "did you mean cls?"),
    ("rabbitmq:producer.name=mine", "set by streambench"),
    ("rabbitmq:consumer.timeout=soon", "expected a number"),
]


@pytest.mark.parametrize("spec, fragment", BAD, ids=[s for s, _ in BAD])
def test_refused_before_anything_starts(spec: str, fragment: str, tmp_path: Path):
    before = _erlang_pids()
    run_dir = tmp_path / "run"
    res = run_cli(["run", spec, "--headless", "--duration", "1", "--out", str(run_dir)], timeout_s=60)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("streambench: error"), res.stderr
    assert fragment in lines[0]
    assert not run_dir.exists()
    assert not _erlang_pids() - before
