"""End-to-end runs against a real nats-server with JetStream: runs that start their own server
(local runtime: a plain run, a run with the server killed and started again, a run beside Redis
turned into a report), and one server started once for the module, which the other runs and
checks reach as an existing server (`nats@127.0.0.1:PORT`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import pyarrow.dataset as ds
import pytest

from analysis.report import build_report
from analysis.sink import ParquetSink
from collectors.nats import NatsTelemetry
from compose.nats import MONITOR_ENDPOINT, ConnectFailed, NatsLocalStack, find_server, server_version
from compose.process import free_port, port_in_use, start_process, stop_process
from loadgen.core.driver import OutMessage
from loadgen.core.stack import StackContext
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.platforms.nats import NatsConsumer, NatsDriver, stream_name
from loadgen.run import Run, RunSummary
from tests.conftest import assert_rate, none_left, pids_gone
from tests.integration.conftest import run_cli, run_json
from tests.integration.test_redis_run import _one_error_line

pytestmark = pytest.mark.integration

RATE = 2000.0


def _table(run_dir: Path, name: str) -> dict:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


@pytest.fixture
def nothing_left_running() -> Iterator[None]:
    """Fails the test if it leaves a nats-server running that was not there before."""
    with none_left("nats-server", 15):
        yield


# ---- runs that start their own server (local runtime) -----------------------------------------

def test_local_runtime_runs_and_cleans_up(tmp_path, nothing_left_running):
    run_dir = tmp_path / "run"
    # two load processes: the second one adopts the stream the first created
    res = run_cli(["run", "nats:runtime=local", "--rate", "1000", "--duration", "3", "--warmup",
                   "1", "--partitions", "2", "--producers", "2", "--consumers", "2", "--processes",
                   "2", "--track-delivery", "--headless", "--out", str(run_dir)])
    assert res.returncode == 0, res.stderr
    assert "starting nats-server" in res.stderr
    meta = run_json(run_dir)
    (target,) = meta["targets"]
    assert target["runtime"] == "local" and re.fullmatch(r"2\.\d+\.\d+", target["version"])
    (totals,) = meta["totals"]
    assert totals["consumed"] == totals["produced"] == 4000 and totals["drained"]
    assert totals["duplicates"] == 0 and len(meta["load_placement"]) == 2
    assert pids_gone(target["pids"], 15)
    assert not Path(target["config"]["data_dir"]).exists()
    for endpoint in (target["endpoints"]["nats"], target["endpoints"][MONITOR_ENDPOINT]):
        port = int(endpoint.rsplit(":", 1)[1])
        assert endpoint.split("//")[-1].startswith("127.0.0.1:") and not port_in_use(port)
    # the server's log outlives its data dir, in the run's log dir
    (logs,) = (run_dir / "logs").iterdir()
    assert "Server is ready" in (logs / "nats.log").read_text()
    ticks = _table(run_dir, "ticks")
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    assert all(ticks["cpu_percent"][i] > 0 and ticks["memory_bytes"][i] > 1_000_000
               for i in measuring)


def test_kill_and_start_the_server(tmp_path, nothing_left_running):
    """SIGKILL to the server 3 s into the measurement, started again 2 s later on the same
    store: publishing fails while it is down and goes on after; every stored message is
    consumed (redeliveries of messages whose acks were lost count as duplicates)."""
    run_dir = tmp_path / "run"
    res = run_cli(["run", "nats:runtime=local", "--rate", "500", "--duration", "10", "--warmup",
                   "1", "--partitions", "2", "--track-delivery", "--headless", "--out",
                   str(run_dir), "--at", "3s:kill=nats", "--at", "5s:start=nats"], timeout_s=180)
    assert res.returncode == 0, res.stderr[-2000:]
    meta = run_json(run_dir)
    (totals,) = meta["totals"]
    assert totals["drained"] and totals["final_lag"] == 0
    assert totals["send_errors"] > 0  # the publishes while the server was down
    # every message the server stored was consumed: those acknowledged, and a few whose
    # acknowledgement the kill cut off (counted as send errors, stored all the same)
    broker = _table(run_dir, "broker")
    stored = sum(v for n, v in zip(broker["name"], broker["value"], strict=True)
                 if n.startswith("partition."))
    assert totals["consumed"] - totals["duplicates"] == stored
    assert 0 < totals["produced"] <= stored <= totals["produced"] + totals["send_errors"]
    events = _table(run_dir, "events")
    kinds = events["kind"]
    assert kinds.index("fault-kill") < kinds.index("fault-start")
    assert "broker-died" not in kinds  # the fault's kill is not a death
    ticks = _table(run_dir, "ticks")
    after = [ticks["produced"][i] for i, (p, e) in enumerate(zip(ticks["phase"], ticks["elapsed_s"],
                                                                    strict=True))
             if p == "measuring" and e > 8.5]
    assert after and all(n > 400 for n in after), after  # back at the rate after the start
    (target,) = meta["targets"]
    assert pids_gone(target["pids"], 15)


def test_pause_resume_and_restart_keep_the_stream(nothing_left_running):
    """The fault hooks on a local server: paused it does not answer, resumed it does, restarted
    (SIGTERM, started again on the same store) it has a new pid and still holds the stream."""
    events: list[str] = []
    target = resolve_target("nats:runtime=local")
    stack = NatsLocalStack(target, "nats")
    stack.attach(StackContext(run_id="nats-faults", events=lambda kind, _detail: events.append(kind)))

    async def scenario() -> None:
        await stack.up(print)
        await stack.ready(30, print)
        endpoint = stack.describe().endpoints["nats"]
        (first,) = stack.describe().pids
        assert stack.brokers() == ["nats"]
        driver = NatsDriver(target, endpoint)
        await driver.connect()
        await driver.create_topic("kept", 1, [])
        producer = await driver.producer("kept", 0)
        await producer.send_batch([OutMessage(b"z" * 10, None, time.time_ns()) for _ in range(10)])
        await producer.close()
        await driver.close()
        await stack.fault("pause", "nats")
        with pytest.raises(ConnectFailed):
            await server_version(endpoint, 1.0)
        await stack.fault("resume", "nats")
        assert await server_version(endpoint, 5.0)
        await stack.fault("restart", "nats")
        (second,) = stack.describe().pids
        assert second != first
        nc = await nats.connect(f"nats://{endpoint}")
        info = await nc.jsm().stream_info(stream_name("kept"))
        await nc.close()
        assert info.state.messages == 10

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(stack.down())
    assert events == ["fault-pause", "fault-resume", "fault-restart"]


def test_beside_redis_in_one_report(spark, tmp_path, nothing_left_running):
    """Two targets side by side at 1,000 msg/s each, then the report on the run: both targets
    with the rate they had."""
    run_dir = tmp_path / "run"
    res = run_cli(["run", "nats:runtime=local", "redis:runtime=local", "--rate", "1000",
                   "--duration", "5", "--warmup", "1", "--headless", "--out", str(run_dir)],
                  timeout_s=180)
    assert res.returncode == 0, res.stderr[-2000:]
    assert [t["produced"] for t in run_json(run_dir)["totals"]] == [6000, 6000]
    report = build_report([run_dir], out_dir=tmp_path / "report", formats="md")
    text = (report if report.suffix == ".md" else report.parent / "report.md").read_text()
    # the runs-and-targets table (other tables, e.g. the load generator's, start alike)
    runs = text[text.index("## Runs and targets"):]
    runs = runs[:runs.index("\n## ", 4)]
    targets = {ln.split("|")[1].strip(): [c.strip() for c in ln.split("|")[3:6]]
               for ln in runs.splitlines() if re.match(r"\| (nats|redis):runtime=local \| \d", ln)}
    assert targets["nats:runtime=local"][:2] == ["nats", "local"]
    assert re.fullmatch(r"2\.\d+\.\d+", targets["nats:runtime=local"][2])
    assert targets["redis:runtime=local"][:2] == ["redis", "local"]
    throughput = text[text.index("## Throughput"):]
    throughput = throughput[:throughput.index("\n## ", 4)]
    assert re.search(r"\|  \| nats:runtime=local \| redis:runtime=local \|", throughput)
    for row in ("messages produced", "messages consumed"):
        (line,) = [ln for ln in throughput.splitlines() if ln.startswith(f"| {row} |")]
        nats_count, redis_count = (int(c.strip().replace(",", "")) for c in line.split("|")[2:4])
        assert 4900 <= nats_count <= 5100 and 4900 <= redis_count <= 5100, line
    (line,) = [ln for ln in throughput.splitlines() if ln.startswith("| produce mean (msg/s) |")]
    assert all(abs(float(c.strip().replace(",", "")) - 1000) < 20 for c in line.split("|")[2:4]), line


# ---- one server for the rest of the module -------------------------------------------------

@dataclass(frozen=True)
class Server:
    endpoint: str
    monitor: str

    def target(self, options: str = "") -> str:
        return f"nats{':' + options if options else ''}@{self.endpoint}"

    def jsz(self) -> dict:
        with urllib.request.urlopen(f"{self.monitor}/jsz?consumers=true", timeout=5) as resp:
            return dict(json.loads(resp.read()))

    def consumer(self, stream: str, durable: str) -> dict:
        """The consumer's figures as the server's monitoring endpoint shows them."""
        for account in self.jsz()["account_details"]:
            for s in account.get("stream_detail") or []:
                if s["name"] == stream:
                    for c in s.get("consumer_detail") or []:
                        if c["name"] == durable:
                            return dict(c)
        raise AssertionError(f"no consumer {durable} of stream {stream} in /jsz")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    stack = NatsLocalStack(resolve_target("nats:runtime=local"), "nats")

    async def up() -> None:
        await stack.up(print)
        await stack.ready(30, print)

    try:
        run_precise(up())
        desc = stack.describe()
        yield Server(desc.endpoints["nats"], desc.endpoints[MONITOR_ENDPOINT])
    finally:
        run_precise(stack.down())


def _run(workload: Workload, specs: list[str], run_dir: Path, track_ids: bool = False) -> RunSummary:
    run = Run(workload, unique_labels([resolve_target(s) for s in specs]), out_dir=run_dir,
              audit=track_ids, recorder=ParquetSink)
    return run_precise(run.execute())


@pytest.fixture(scope="module")
def fixed_rate_run(server: Server, tmp_path_factory) -> tuple[Path, RunSummary, dict]:
    """10 s at 2,000 msg/s: 2 partitions, 2 consumers sharing one durable consumer; the
    stream's state as the server reports it right after the run."""
    run_dir = tmp_path_factory.mktemp("nats-fixed") / "run"
    workload = Workload(name="nats-fixed-rate", rate=RATE, duration_s=10, warmup_s=2,
                        partitions=2, consumers=2, message_size=1024)
    summary = _run(workload, [server.target()], run_dir, track_ids=True)
    return run_dir, summary, server.jsz()


def test_rate_within_two_percent(fixed_rate_run):
    run_dir, summary, _ = fixed_rate_run
    ticks = _table(run_dir, "ticks")
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    assert len(measuring) == 10
    produced = sum(ticks["produced"][i] for i in measuring)
    rows = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist()
    assert_rate(rows, summary.targets[0].produced, RATE, 2)
    assert sum(ticks["produced_bytes"][i] for i in measuring) == produced * 1024


def test_every_message_consumed_exactly_once(fixed_rate_run):
    run_dir, summary, _ = fixed_rate_run
    (t,) = summary.targets
    assert t.send_errors == 0 and t.receive_errors == 0
    assert t.produced == int(RATE * 12)  # warm-up + measuring slots, none skipped
    assert t.consumed == t.produced == t.expected
    assert t.duplicates == 0
    assert t.drained and t.final_lag == 0
    ticks = _table(run_dir, "ticks")
    assert ticks["lag_total"][max(range(len(ticks["seq"])), key=ticks["seq"].__getitem__)] == 0
    # the server's own count of messages stored per partition's subject, tick by tick
    broker = _table(run_dir, "broker")
    stored: dict[str, float] = {}
    for name, value in zip(broker["name"], broker["value"], strict=True):
        if name.startswith("partition."):
            stored[name] = stored.get(name, 0) + value
    assert stored == {"partition.0.produced": t.produced / 2, "partition.1.produced": t.produced / 2}


def test_the_server_stored_what_was_acknowledged(fixed_rate_run, server):
    """The stream holds exactly the acknowledged messages, spread evenly over the partitions'
    subjects; the external server kept running and the run deleted its stream afterwards."""
    run_dir, summary, jsz = fixed_rate_run
    meta = run_json(run_dir)
    (target,) = meta["targets"]
    assert target["runtime"] == "external" and target["version"].startswith("2.")
    assert jsz["messages"] == 0  # the stream is gone: the run cleaned up the existing server

    async def stored() -> dict[str, int]:
        # a second run's stream, kept: the per-subject counts come from the server itself
        driver = NatsDriver(resolve_target(server.target()), server.endpoint)
        await driver.connect()
        topic = f"stored-{time.time_ns()}"
        await driver.create_topic(topic, 2, [])
        producer = await driver.producer(topic, 0)
        await producer.send_batch([OutMessage(b"x" * 100, None, time.time_ns()) for _ in range(301)])
        await producer.close()
        nc = await nats.connect(f"nats://{server.endpoint}")
        info = await nc.jsm().stream_info(stream_name(topic), subjects_filter=">")
        await nc.close()
        await driver.delete_topic(topic)
        await driver.close()
        return {"messages": info.state.messages, **(info.state.subjects or {})}

    counts = asyncio.run(stored())
    assert counts.pop("messages") == 301
    assert sorted(counts.values()) == [150, 151] and len(counts) == 2
    assert summary.targets[0].produced == int(RATE * 12)


async def _stored(target, server: Server, prefix: str, partitions: int,
                  count: int) -> tuple[NatsDriver, str, str]:
    """A connected driver, and a new topic with one subscription holding `count` messages of
    64 B: (driver, topic, subscription)."""
    driver = NatsDriver(target, server.endpoint)
    await driver.connect()
    topic, sub = f"{prefix}-{time.time_ns()}", "streambench-sub-0"
    await driver.create_topic(topic, partitions, [sub])
    producer = await driver.producer(topic, 0)
    await producer.send_batch([OutMessage(b"y" * 64, None, time.time_ns()) for _ in range(count)])
    await producer.close()
    return driver, topic, sub


def test_lag_is_the_servers_figure(server):
    """500 produced, a batch of them consumed (acknowledged) and 30 more pulled without an ack:
    the collector's lag is the server's num_pending + num_ack_pending (read independently from
    /jsz) and is what is left unacknowledged."""
    target = resolve_target(server.target("fetch=100"))

    async def scenario() -> tuple[int, int, dict, int]:
        driver, topic, sub = await _stored(target, server, "lag", 2, 500)
        consumer = await driver.consumer(topic, sub, 0, track_ids=True)
        consumed = 0
        for _ in range(20):
            batch = await consumer.receive()
            if batch is not None:
                consumed = batch.count
                break
        await consumer.close()  # sends its acknowledgements before it closes
        # 30 pulled and not acknowledged: delivered, pending the ack
        nc = await nats.connect(f"nats://{server.endpoint}")
        pull = await nc.jetstream().pull_subscribe_bind(sub, stream_name(topic))
        unacked = await pull.fetch(30, timeout=5)
        assert len(unacked) == 30
        collector = NatsTelemetry(server.endpoint, stream_name(topic), 2, [sub], server.monitor)
        await collector.start()
        reading = await collector.sample()
        await collector.close()
        figures = server.consumer(stream_name(topic), sub)
        await nc.close()
        await driver.delete_topic(topic)
        await driver.close()
        assert reading.lag is not None
        return consumed, reading.lag.total, figures, int(reading.broker["js_messages"])

    consumed, lag, figures, stored = asyncio.run(scenario())
    assert 0 < consumed <= 100
    # the 30 pulled, and what the consumer had been delivered past its first batch and handed
    # back as it closed (the server counts those as pending until it delivers them again)
    assert 30 <= figures["num_ack_pending"] <= 30 + 100 - consumed
    assert lag == figures["num_pending"] + figures["num_ack_pending"] == 500 - consumed
    assert stored >= 500  # the server's /jsz count of stored messages includes this stream's


def test_a_closing_consumer_hands_back_what_it_holds(server):
    """A consumer closed (stopped by the user, or at the run's end) with messages delivered to
    it and not yet read hands them back at once: the server holds none of them as delivered
    and unacknowledged waiting for ack_wait (30 s): another consumer gets them at once."""
    target = resolve_target(server.target("fetch=100"))

    async def scenario() -> tuple[int, int, float]:
        driver, topic, sub = await _stored(target, server, "handback", 1, 200)
        consumer = await driver.consumer(topic, sub, 0, track_ids=False)
        assert isinstance(consumer, NatsConsumer)
        await consumer._pull()  # one pull request of 100, delivered and not read
        for _ in range(50):
            if len(consumer._arrived) == 100:
                break
            await asyncio.sleep(0.05)
        held = len(consumer._arrived)
        await consumer.close()
        nc = await nats.connect(f"nats://{server.endpoint}")
        pull = await nc.jetstream().pull_subscribe_bind(sub, stream_name(topic))
        got, start = 0, time.monotonic()
        with contextlib.suppress(nats.errors.TimeoutError):
            while got < 200:
                msgs = await pull.fetch(200 - got, timeout=3)
                got += len(msgs)
                for m in msgs:
                    await m.ack()
        took = time.monotonic() - start
        await nc.close()
        await driver.delete_topic(topic)
        await driver.close()
        return held, got, took

    held, got, took = asyncio.run(scenario())
    assert held == 100
    assert got == 200 and took < 10, (got, took)  # every message, well within ack_wait


def test_a_closing_consumer_hands_back_what_it_has_not_dispatched_yet(server):
    """Messages the client has read from the socket but not yet handed to the consumer (its
    dispatch is slowed here, as on a busy machine) when the consumer closes are handed back
    too: another client reads every one of them again at once, not ack_wait (30 s) later,
    and none is left pending."""
    target = resolve_target(server.target("fetch=100"))

    async def scenario() -> tuple[int, int, int]:
        driver, topic, sub = await _stored(target, server, "undispatched", 1, 100)
        consumer = await driver.consumer(topic, sub, 0, track_ids=False)
        assert isinstance(consumer, NatsConsumer)
        dispatch = consumer._sub._cb

        async def slow(msg):
            await asyncio.sleep(0.005)
            await dispatch(msg)

        consumer._sub._cb = slow
        await consumer._pull()  # one pull request of 100
        for _ in range(100):
            if consumer._sub._pending_queue.qsize() >= 50:
                break
            await asyncio.sleep(0.01)
        queued = consumer._sub._pending_queue.qsize()
        await consumer.close()
        nc = await nats.connect(f"nats://{server.endpoint}")
        pull = await nc.jetstream().pull_subscribe_bind(sub, stream_name(topic))
        msgs: list = []
        with contextlib.suppress(nats.errors.TimeoutError):
            while len(msgs) < 100:
                msgs += await pull.fetch(100 - len(msgs), timeout=3)
        for m in msgs:
            await m.ack_sync()
        # (a message handed back counts as pending its acknowledgement until it is read again)
        pending = server.consumer(stream_name(topic), sub)["num_ack_pending"]
        await nc.close()
        await driver.delete_topic(topic)
        await driver.close()
        return queued, pending, len(msgs)

    queued, pending, again = asyncio.run(scenario())
    assert queued >= 50  # the close found them in the client's queue, not yet dispatched
    assert pending == 0 and again == 100, (pending, again)


def test_a_failed_sample_loses_no_count(server):
    """A sample that fails after the stream's counts were read (here the durable consumer it asks
    about does not exist yet; in a run, the server dies between two requests) keeps none of its
    readings: the next sample's per-partition counts cover both intervals, so they add up to the
    messages stored."""
    target = resolve_target(server.target())

    async def scenario() -> tuple[list[float], str, int]:
        driver = NatsDriver(target, server.endpoint)
        await driver.connect()
        topic, sub = f"failed-{time.time_ns()}", "streambench-sub-0"
        await driver.create_topic(topic, 2, [])
        producer = await driver.producer(topic, 0)
        nc = await nats.connect(f"nats://{server.endpoint}")
        collector = NatsTelemetry(server.endpoint, stream_name(topic), 2, [sub], server.monitor)
        await collector.start()
        sums, error = [], ""
        for step in range(3):
            await producer.send_batch([OutMessage(b"z" * 32, None, time.time_ns())
                                       for _ in range(100 * (step + 1))])
            if step == 2:  # the consumer is there from now on
                await nc.jsm().add_consumer(stream_name(topic), durable_name=sub, ack_policy="explicit")
            try:
                reading = await collector.sample()
            except Exception as exc:  # the consumer is not there yet
                error = type(exc).__name__
                continue
            sums.append(sum(v for k, v in reading.broker.items() if k.startswith("partition.")))
        await collector.close()
        await producer.close()
        stored = int((await nc.jsm().stream_info(stream_name(topic))).state.messages)
        await nc.close()
        await driver.delete_topic(topic)
        await driver.close()
        return sums, error, stored

    sums, error, stored = asyncio.run(scenario())
    assert error, "the first two samples should fail: the consumer does not exist yet"
    assert stored == 600 and sums == [600.0], (sums, stored)


# through the command line: an option's value, a stack that cannot be made, a server that is
# not there (the other bad targets are checked without a process: tests/unit/test_nats_parts.py)
BAD_INPUTS = [
    (["run", "nats:storage=disk", "--headless"], "expected one of file, memory"),
    (["run", "nats:monitor=http://127.0.0.1:8222", "--headless"], "monitor= names the monitoring"),
]


@pytest.mark.parametrize("args, fragment", BAD_INPUTS, ids=[" ".join(a[:2]) for a, _ in BAD_INPUTS])
def test_bad_input_one_line_exit_2(args, fragment, tmp_path, nothing_left_running):
    res = run_cli([*args, "--out", str(tmp_path / "run")])
    assert res.returncode == 2, res.stderr
    _one_error_line(res.stderr, fragment)


def test_a_server_without_jetstream(tmp_path, nothing_left_running):
    """A plain NATS server (no -js) is refused in one line."""
    port = free_port()
    proc = start_process([str(find_server()), "-a", "127.0.0.1", "-p", str(port)], tmp_path / "plain.log")
    try:
        deadline = time.monotonic() + 10
        while not port_in_use(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        res = run_cli(["run", f"nats@127.0.0.1:{port}", "--headless", "--duration", "1",
                       "--out", str(tmp_path / "run")])
    finally:
        stop_process(proc)
    assert res.returncode == 3, res.stderr  # the server answers, but cannot be used
    _one_error_line(res.stderr, "JetStream")
