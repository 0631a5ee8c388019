"""OpenMessaging Benchmark workload fields beyond the basic ones: ${VAR:-default} values,
payloadFile, randomized payloads, rate ramps, and a warning for each field not acted on."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from loadgen.core.errors import WorkloadError
from loadgen.core.workload import load_workload, parse_workload


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_variables_take_the_environment_or_their_default(monkeypatch):
    monkeypatch.delenv("OMB_TEST_DURATION", raising=False)
    monkeypatch.setenv("OMB_NAME", "from-env")
    doc = {"name": "w-${OMB_NAME}", "testDurationMinutes": "${OMB_TEST_DURATION:-15}",
           "producerRate": "${OMB_RATE:-2500.5}", "topics": 1}
    w = parse_workload(doc, "w.yaml")
    assert w.name == "w-from-env"
    assert w.duration_s == 15 * 60.0
    assert w.rate == 2500.5
    monkeypatch.setenv("OMB_TEST_DURATION", "2")
    assert parse_workload(doc, "w.yaml").duration_s == 120.0
    monkeypatch.setenv("OMB_TEST_DURATION", "")  # set but empty: the default, as in a shell
    assert parse_workload(doc, "w.yaml").duration_s == 15 * 60.0


def test_a_variable_without_value_or_default_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("OMB_MISSING", raising=False)
    with pytest.raises(WorkloadError, match=r"w.yaml: producerRate: \$\{OMB_MISSING\} is not set"):
        parse_workload({"producerRate": "${OMB_MISSING}"}, "w.yaml")


def test_a_substituted_value_is_still_validated(monkeypatch):
    monkeypatch.setenv("OMB_PARTS", "lots")
    with pytest.raises(WorkloadError, match="partitionsPerTopic must be a number"):
        parse_workload({"partitionsPerTopic": "${OMB_PARTS}"}, "w.yaml")


def test_payload_file_next_to_the_workload_then_in_the_working_directory(tmp_path, monkeypatch):
    folder = tmp_path / "workloads"
    folder.mkdir()
    payload = os.urandom(3000)
    (folder / "payload.data").write_bytes(payload)
    spec = write(folder / "w.yaml", "name: p\nmessageSize: 1024\npayloadFile: payload.data\n")
    monkeypatch.chdir(tmp_path)
    w = load_workload(spec)
    assert w.message_size == 3000 and w.payloads() == [payload]
    assert any("messageSize 1024 does not apply" in m for m in w.warnings)
    assert w.to_omb()["payloadFile"] == str(folder / "payload.data")
    # not next to the workload: the working directory
    (tmp_path / "cwd.data").write_bytes(b"x" * 10)
    w = load_workload(write(folder / "w2.yaml", "payloadFile: cwd.data\n"))
    assert w.message_size == 10 and w.payloads() == [b"x" * 10]
    assert not w.warnings


def test_a_missing_payload_file_names_both_places(tmp_path, monkeypatch):
    folder = tmp_path / "w"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    spec = write(folder / "w.yaml", "payloadFile: nope.data\n")
    with pytest.raises(WorkloadError) as err:
        load_workload(spec)
    text = str(err.value)
    assert "payloadFile nope.data not found" in text
    assert str(folder / "nope.data") in text and str(tmp_path / "nope.data") in text
    (tmp_path / "dir.data").mkdir()
    with pytest.raises(WorkloadError, match="is not a regular file"):
        load_workload(write(folder / "w3.yaml", "payloadFile: dir.data\n"))
    (tmp_path / "empty.data").write_bytes(b"")
    with pytest.raises(WorkloadError, match="is empty"):
        load_workload(write(folder / "w4.yaml", "payloadFile: empty.data\n"))


def test_randomized_payloads_are_random_then_zeros():
    w = parse_workload({"messageSize": 4000, "useRandomizedPayloads": True,
                        "randomBytesRatio": 0.25, "randomizedPayloadPoolSize": 20}, "w.yaml")
    pool = w.payloads()
    assert len(pool) == 20 and len(set(pool)) == 20
    for p in pool:
        assert len(p) == 4000 and p[1000:] == bytes(3000)
    # compressible like OMB's: about the random quarter is left after compression
    ratio = len(zlib.compress(pool[0], 9)) / 4000
    assert 0.24 <= ratio <= 0.30, ratio
    full = parse_workload({"messageSize": 4000}, "w.yaml").payloads()[0]
    assert len(zlib.compress(full, 9)) / 4000 > 0.99
    assert w.to_omb()["randomBytesRatio"] == 0.25


@pytest.mark.parametrize(("doc", "message"), [
    ({"useRandomizedPayloads": True, "randomBytesRatio": 1.5}, "randomBytesRatio must be between 0 and 1"),
    ({"useRandomizedPayloads": "yes"}, "useRandomizedPayloads must be true or false"),
    ({"useRandomizedPayloads": True, "messageSize": 1_000_000, "randomizedPayloadPoolSize": 1000},
     "MiB kept in memory"),
    ({"producerStartRate": 0}, "producerStartRate must be a positive"),
    ({"producerStartRate": 100, "producerIncrementRate": 10}, "go together"),
])
def test_bad_payload_and_ramp_fields(doc, message):
    with pytest.raises(WorkloadError, match=message):
        parse_workload(doc, "w.yaml")


def test_a_rate_ramp_is_a_schedule_of_rate_steps_up_to_producer_rate():
    w = parse_workload({"producerRate": 2500, "producerStartRate": 1000, "producerIncrementRate": 500,
                        "producerIncrementSeconds": 10, "testDurationSeconds": 60}, "w.yaml")
    assert w.rate == 1000
    assert [(i.at_s, i.rate) for i in w.schedule] == [(10, 1500), (20, 2000), (30, 2500)]
    assert all(i.action == "rate" and i.target is None for i in w.schedule)
    # no ceiling: steps to the end of the measuring phase
    w = parse_workload({"producerRate": 0, "producerStartRate": 100, "producerIncrementRate": 100,
                        "producerIncrementSeconds": 15, "testDurationSeconds": 60}, "w.yaml")
    assert [(i.at_s, i.rate) for i in w.schedule] == [(15, 200), (30, 300), (45, 400)]


def test_every_field_not_acted_on_is_named_in_a_warning():
    w = parse_workload({"consumerBacklogSizeGB": 1, "backlogDrainRatio": 0.5,
                        "acceptableBacklog": 100, "producerPauseDuringDrain": True,
                        "randomBytesRatio": 0.5}, "w.yaml")
    text = "\n".join(w.warnings)
    for key in ("acceptableBacklog", "producerPauseDuringDrain", "randomBytesRatio"):
        assert key in text, key
    assert not [m for m in w.warnings if m.startswith(("w.yaml: consumerBacklogSizeGB",
                                                       "w.yaml: backlogDrainRatio"))]
    assert w.backlog_bytes == 2**30 and w.drain_ratio == 0.5


@pytest.mark.parametrize(("doc", "message"), [
    ({"consumerBacklogSizeGB": -1}, "consumerBacklogSizeGB must be 0 or more"),
    ({"consumerBacklogSizeGB": 1, "backlogDrainRatio": 2}, "backlogDrainRatio must be between 0 and 1"),
    ({"consumerBacklogSizeGB": 1, "producerRate": 0}, "needs a fixed producerRate"),
    ({"consumerBacklogSizeGB": 1, "subscriptionsPerTopic": 0}, "needs at least one subscription"),
])
def test_bad_backlog_fields(doc, message):
    with pytest.raises(WorkloadError, match=message):
        parse_workload(doc, "w.yaml")


def test_the_pacing_window_is_read_recorded_and_bounded():
    assert parse_workload({}, "w.yaml").pacing_window_ms == 0.8  # the default
    w = parse_workload({"pacingWindowMs": 0}, "w.yaml")
    assert w.pacing_window_ms == 0.0
    assert w.to_omb()["pacingWindowMs"] == 0.0  # run.json and suites' workload files keep it
    assert parse_workload(w.to_omb(), "run.json").pacing_window_ms == 0.0
    assert parse_workload({"pacingWindowMs": 0.4}, "w.yaml").pacing_window_ms == 0.4
    for bad, message in ((-0.1, "pacingWindowMs must be 0 or more"),
                         (1001, "pacingWindowMs must be at most 1,000"),
                         ("soon", "pacingWindowMs")):
        with pytest.raises(WorkloadError, match=message):
            parse_workload({"pacingWindowMs": bad}, "w.yaml")
