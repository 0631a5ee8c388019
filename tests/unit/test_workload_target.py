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


def _numeric_options() -> list[tuple[str, str]]:
    """Every (platform, option) whose value is a whole number."""
    from loadgen.platforms import PLATFORMS

    found = []
    for name, platform in sorted(PLATFORMS.items()):
        for key, opt in sorted(platform.options.items()):
            if opt.refuse or opt.setting is not None or opt.choices:
                continue
            try:
                value = opt.parse("1")
            except ValueError:
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                found.append((name, key))
    return found


NUMERIC_OPTIONS = _numeric_options()


def test_the_numeric_options_are_found():
    assert {("redis", "maxlen"), ("kafka", "linger_ms"), ("nats", "ack_wait"),
            ("pulsar", "batch_max_messages"), ("rabbitmq", "management_port")} <= set(NUMERIC_OPTIONS)


@pytest.mark.parametrize(("platform", "key"), NUMERIC_OPTIONS)
def test_no_numeric_option_takes_what_a_signed_64_bit_integer_cannot_hold(platform, key):
    for value in ("99999999999999999999999", str(2**63)):
        # the range (a port: between 1 and 65535)
        with pytest.raises(TargetError, match=rf"option {key}='{value}' of {platform}: must be "
                                              r".*\b[\d,]+ (and|to) [\d,]+"):
            resolve_target(f"{platform}:{key}={value}")


@pytest.mark.parametrize(("spec", "bound"), [
    ("redis:maxlen", 2**63 - 1), ("nats:max_msgs", 2**63 - 1), ("kafka:flush_ms", 2**63 - 1),
    ("kafka:batch_size", 2**31 - 1), ("kafka:linger_ms", 900_000),
    ("kafka:fetch_max_wait_ms", 300_000), ("kafka:replication", 32_767),
    ("nats:ack_wait", (2**63 - 1) // 10**9), ("pulsar:batch_max_bytes", 2**31 - 1),
    ("rabbitmq:management_port", 65_535), ("rabbitmq:store_interval_ms", 86_400_000),
])
def test_numeric_options_take_their_platforms_bound_and_no_more(spec, bound):
    key = spec.partition(":")[2]
    assert resolve_target(f"{spec}={bound}").options[key] == bound
    with pytest.raises(TargetError, match=f"to {bound:,}"):
        resolve_target(f"{spec}={bound + 1}")


@pytest.mark.parametrize(("spec", "needs"), [
    ("redis:fsync=always", "aof"), ("redis:aof=false,fsync=no", "aof"),
    ("kafka:acks=1,idempotence", "acks=all"),
    ("pulsar:batching=false,batch_delay_ms=5", "batching"),
])
def test_an_option_without_the_one_it_acts_through_is_refused(spec, needs):
    with pytest.raises(TargetError, match=f"has no effect without {needs}: give "):
        resolve_target(spec)


@pytest.mark.parametrize("spec", ["redis:aof,fsync=always", "kafka:idempotence",
                                  "pulsar:batch_delay_ms=5", "redis:aof"])
def test_an_option_with_the_one_it_acts_through_is_taken(spec):
    assert resolve_target(spec).explicit
