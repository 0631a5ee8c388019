"""End-to-end runs against a real Pravega standalone (0.13, from its Maven Central jars): a run
that starts its own and kills it (local runtime, a fault), then one standalone started once for
the module, which the other runs reach as an existing cluster (`pravega@tcp://…`), so that only
one standalone runs at a time."""

from __future__ import annotations

import asyncio
import itertools
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from analysis.report import build_report
from analysis.sink import ParquetSink
from compose.pravega import CONTROLLER_ENDPOINT, MAIN_CLASS, PravegaLocalStack
from compose.process import port_in_use
from loadgen.core.collector import Reading
from loadgen.core.driver import OutMessage
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.platforms.pravega import PravegaDriver, partition_keys, segment_of
from loadgen.platforms.pravega_host import EVENT_FRAME_BYTES, HEADER
from loadgen.platforms.pravega_telemetry import PravegaTelemetry, reader_group_name
from loadgen.run import Run, RunSummary
from tests.conftest import pids_gone, started_here
from tests.integration.conftest import run_cli, run_json
from tests.integration.test_redis_run import _one_error_line

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 300  # the first run fetches the standalone's jars
SCOPE = "streambench"


def _table(run_dir: Path, name: str) -> dict:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


def started_pids() -> set[int]:
    """Standalones and client host processes this test process could have started: its
    descendants, and orphans."""
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    found = set()
    for p in psutil.process_iter(["cmdline", "ppid"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if (MAIN_CLASS in cmdline or "loadgen.platforms.pravega_host" in cmdline) and (
                p.pid in mine or (p.info["ppid"] == 1 and started_here(p))):
            found.add(p.pid)
    return found


@pytest.fixture
def nothing_left_running() -> Iterator[None]:
    """Fails the test if it leaves a standalone or a client host running that was not there before."""
    before = started_pids()
    yield
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and started_pids() - before:
        time.sleep(0.2)
    assert started_pids() - before == set(), "a process started by the test still runs"


# ---- a run with a standalone of its own, killed half-way ---------------------------------------
# (first in the module, before the module's standalone exists)

def _events_in_order(run_dir: Path) -> list[dict]:
    return sorted(ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist(),
                  key=lambda e: e["time"])


def test_kill_fault_on_the_local_standalone(tmp_path, nothing_left_running):
    """The standalone killed 2 s into a 4 s measuring phase: the producer and both consumers
    notice within a second and stop writing to it, a tick comes every second through the
    outage and the drain (which nothing is left to drain from, so it is skipped at its first
    tick), and the run exits 0 (the kill was asked for)."""
    run_dir = tmp_path / "run"
    res = run_cli(["run", "pravega", "--runtime", "local", "--rate", "500", "--duration", "4",
                   "--warmup", "1", "--partitions", "2", "--consumers", "2",
                   "--at", "2s:kill=pravega", "--headless", "--out", str(run_dir)],
                  timeout_s=CLI_TIMEOUT_S)
    assert "Traceback" not in res.stderr
    assert "starting Pravega 0.13.0 standalone" in res.stderr
    assert res.returncode == 0, res.stderr[-3000:]
    meta = run_json(run_dir)
    (target,) = meta["targets"]
    assert target["runtime"] == "local" and target["version"] == "0.13.0"
    assert meta["broker_failures"] == []
    events = _events_in_order(run_dir)
    kinds = [e["kind"] for e in events]
    (kill,) = [e for e in events if e["kind"] == "fault-kill"]
    assert "SIGKILL" in kill["detail"]
    assert "broker-died" not in kinds  # a fault's kill is expected
    # the clients notice the kill at once and stop writing to the dead broker
    lost = [e for e in events if e["kind"] == "connection-lost"]
    assert sorted(e["detail"].split(":")[0] for e in lost) == [
        "consumer 0 of streambench-sub-0", "consumer 1 of streambench-sub-0", "producer 0"]
    assert all(0 <= (e["time"] - kill["time"]).total_seconds() < 1.5 for e in lost), lost
    (send_error,) = [e for e in events if e["kind"] == "send-error"]
    assert "ConnectionError" in send_error["detail"] and "connection refused" in send_error["detail"]
    # ticks every second from the kill to the end, the drain's included: the run's clock never
    # waits on the dead broker
    assert "coordinator-late" not in kinds
    ticks = sorted(_table(run_dir, "ticks")["time"])
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)]
    assert ticks[-1] > kill["time"] and max(gaps) < 1.5, gaps
    phases = _table(run_dir, "ticks")["phase"]
    assert phases.count("measuring") == 4 and phases.count("draining") == 1
    # no broker left to drain from: skipped at the drain's first tick; the target never recovered
    drain = next(e for e in events if e["kind"] == "phase" and e["phase"] == "draining")
    (skipped,) = [e for e in events if e["kind"] == "drain-skipped"]
    assert (skipped["time"] - drain["time"]).total_seconds() < 1.5
    (outcome,) = [e for e in events if e["kind"] in ("recovered", "not-recovered")]
    assert outcome["kind"] == "not-recovered" and "kill pravega" in outcome["detail"]
    (totals,) = meta["totals"]
    assert totals["produced"] > 0 and not totals["drained"]
    # the slots due after the kill failed without a write, each once
    assert 0 < totals["send_errors"] <= 500 * 3.5
    assert pids_gone(target["pids"])
    assert not Path(target["config"]["data_dir"]).exists()
    for url in target["endpoints"].values():
        assert not port_in_use(int(url.rsplit(":", 1)[1]))
    (logs,) = (run_dir / "logs").iterdir()
    assert "running locally now" in (logs / "pravega.out").read_text(errors="replace")


def _run_until_after_return(args: list[str], clients: int, ticks_after: int) -> tuple[int, str]:
    """`streambench run ARGS` headless, stopped (SIGINT, as a user's ctrl+c) once `ticks_after`
    measuring ticks have come after every one of `clients` reconnected: however long the
    broker took to come back, the run goes on long enough after it. (exit code, stderr)."""
    from tests.integration.conftest import CLI

    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    watchdog = threading.Timer(CLI_TIMEOUT_S, proc.kill)
    watchdog.start()
    err: list[str] = []
    back = threading.Event()

    def read_events() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if sum(" reconnected: " in e for e in err) >= clients:
                back.set()

    events = threading.Thread(target=read_events)
    events.start()
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:  # a line per tick
        if back.is_set() and line.startswith("measuring"):
            seen += 1
            if seen == ticks_after:
                proc.send_signal(signal.SIGINT)
    proc.wait()
    events.join()
    watchdog.cancel()
    return proc.returncode, "".join(err)


def test_clients_reconnect_to_a_standalone_started_again(tmp_path, nothing_left_running):
    """The standalone killed 2 s into the measuring phase and started again at 3 s (it comes
    back empty): the producer and both consumers lose their connection at once, try again with
    the load's backoff while nothing listens, and are back within seconds of the standalone
    answering, on the stream and reader group created again; the load runs at its full rate
    again by the end, and a tick comes every second throughout. The run is stopped (ctrl+c,
    which drains) 8 measuring ticks after the last client is back, however long the standalone
    took to start again."""
    run_dir = tmp_path / "run"
    workload = tmp_path / "short-drain.yaml"
    workload.write_text("name: short-drain\ndrainTimeoutSeconds: 5\n")
    rate = 500
    clients = ["consumer 0 of streambench-sub-0", "consumer 1 of streambench-sub-0", "producer 0"]
    code, err = _run_until_after_return(
        ["run", "pravega", "--runtime", "local", "--workload", str(workload),
         "--rate", str(rate), "--duration", "90", "--warmup", "1", "--partitions", "2",
         "--consumers", "2", "--at", "2s:kill=pravega", "--at", "3s:start=pravega",
         "--headless", "--out", str(run_dir)], clients=len(clients), ticks_after=8)
    assert "Traceback" not in err
    assert code == 130, err[-3000:]  # stopped by the signal, not at the 90 s end
    meta = run_json(run_dir)
    assert meta["broker_failures"] == [] and meta["stopped_early"]
    events = _events_in_order(run_dir)
    (kill,) = [e for e in events if e["kind"] == "fault-kill"]
    (start,) = [e for e in events if e["kind"] == "fault-start"]
    lost = [e for e in events if e["kind"] == "connection-lost"]
    back = [e for e in events if e["kind"] == "reconnected"]
    assert sorted(e["detail"].split(":")[0] for e in lost) == clients
    assert sorted(e["detail"].split(":")[0] for e in back) == clients
    assert all(0 <= (e["time"] - kill["time"]).total_seconds() < 1.5 for e in lost), lost
    # back once the standalone answers (a new client process each, the stream made again):
    # after the kill and within 10 s of fault-start, which is stamped once the stack's own probe
    # finds the standalone answering (a client can get there first)
    assert all(e["time"] > kill["time"] for e in back), (back, kill)
    assert all((e["time"] - start["time"]).total_seconds() < 10 for e in back), (back, start)
    ticks = sorted(ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist(),
                   key=lambda t: t["seq"])
    gaps = [(b["time"] - a["time"]).total_seconds() for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.5, gaps
    # the stretch after the return, from the run's own ticks: the 8 whose lines came after the
    # last reconnection's (the first may have ended a moment before the event), the last
    # three at the full rate
    back_at = max(e["time"] for e in back)
    after = [t for t in ticks if t["time"] > back_at]
    after_measuring = [t for t in after if t["phase"] == "measuring"]
    assert len(after_measuring) >= 7, (back_at, after)
    last = after_measuring[-3:]
    assert sum(t["produced"] for t in last) >= 0.9 * rate * sum(t["interval_s"] for t in last)
    # the consumers keep up from their return to the end: a reader takes events in slices and
    # its group moves a segment between readers now and then, so one second can come short and
    # the next long; over the stretch they read what was produced, and the drain reads the rest
    # of what the standalone holds. What it held unread when it was killed is gone (its streams
    # are in memory): at most the last moment's acknowledged messages
    assert sum(t["consumed"] for t in after) >= 0.9 * sum(t["produced"] for t in after)
    (totals,) = meta["totals"]
    assert totals["final_lag"] == 0 and 0 <= totals["expected"] - totals["consumed"] <= rate, totals
    # slots due while no broker was there failed, each once, without a write
    down_s = (back_at - kill["time"]).total_seconds()
    assert 0 < totals["send_errors"] <= rate * (down_s + 1)


def test_pause_over_the_drain_keeps_the_clock(tmp_path, nothing_left_running):
    """The standalone paused (SIGSTOP) 2 s into a 4 s measuring phase and left paused: a paused
    broker still takes connections, so no client counts it lost; the batches it leaves
    unanswered wait for their time-out beside the ticks, which come every second through the
    pause and the drain, and the drain (a broker is still there) lasts its time-out."""
    run_dir = tmp_path / "run"
    workload = tmp_path / "short-drain.yaml"
    workload.write_text("name: short-drain\ndrainTimeoutSeconds: 4\n")
    res = run_cli(["run", "pravega", "--runtime", "local", "--workload", str(workload),
                   "--rate", "500", "--duration", "4", "--warmup", "1", "--partitions", "2",
                   "--consumers", "2", "--at", "2s:pause=pravega", "--headless",
                   "--out", str(run_dir)], timeout_s=CLI_TIMEOUT_S)
    assert "Traceback" not in res.stderr
    assert res.returncode == 0, res.stderr[-3000:]
    meta = run_json(run_dir)
    assert meta["broker_failures"] == []
    events = _events_in_order(run_dir)
    kinds = [e["kind"] for e in events]
    assert "fault-pause" in kinds
    assert "connection-lost" not in kinds and "broker-died" not in kinds
    assert "coordinator-late" not in kinds
    ticks = sorted(_table(run_dir, "ticks")["time"])
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.5, gaps
    phases = _table(run_dir, "ticks")["phase"]
    assert phases.count("measuring") == 4 and 4 <= phases.count("draining") <= 6
    assert "drain-skipped" not in kinds and "drain-incomplete" in kinds
    (totals,) = meta["totals"]
    assert totals["produced"] > 0 and not totals["drained"]
    assert pids_gone(meta["targets"][0]["pids"])


# ---- one standalone for the rest of the module -------------------------------------------------

@dataclass(frozen=True)
class Standalone:
    controller: str
    pid: int

    def target(self, options: str = "") -> str:
        return f"pravega{':' + options if options else ''}@{self.controller}"


@pytest.fixture(scope="module")
def standalone() -> Iterator[Standalone]:
    stack = PravegaLocalStack(resolve_target("pravega:runtime=local"), "pravega")

    async def up() -> None:
        await stack.up(print)
        await stack.ready(60, print)

    try:
        run_precise(up())
        desc = stack.describe()
        yield Standalone(desc.endpoints[CONTROLLER_ENDPOINT], desc.pids[0])
    finally:
        run_precise(stack.down())


def _run(workload: Workload, specs: list[str], run_dir: Path, track_ids: bool = False) -> RunSummary:
    run = Run(workload, unique_labels([resolve_target(s) for s in specs]), out_dir=run_dir,
              audit=track_ids, recorder=ParquetSink)
    return run_precise(run.execute())


def test_every_message_consumed_once(standalone, tmp_path):
    """7 s at 1,000 msg/s of 1 KiB over 2 segments, 2 readers in one reader group, delivery
    tracked: every acknowledged message read exactly once, the backlog drained to 0."""
    run_dir = tmp_path / "run"
    workload = Workload(name="pravega-once", rate=1000, duration_s=6, warmup_s=1, partitions=2,
                        consumers=2, message_size=1024)
    summary = _run(workload, [standalone.target()], run_dir, track_ids=True)
    (t,) = summary.targets
    assert t.send_errors == 0 and t.receive_errors == 0
    assert t.produced == 7000  # warm-up + measuring slots, none skipped
    assert t.consumed == t.produced == t.expected
    assert t.duplicates == 0
    assert t.drained and t.final_lag == 0
    ticks = _table(run_dir, "ticks")
    assert sum(ticks["produced_bytes"]) == t.produced * 1024
    assert sum(ticks["consumed_bytes"]) == t.consumed * 1024
    lag = _table(run_dir, "lag")
    last = max(lag["seq"])
    assert {p: v for s, p, v in zip(lag["seq"], lag["partition"], lag["lag"], strict=True)
            if s == last} == {0: 0, 1: 0}
    (target,) = run_json(run_dir)["targets"]
    assert target["runtime"] == "external"


def test_writer_settings_in_force(standalone):
    """`producer.max_inflight_events=0` (the client's own default) makes the writer wait for
    each event's acknowledgement before it writes the next: a batch of 300 events then takes
    a round trip per event instead of one flush for all, timed against streambench's 10,000 in
    flight on the same standalone. The pipelined batch is timed three times and the fastest
    kept: a pause of the machine can only lengthen a timing, and it must not lengthen the
    one the other is compared with."""
    topic = f"inflight-{time.time_ns()}"

    async def timed(options: str, tries: int = 1) -> float:
        driver = PravegaDriver(standalone.controller, SCOPE, target=resolve_target(
            standalone.target(options)))
        await driver.connect()
        try:
            await driver.create_topic(topic, 1, [])
            producer = await driver.producer(topic, 0)
            try:
                await producer.send_batch([OutMessage(b"w", None, time.time_ns())])  # warmed up
                took = []
                for _ in range(tries):
                    start = time.perf_counter()
                    await producer.send_batch([OutMessage(b"z" * 100, None, time.time_ns())
                                               for _ in range(300)])
                    took.append(time.perf_counter() - start)
                return min(took)
            finally:
                await producer.close()
        finally:
            await driver.close()

    async def scenario() -> tuple[float, float]:
        pipelined = await timed("", tries=3)
        one_by_one = await timed("producer.max_inflight_events=0")
        driver = PravegaDriver(standalone.controller, SCOPE)
        await driver.connect()
        driver.adopt_topic(topic, 1)
        await driver.delete_topic(topic)
        await driver.close()
        return pipelined, one_by_one

    pipelined, one_by_one = run_precise(scenario())
    assert one_by_one > 5 * pipelined, (one_by_one, pipelined)


def test_client_settings_recorded(standalone, tmp_path):
    """A run with `producer.max_inflight_events=0`: run.json records it as the user's, and the
    reader groups' start as streambench's; every message arrives."""
    run_dir = tmp_path / "run"
    workload = Workload(name="pravega-clients", rate=200, duration_s=2, warmup_s=0, message_size=100)
    _run(workload, [standalone.target("producer.max_inflight_events=0")], run_dir)
    meta = run_json(run_dir)
    settings = meta["targets"][0]["settings"]
    assert settings["producer.max_inflight_events"] == {"value": "0", "source": "user",
                                                        "read_back": False}
    assert settings["consumer.read_from_tail"] == {"value": "false",
                                                   "source": "streambench default",
                                                   "read_back": False}
    totals = meta["totals"][0]
    assert totals["produced"] == totals["consumed"] == 400, totals


def _tail(manager, stream: str) -> dict[int, int]:
    name = f"tail-{time.time_ns()}"
    cut = manager.create_reader_group(name, SCOPE, stream, True).get_streamcut().get_segment_offset_map()
    manager.delete_reader_group(name, SCOPE)
    return dict(cut)


def test_routing_keys_land_on_their_segments(standalone):
    """The driver's copy of Pravega's key hash agrees with where the broker puts an event:
    each partition's routing key, and some message keys, land on the segment computed here."""
    import pravega_client

    manager = pravega_client.StreamManager(standalone.controller)
    stream = f"routing-{time.time_ns()}"
    manager.create_scope(SCOPE)
    policy = pravega_client.StreamScalingPolicy.fixed_scaling_policy(4)
    manager.create_stream_with_policy(SCOPE, stream, policy, pravega_client.StreamRetentionPolicy.none(), [])
    writer = manager.create_writer(SCOPE, stream, 0)
    keys = partition_keys(4)
    assert [segment_of(k, 4) for k in keys] == [0, 1, 2, 3]
    landed = {}
    before = _tail(manager, stream)
    for key in [*keys, *(f"order-{n}" for n in range(8))]:
        writer.write_event_bytes(b"x", key)
        writer.flush()
        after = _tail(manager, stream)
        (landed[key],) = [s for s in after if after[s] != before.get(s, 0)]
        before = after
    assert landed == {k: segment_of(k, 4) for k in landed}
    assert len(set(landed.values())) == 4


def test_lag_matches_the_reader_groups(standalone):
    """Two subscriptions, a consumer on the first only, 600 events written: once the first
    group's reader has written its position back, the lag streambench reports is the second
    group's 600 unread events (its unread bytes, tail − its stream cut as the client reads
    them, over the bytes of one event), on both segments."""
    import pravega_client

    topic, subs = f"groups-{time.time_ns()}", ["streambench-sub-0", "streambench-sub-1"]
    size = 100
    event_bytes = EVENT_FRAME_BYTES + HEADER.size + size

    def messages(n: int) -> list[OutMessage]:
        now = time.time_ns()
        return [OutMessage(b"x" * size, None, now) for _ in range(n)]

    def unread_per_group() -> list[int]:
        manager = pravega_client.StreamManager(standalone.controller)
        tail = sum(_tail(manager, topic).values())
        return [tail - sum(manager.create_reader_group(reader_group_name(topic, s), SCOPE, topic, False)
                           .get_streamcut().get_segment_offset_map().values()) for s in subs]

    async def scenario() -> tuple[Reading, list[int]]:
        driver = PravegaDriver(standalone.controller, SCOPE)
        await driver.connect()
        telemetry = PravegaTelemetry(standalone.controller, SCOPE, topic, 2, subs)
        try:
            await driver.create_topic(topic, 2, subs)
            await telemetry.start()
            consumer = await driver.consumer(topic, subs[0], 0, track_ids=False)
            producer = await driver.producer(topic, 0)
            await producer.send_batch(messages(150))
            await producer.send_batch(messages(450))
            consumed = 0
            deadline = time.monotonic() + 30
            while consumed < 600 and time.monotonic() < deadline:
                batch = await consumer.receive()
                consumed += batch.count if batch else 0
            assert consumed == 600
            # the reader writes its position back every 3 s; the first samples may still show
            # an older answer
            reading = await telemetry.sample()
            deadline = time.monotonic() + 20
            while (reading.lag is None or reading.lag.total != 600) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                reading = await telemetry.sample()
            groups = await asyncio.to_thread(unread_per_group)
            await producer.close()
            await consumer.close()
            return reading, groups
        finally:
            await telemetry.close()
            await driver.delete_topic(topic)
            await driver.close()

    reading, groups = run_precise(scenario())
    assert groups == [0, 600 * event_bytes]
    assert reading.lag is not None and reading.lag.total == 600
    assert set(reading.lag.per_partition) == {0, 1} and all(reading.lag.per_partition.values())
    assert reading.broker["unread_bytes"] == sum(groups)


def test_lag_against_the_reader_groups_own_stream_cut(standalone):
    """The collector's unread bytes equal tail − the group's stream cut as the client reports
    them for a group that read nothing: every byte written."""
    import pravega_client

    topic, sub = f"cut-{time.time_ns()}", "streambench-sub-0"

    async def scenario() -> tuple[int, int]:
        driver = PravegaDriver(standalone.controller, SCOPE)
        await driver.connect()
        telemetry = PravegaTelemetry(standalone.controller, SCOPE, topic, 3, [sub])
        try:
            await driver.create_topic(topic, 3, [sub])
            await telemetry.start()
            producer = await driver.producer(topic, 0)
            await producer.send_batch([OutMessage(b"y" * 200, None, time.time_ns()) for _ in range(300)])
            await producer.close()
            manager = pravega_client.StreamManager(standalone.controller)
            group = manager.create_reader_group(reader_group_name(topic, sub), SCOPE, topic, False)
            position = group.get_streamcut().get_segment_offset_map()
            own = sum(_tail(manager, topic).values()) - sum(position.values())
            reported = -1
            deadline = time.monotonic() + 15  # the first samples may show an older answer
            while reported != own and time.monotonic() < deadline:
                reported = int((await telemetry.sample()).broker["unread_bytes"])
                await asyncio.sleep(0.3)
            return own, reported
        finally:
            await telemetry.close()
            await driver.delete_topic(topic)
            await driver.close()

    own, reported = run_precise(scenario())
    assert own == reported == 300 * (EVENT_FRAME_BYTES + HEADER.size + 200)


def test_beside_redis_in_one_report(standalone, spark, tmp_path):
    """Pravega and Redis side by side at 1,000 msg/s each, then the report on the run: both
    targets with the messages and the rate they had."""
    run_dir = tmp_path / "run"
    res = run_cli(["run", standalone.target(), "redis:runtime=local", "--rate", "1000",
                   "--duration", "3", "--warmup", "1", "--headless", "--out", str(run_dir)],
                  timeout_s=CLI_TIMEOUT_S)
    assert res.returncode == 0, res.stderr[-2000:]
    assert [t["produced"] for t in run_json(run_dir)["totals"]] == [4000, 4000]
    report = build_report([run_dir], out_dir=tmp_path / "report", formats="md")
    text = (report if report.suffix == ".md" else report.parent / "report.md").read_text()
    label = standalone.target()
    throughput = text[text.index("## Throughput"):]
    throughput = throughput[:throughput.index("\n## ", 4)]
    assert f"| {label} | redis:runtime=local |" in throughput
    for row in ("messages produced", "messages consumed"):
        (line,) = [ln for ln in throughput.splitlines() if ln.startswith(f"| {row} |")]
        counts = [int(c.strip().replace(",", "")) for c in line.split("|")[2:4]]
        assert all(2900 <= c <= 3100 for c in counts), line
    (line,) = [ln for ln in throughput.splitlines() if ln.startswith("| produce mean (msg/s) |")]
    assert all(abs(float(c.strip().replace(",", "")) - 1000) < 20 for c in line.split("|")[2:4]), line
    run_id = r"\d{8}T\d{6}Z-[0-9a-f]{6}"
    assert re.search(rf"\| {re.escape(label)} \| {run_id} \| pravega \| external \|", text)


# ---- mistakes: one line, exit 2 (3: no broker starts), nothing left running -------------------

def _fails(args: list[str], fragment: str, env: dict[str, str] | None = None,
           code: int = 2) -> None:
    """One error line and `code`: 2 for a refused TARGET, 3 for a broker that cannot start."""
    import os
    import subprocess

    from tests.integration.conftest import CLI

    res = subprocess.run([*CLI, *args, "--headless", "--duration", "1"], capture_output=True,
                         text=True, timeout=CLI_TIMEOUT_S, stdin=subprocess.DEVNULL,
                         env={**os.environ, **(env or {})})
    assert res.returncode == code, res.stderr
    _one_error_line(res.stderr, fragment)


@pytest.mark.parametrize("args, fragment", [
    (["run", "pravega@http://127.0.0.1:9090"], "bad Pravega address 'http://127.0.0.1:9090'"),
    (["run", "pravega:scope=a/b"], "expected a Pravega scope name"),
    (["run", "pravega:heap=lots"], "expected a JVM heap size"),
    (["run", "pravega@tcp://127.0.0.1:1:heap=1g"], "pravega"),
], ids=["bad-address", "bad-scope", "bad-heap", "malformed"])
def test_bad_input(args, fragment, nothing_left_running):
    _fails(args, fragment)


def test_java_missing(tmp_path, nothing_left_running):
    _fails(["run", "pravega:runtime=local"], "java not found",
           env={"PATH": str(tmp_path), "JAVA_HOME": ""}, code=3)


