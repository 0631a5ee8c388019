import pytest

from loadgen.core.errors import TargetError, WorkloadError
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload, bundled_workloads, load_workload, parse_workload
from loadgen.platforms import resolve_target


def test_omb_fields_and_minutes(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text(
        "name: x\ntopics: 1\npartitionsPerTopic: 16\nmessageSize: 100\nproducersPerTopic: 2\n"
        "subscriptionsPerTopic: 1\nconsumerPerSubscription: 4\nproducerRate: 50000\n"
        "testDurationMinutes: 15\nwarmupDurationMinutes: 1\nkeyDistributor: NO_KEY\n"
        "payloadFile: payload/payload-100b.data\n"
    )
    (tmp_path / "payload").mkdir()
    (tmp_path / "payload" / "payload-100b.data").write_bytes(bytes(range(100)))
    w = load_workload(str(f))
    assert (w.partitions, w.message_size, w.producers, w.consumers) == (16, 100, 2, 4)
    assert w.rate == 50000 and w.duration_s == 900 and w.warmup_s == 60
    assert w.warnings == ()
    assert w.payloads() == [bytes(range(100))]


def test_seconds_override_minutes_and_unknown_key_warns():
    w = parse_workload({"name": "x", "testDurationMinutes": 5, "testDurationSeconds": 20,
                        "partitionPerTopic": 3}, "w.yaml")
    assert w.duration_s == 20
    assert w.warmup_s == 60
    assert len(w.warnings) == 1
    assert "partitionPerTopic" in w.warnings[0] and "partitionsPerTopic" in w.warnings[0]


@pytest.mark.parametrize("doc, fragment", [
    ({"producerRate": -5}, "producerRate"),
    ({"messageSize": 0}, "messageSize"),
    ({"partitionsPerTopic": "two"}, "partitionsPerTopic"),
    ({"partitionsPerTopic": 1.5}, "whole number"),
    ({"testDurationSeconds": 0}, "duration"),
    ({"keyDistributor": "SOMETIMES"}, "keyDistributor"),
    (["a", "list"], "mapping"),
])
def test_bad_workloads(doc, fragment):
    with pytest.raises(WorkloadError, match=fragment):
        parse_workload(doc, "w.yaml")


def test_overrides_validate():
    w = Workload()
    assert w.with_overrides(rate=200.0, partitions=None).rate == 200.0
    with pytest.raises(WorkloadError):
        w.with_overrides(rate=0.0)
    with pytest.raises(WorkloadError):
        w.with_overrides(message_size=0)


def test_bundled_workloads_load():
    names = bundled_workloads()
    assert "redis-latency-1kb" in names
    for name in names:
        assert load_workload(name).name


def test_missing_workload_names_closest(tmp_path):
    with pytest.raises(WorkloadError, match="redis-latency-1kb"):
        load_workload("redis-latency-1k")


def test_malformed_yaml(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("name: [unclosed\n")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(str(f))


def test_targets():
    t = resolve_target("redis:aof,fsync=always")
    assert t.platform == "redis" and t.options["aof"] is True and t.options["fsync"] == "always"
    assert t.runtime == "local"
    ext = resolve_target("redis@127.0.0.1:6380")
    assert ext.runtime == "external" and ext.address == "127.0.0.1:6380"
    labels = [x.label for x in unique_labels([resolve_target("redis"), resolve_target("redis")])]
    assert labels == ["redis", "redis#2"]


@pytest.mark.parametrize("spec, fragment", [
    ("kafak", "unknown platform"),
    ("redis:aoff", "did you mean aof"),
    ("redis:fsync=sometimes", "one of"),
    ("redis:port=99999", "port"),
    ("redis:fsync", "needs a value"),
    ("redis@", "nothing after"),
    ("redis:port=7000@127.0.0.1:6379", "do not apply"),
])
def test_bad_targets(spec, fragment):
    with pytest.raises(TargetError, match=fragment):
        resolve_target(spec)
