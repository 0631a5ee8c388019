"""Interventions during real runs: scheduled with --at, typed on standard input in headless
runs, and refused in one line when they cannot be carried out. The run files hold every change
as an event with its time, and the recovery after a fault is measured."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import CLI, run_cli, run_json

pytestmark = pytest.mark.integration


def _events(run_dir: Path) -> list[dict]:
    table = ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist()
    return sorted(table, key=lambda e: e["time"])


def _ticks(run_dir: Path) -> list[dict]:
    table = ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist()
    return sorted(table, key=lambda t: t["seq"])


def _measuring_start(events: list[dict]) -> float:
    start = next(e for e in events if e["kind"] == "phase" and e["phase"] == "measuring")
    return start["time"].timestamp()


def test_scheduled_backlog_and_pause_on_local_redis(tmp_path: Path, no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    res = run_cli(["run", "redis", "--headless", "--rate", "1000", "--warmup", "1",
                   "--duration", "20", "--out", str(run_dir),
                   "--at", "2s:consumers=stop", "--at", "5s:consumers=start",
                   "--at", "9s:pause=redis", "--at", "11s:resume=redis"], timeout_s=180)
    assert res.returncode == 0, res.stderr
    events = _events(run_dir)
    t0 = _measuring_start(events)
    kinds = [(e["kind"], round(e["time"].timestamp() - t0)) for e in events
             if e["kind"] in ("consumers", "fault-pause", "fault-resume")]
    assert kinds == [("consumers", 2), ("consumers", 5), ("fault-pause", 9), ("fault-resume", 11)]
    by_kind = {e["kind"]: e for e in events}
    assert "running → stopped" in next(e["detail"] for e in events if e["kind"] == "consumers")
    drained = by_kind["backlog-drained"]["detail"]
    assert "backlog of" in drained and "drained in" in drained
    recovered = by_kind["recovered"]["detail"]
    assert "after pause redis" in recovered and "after resume redis" in recovered
    # the pause shows in the latencies of the seconds around it, and nowhere after recovery
    ticks = _ticks(run_dir)
    worst = max(t["e2e_max"] or 0 for t in ticks)
    assert worst >= 1.9e9
    meta = run_json(run_dir)
    totals = meta["totals"][0]
    assert totals["drained"] and totals["consumed"] == totals["produced"] == 21_000
    # the end-of-run table counts the two faults the stack recorded (the consumers' stop and
    # start are changes of the load, not faults)
    faults_row = next(line for line in res.stdout.splitlines() if line.startswith("faults and restarts"))
    assert faults_row.split()[-1] == "2"


def test_a_drain_that_reads_nothing_is_said_to_stall(tmp_path: Path, no_leftover_redis) -> None:
    """Consumers stopped at 1 s build a backlog, the broker is paused at 3 s and left paused:
    the drain reads nothing with about 1,000 messages unread, which one drain-stalled event
    says after 5 s (with no platform reason for Redis), and the run ends at its drain time-out
    as not drained."""
    run_dir = tmp_path / "run"
    workload = tmp_path / "drain.yaml"
    workload.write_text("name: stalled-drain\ndrainTimeoutSeconds: 8\n")
    res = run_cli(["run", "redis", "--headless", "--workload", str(workload), "--rate", "500",
                   "--warmup", "1", "--duration", "4", "--out", str(run_dir),
                   "--at", "1s:consumers=stop", "--at", "3s:pause=redis"], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    events = _events(run_dir)
    stalled = [e for e in events if e["kind"] == "drain-stalled"]
    assert len(stalled) == 1, [(e["kind"], e["detail"]) for e in events]
    detail = stalled[0]["detail"]
    idle = int(detail.split("nothing consumed for ")[1].split(" s of the drain, ")[0])
    assert 5 <= idle <= 6, detail  # said at the fifth drain tick (one may come late)
    unread = int(detail.split(", ")[1].split(" messages")[0].replace(",", ""))
    assert 700 <= unread <= 1_600 and detail.endswith("messages unread"), detail
    drain_start = next(e for e in events if e["kind"] == "phase" and e["phase"] == "draining")
    waited = (stalled[0]["time"] - drain_start["time"]).total_seconds()
    assert 4.0 <= waited <= 7.5, waited
    assert "drain-incomplete" in [e["kind"] for e in events]
    assert not run_json(run_dir)["totals"][0]["drained"]


def test_headless_commands_on_standard_input(tmp_path: Path, no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([*CLI, "run", "redis", "--headless", "--rate", "500", "--warmup", "1",
                             "--duration", "8", "--out", str(run_dir)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdin is not None and proc.stdout is not None
    while "measuring" not in proc.stdout.readline():
        pass
    proc.stdin.write("consumers=stop\nkill=nosuch\n")
    proc.stdin.flush()
    time.sleep(2)
    proc.stdin.write("consumers=start@redis\n")
    proc.stdin.flush()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "[command]" in err and "no broker 'nosuch'" in err
    kinds = [e["kind"] for e in _events(run_dir)]
    assert kinds.count("consumers") == 2 and "backlog-drained" in kinds


@pytest.mark.parametrize("at, fragment", [
    ("100s:rate=5", "after the end of the measuring phase"),
    ("1s:kill=redis-9", "no broker 'redis-9'"),
    ("1s:rate=5@kafka", "no target 'kafka'"),
    ("1s:explode=1", "ACTION one of"),
    ("soon:rate=5", "not a time"),
])
def test_bad_schedule_is_one_line_before_anything_starts(tmp_path: Path, at: str, fragment: str,
                                                        no_leftover_redis) -> None:
    res = run_cli(["run", "redis", "--headless", "--duration", "10", "--out", str(tmp_path / "r"),
                   "--at", at])
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert not (tmp_path / "r").exists()


def test_faults_are_refused_for_an_existing_cluster(tmp_path: Path) -> None:
    res = run_cli(["run", "redis@127.0.0.1:1", "--headless", "--duration", "5",
                   "--at", "1s:kill=redis"])
    assert res.returncode == 2
    assert "no broker 'redis'" in res.stderr and "existing cluster" in res.stderr




def test_kill_and_start_one_of_three_kafka_brokers(tmp_path: Path) -> None:
    """A real 3-broker KRaft cluster: broker 2 is killed (-9) at 15 s and started at 25 s. The
    run survives, the recovery is measured, and nothing acknowledged is lost."""
    run_dir = tmp_path / "run"
    res = run_cli(["run", "kafka:brokers=3,runtime=local,heap=384M", "--headless", "--rate", "500",
                   "--warmup", "2", "--duration", "45", "--out", str(run_dir), "--track-delivery",
                   "--at", "15s:kill=kafka-2", "--at", "25s:start=kafka-2"], timeout_s=420)
    assert res.returncode == 0, res.stderr[-3000:]
    events = _events(run_dir)
    t0 = _measuring_start(events)
    faults = [(e["kind"], round(e["time"].timestamp() - t0)) for e in events
              if e["kind"].startswith("fault-")]
    assert [k for k, _ in faults] == ["fault-kill", "fault-start"]
    # the start waits for the broker to answer: its JVM came back 17 s after the start was
    # asked at load 13, so it is asked 20 s before the end
    assert abs(faults[0][1] - 15) <= 1 and 25 <= faults[1][1] <= 45
    # one recovery per fault, or one for both when the cluster was not healthy in between
    outcome = [e for e in events if e["kind"] in ("recovered", "not-recovered")]
    assert 1 <= len(outcome) <= 2 and "kill kafka-2" in outcome[0]["detail"]
    assert all(" -" not in e["detail"].split(";")[0] for e in outcome)  # never before the fault
    totals = run_json(run_dir)["totals"][0]
    # every acknowledged message was consumed (a rebalance may deliver some twice)
    assert totals["consumed"] - totals["duplicates"] >= totals["produced"] > 20_000
    assert totals["drained"]


def test_a_broker_that_dies_unbidden_is_noticed(tmp_path: Path, no_leftover_redis) -> None:
    """redis-server killed from outside streambench mid-run: the death is an event within a
    second, the terminal is not flooded, the drain does not wait for a broker that is gone,
    and the exit code says a broker failed."""
    import os
    import signal

    from tests.conftest import CliRun

    run_dir = tmp_path / "run"
    # consumers stopped first: a backlog is left that no broker can drain any more
    cli = CliRun(["run", "redis", "--headless", "--rate", "1000", "--warmup", "1",
                  "--duration", "20", "--out", str(run_dir), "--at", "1s:consumers=stop"])
    cli.wait_for_line("measuring", 60)
    cli.wait_for_line("measuring", 10)
    pid = run_json(run_dir)["targets"][0]["pids"][0]
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    rc, _out, err = cli.finish(timeout_s=90)
    finished = time.time()
    assert rc == 3, err[-2000:]
    events = _events(run_dir)
    died = next(e for e in events if e["kind"] == "broker-died")
    assert "killed by signal 9" in died["detail"]
    assert died["time"].timestamp() - killed < 1.5
    assert "drain-skipped" in [e["kind"] for e in events]
    assert run_json(run_dir)["totals"][0]["drained"] is False
    assert finished - killed < 30  # the rest of the measuring phase, no drain timeout
    assert len(err.splitlines()) < 200, err[-3000:]
    assert "broker failed during the run: redis: redis: killed by signal 9" in err
    assert run_json(run_dir)["broker_failures"]


def test_consumers_left_stopped_start_again_for_the_drain(tmp_path: Path, no_leftover_redis) -> None:
    run_dir = tmp_path / "run"
    started = time.time()
    res = run_cli(["run", "redis", "--headless", "--rate", "500", "--warmup", "1",
                   "--duration", "5", "--out", str(run_dir), "--at", "2s:consumers=stop"],
                  timeout_s=120)
    assert res.returncode == 0, res.stderr
    assert time.time() - started < 40  # not the 60 s drain timeout
    consumers = [e["detail"] for e in _events(run_dir) if e["kind"] == "consumers"]
    assert consumers == ["running → stopped", "stopped → running"]
    totals = run_json(run_dir)["totals"][0]
    assert totals["drained"] and totals["consumed"] == totals["produced"]


def test_clients_reconnect_after_a_killed_redis_is_started_again(tmp_path: Path) -> None:
    """redis-server (append-only file, fsync on every write) killed at 2 s and started at 4 s:
    the producer and the consumer stop writing to the dead connection, open new ones once the
    server answers, and the run drains every message produced, with the acknowledgements the
    consumer owed carried over to its new connection."""
    run_dir = tmp_path / "run"
    rate = 400
    res = run_cli(["run", "redis:aof,fsync=always", "--rate", str(rate), "--duration", "10",
                   "--warmup", "1", "--headless", "--out", str(run_dir),
                   "--at", "2s:kill=redis", "--at", "4s:start=redis"], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    events = _events(run_dir)
    lost = [e["detail"] for e in events if e["kind"] == "connection-lost"]
    back = [e for e in events if e["kind"] == "reconnected"]
    assert sorted(d.split(":")[0] for d in lost) == ["consumer 0 of streambench-sub-0", "producer 0"]
    assert len(back) == 2
    start = next(e for e in events if e["kind"] == "fault-start")
    kill = next(e for e in events if e["kind"] == "fault-kill")
    # after the kill, and within the longest pause between attempts after the server is back;
    # fault-start is stamped once the stack's own probe has found the server answering, which a
    # client's attempt can do first (0.18 s first on a loaded machine)
    for e in back:
        assert e["time"] > kill["time"], (e, kill)
        assert (e["time"] - start["time"]).total_seconds() <= 2.0, (e, start)
    outcome = [e for e in events if e["kind"] in ("recovered", "not-recovered")]
    assert outcome and "kill redis" in outcome[0]["detail"]
    totals = run_json(run_dir)["totals"][0]
    assert totals["drained"] and totals["produced"] > 0
    # messages whose acknowledgement was lost with the connection may still have been written:
    # consumed, but counted as send errors, not as produced
    assert totals["produced"] <= totals["consumed"] <= totals["produced"] + totals["send_errors"]
    # the slots due while the server was down failed, each once: no more than the down time
    down_s = (back[0]["time"] - kill["time"]).total_seconds()
    assert 0 < totals["send_errors"] <= rate * (down_s + 0.5)
    # the failing sends are one spell: said as it starts, and its end with the count, once
    # the producer's connection is back and a whole interval went without a failure
    failed = [e for e in events if e["kind"] == "send-error"]
    (settled,) = [e for e in events if e["kind"] == "send-recovered"]
    # (the kill's event is stamped once the process is gone: a send can fail just before it)
    assert 1 <= len(failed) <= 2 and all(-1.0 < (e["time"] - kill["time"]).total_seconds() < 1.5
                                         for e in failed), failed
    assert f"after {totals['send_errors']:,} failed message" in settled["detail"], settled
    assert 0 < (settled["time"] - start["time"]).total_seconds() <= 4.0, (settled, start)
    ticks = [t for t in _ticks(run_dir) if t["phase"] == "measuring"]
    assert sum(t["produced"] for t in ticks[-3:]) >= 0.9 * 3 * rate  # full rate again at the end


def test_messages_a_redis_without_its_data_lost_are_counted_and_the_drain_ends(tmp_path: Path) -> None:
    """redis-server without an append-only file, its consumers stopped at 1 s (a backlog
    builds), killed at 3 s and started again (empty) at 4 s, the consumers started at 6 s: the
    consumer finds its group gone (NOGROUP), makes it again and reads what the producer wrote
    since; the backlog of the kill is gone, and the drain says so (messages-lost: as many as
    the broker's lag showed at the kill, give or take the last second's) and ends there rather
    than waiting for its 60 s timeout."""
    run_dir = tmp_path / "run"
    rate = 400
    res = run_cli(["run", "redis", "--runtime", "local", "--rate", str(rate), "--duration", "10",
                   "--warmup", "1", "--headless", "--out", str(run_dir),
                   "--at", "1s:consumers=stop", "--at", "3s:kill=redis", "--at", "4s:start=redis",
                   "--at", "6s:consumers=start"], timeout_s=180)
    assert res.returncode == 0, res.stderr[-3000:]
    events = _events(run_dir)
    totals = run_json(run_dir)["totals"][0]
    missing = totals["expected"] - totals["consumed"]
    assert totals["lost"] == missing > 0 and totals["final_lag"] == 0 and not totals["drained"]
    (lost,) = [e for e in events if e["kind"] == "messages-lost"]
    assert lost["detail"].startswith(f"{missing:,} acknowledged messages never delivered: the "
                                     "broker shows nothing left to read"), lost
    assert "kill redis" in lost["detail"]
    # what was lost is the backlog the kill found: the lag at the last tick before it, and at
    # most the last second's messages on top. That lag also counts the entries of the
    # consumer's last read before it stopped, counted as consumed but still pending (their XACK
    # goes out with the next read): a few at this rate, one read's worth at most
    kill = next(e for e in events if e["kind"] == "fault-kill")
    before = [t for t in _ticks(run_dir) if t["time"] <= kill["time"] and t["lag_total"] is not None]
    lag_at_kill = before[-1]["lag_total"]
    last_read = 10
    assert rate <= lag_at_kill <= missing + last_read, (lag_at_kill, missing)
    assert missing <= lag_at_kill + 1.2 * rate, (lag_at_kill, missing)
    # the consumer made its group again and read the new stream
    assert any("NOGROUP" in e["detail"] and "created again" in e["detail"]
               for e in events if e["kind"] == "receive-error")
    drain = [t for t in _ticks(run_dir) if t["phase"] == "draining"]
    assert 3 <= len(drain) <= 8  # LOSS_AFTER_S of nothing to read, not the 60 s timeout
    assert f"LOST {missing:,}" in res.stderr
    assert "messages lost" in res.stdout and f"NO ({missing:,} lost)" in res.stdout


def test_redis_lag_counts_a_stream_whose_group_is_gone(tmp_path: Path) -> None:
    """The Redis collector's lag for a subscription whose group the stream lacks (a server
    started again without its data, the producers writing again) is every entry of the
    stream, not 0; with the group made again from the first entry, the group's own lag."""
    import asyncio

    from compose.process import free_port
    from loadgen.platforms.redis_telemetry import RedisTelemetry

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)

        def cli(*args: str) -> str:
            return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True,
                                  text=True, check=True).stdout.strip()

        for i in range(7):
            cli("XADD", "s-0", "*", "t", str(i))
        cli("XADD", "s-1", "*", "t", "0")

        async def lag() -> tuple[int, dict[int, int]]:
            collector = RedisTelemetry("127.0.0.1", port, ["s-0", "s-1", "s-2"], ["g"])
            try:
                snap = await collector.lag()
                return snap.total, snap.per_partition
            finally:
                await collector.close()

        # no group anywhere; s-2 does not exist (nothing stored there)
        assert asyncio.run(lag()) == (8, {0: 7, 1: 1, 2: 0})
        cli("XGROUP", "CREATE", "s-0", "g", "0")
        cli("XREADGROUP", "GROUP", "g", "c", "COUNT", "3", "STREAMS", "s-0", ">")
        # s-0: 4 never delivered + 3 pending; s-1 still has no group
        assert asyncio.run(lag()) == (8, {0: 7, 1: 1, 2: 0})
        cli("XACK", "s-0", "g", *cli("XRANGE", "s-0", "-", "+", "COUNT", "3").split("\n")[::3])
        assert asyncio.run(lag()) == (5, {0: 4, 1: 1, 2: 0})
    finally:
        server.terminate()
        server.wait()
