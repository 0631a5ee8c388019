"""Redis's broker metrics in a real run: every declared metric is in the broker_metrics table,
plausible against the server's own counters, and stale while the server is paused.

One run of a redis-server the test starts itself (with the append-only file on, so the aof
metrics exist), driven by streambench as an existing server at 2,000 msg/s; the test pauses the
server (SIGSTOP, as the pause fault does) for 3 s in the measuring phase and reads the server's
INFO commandstats at the end: what instantaneous_ops_per_sec counts is every command, and
for this load that is XADD, MULTI and EXEC (a batch of XADDs in a transaction), XREADGROUP and
XACK, plus the collectors' INFO and XINFO."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
import redis

from compose.process import free_port
from loadgen.platforms.redis_metrics import METRICS
from tests.conftest import port_listening, run_cli, run_json

pytestmark = pytest.mark.integration

RATE = 2000
PAUSE_S = 3.0
# the server is paused once this many XADDs were made: 2 s warm-up and 10 s of measuring
PAUSE_AFTER_XADDS = RATE * 12
LOAD_COMMANDS = ("xadd", "multi", "exec", "xreadgroup", "xack")


@dataclass
class PausedRun:
    run_dir: Path
    paused: tuple[float, float]  # wall-clock seconds: SIGSTOP, SIGCONT
    commandstats: dict[str, int]  # calls per command over the whole run
    xadd_usec: int  # the server's time in XADD over the whole run
    table: dict[str, list] = field(default_factory=dict)
    meta: dict = field(default_factory=dict)
    stderr: str = ""


def _pause_at(client: redis.Redis, pid: int, done: threading.Event, out: list[float]) -> None:
    deadline = time.monotonic() + 120
    while not done.is_set() and time.monotonic() < deadline:
        stats = client.info("commandstats")
        if stats.get("cmdstat_xadd", {}).get("calls", 0) >= PAUSE_AFTER_XADDS:
            out.append(time.time())
            os.kill(pid, signal.SIGSTOP)
            time.sleep(PAUSE_S)
            os.kill(pid, signal.SIGCONT)
            out.append(time.time())
            return
        time.sleep(0.2)


@pytest.fixture(scope="module")
def paused_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PausedRun]:
    tmp = tmp_path_factory.mktemp("brokermetrics")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                               "--dir", str(tmp)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not port_listening(port):
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        client = redis.Redis(port=port, socket_timeout=5)
        pauses: list[float] = []
        done = threading.Event()
        pauser = threading.Thread(target=_pause_at, args=(client, server.pid, done, pauses))
        pauser.start()
        run_dir = tmp / "run"
        res = run_cli(["run", f"redis@127.0.0.1:{port}", "--headless", "--rate", str(RATE),
                       "--warmup", "2", "--duration", "18", "--out", str(run_dir)], timeout_s=180)
        done.set()
        pauser.join()
        assert res.returncode == 0, res.stderr
        assert len(pauses) == 2, "the run ended before the server was paused"
        stats = client.info("commandstats")
        calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
        table = ds.dataset(run_dir / "broker_metrics", format="parquet").to_table().to_pydict()
        yield PausedRun(run_dir, (pauses[0], pauses[1]), calls, int(stats["cmdstat_xadd"]["usec"]),
                        table, run_json(run_dir))
    finally:
        os.kill(server.pid, signal.SIGCONT)
        server.kill()
        server.wait()


def _ticks(run: PausedRun) -> dict[str, list]:
    return ds.dataset(run.run_dir / "ticks", format="parquet").to_table().to_pydict()


def _series(run: PausedRun, name: str) -> list[tuple[float, float, bool, str]]:
    """(time s, value, stale, phase) of one metric, in tick order."""
    t = run.table
    rows = [(t["time"][i].timestamp(), t["value"][i], t["stale"][i], t["phase"][i], t["seq"][i])
            for i in range(len(t["name"])) if t["name"][i] == name]
    return [r[:4] for r in sorted(rows, key=lambda r: r[4])]


def _steady(run: PausedRun) -> set[int]:
    """The measuring ticks well before the pause (2 s after measuring starts, 1 s before
    the pause): the ones the rates are compared over."""
    ticks = _ticks(run)
    times = [t.timestamp() for t in ticks["time"]]
    first = min(times[i] for i, p in enumerate(ticks["phase"]) if p == "measuring")
    return {ticks["seq"][i] for i, p in enumerate(ticks["phase"])
            if p == "measuring" and first + 2 <= times[i] <= run.paused[0] - 1}


def test_every_declared_metric_is_recorded_with_its_unit(paused_run: PausedRun) -> None:
    t = paused_run.table
    measuring = {t["name"][i] for i in range(len(t["name"])) if t["phase"][i] == "measuring"}
    assert measuring == {m.name for m in METRICS.metrics}
    units = {(t["name"][i], t["unit"][i]) for i in range(len(t["name"]))}
    assert units == {(m.name, m.unit) for m in METRICS.metrics}
    assert set(t["broker"]) == {"redis"}
    # run.json names each metric as the broker does
    target = paused_run.meta["targets"][0]
    assert target["broker_metrics"]["source"] == "INFO"
    assert {m["name"]: m["native"] for m in target["broker_metrics"]["metrics"]}[
        "ops_per_second"] == "instantaneous_ops_per_sec"


def test_ops_per_second_is_the_servers_command_rate(paused_run: PausedRun) -> None:
    """instantaneous_ops_per_sec over the steady ticks within 10 % of the commands the server
    counted in those ticks (total_commands_processed, read by the lag collector: the
    instantaneous figure is the server's own sample of its last 1.6 s); and those
    commands are the load's: XADD (one per message), MULTI/EXEC, XREADGROUP and XACK make
    90 % or more of them, the rest being the collectors' INFO and XINFO."""
    steady = _steady(paused_run)
    assert len(steady) >= 4, f"only {len(steady)} steady ticks"
    t = paused_run.table
    ops = [t["value"][i] for i in range(len(t["name"]))
           if t["name"][i] == "ops_per_second" and t["seq"][i] in steady]
    broker = ds.dataset(paused_run.run_dir / "broker", format="parquet").to_table().to_pydict()
    commands = sum(broker["value"][i] for i in range(len(broker["name"]))
                   if broker["name"][i] == "commands" and broker["seq"][i] in steady)
    ticks = _ticks(paused_run)
    seconds = sum(ticks["interval_s"][i] for i in range(len(ticks["seq"]))
                  if ticks["seq"][i] in steady)
    produced = sum(ticks["produced"][i] for i in range(len(ticks["seq"]))
                   if ticks["seq"][i] in steady)
    counted = commands / seconds
    calls = paused_run.commandstats
    per_message = {c: calls.get(c, 0) / calls["xadd"] for c in LOAD_COMMANDS}
    what = (f"ops mean {np.mean(ops):.0f}/s, commands counted {counted:.0f}/s, produced "
            f"{produced / seconds:.0f} msg/s; commands per message {per_message}")
    assert abs(np.mean(ops) - counted) <= 0.10 * counted, what
    load = sum(calls.get(c, 0) for c in LOAD_COMMANDS)
    assert load >= 0.9 * sum(calls.values()), f"{what}; all calls {calls}"
    # one XADD per acknowledged message (the drain's and warm-up's too)
    totals = paused_run.meta["totals"][0]
    assert calls["xadd"] == pytest.approx(totals["produced"], rel=0.01), what


def test_values_are_plausible(paused_run: PausedRun) -> None:
    """Against the server's own figures and the load: the XADD time per call is the
    server's (each tick's is the mean over the calls since the previous read, so the whole
    run's usec per call, a weighted mean of them but for the calls before the first read and
    after the last, lies between the smallest and the largest), the memory and client counts
    are those of a server holding this run."""
    fresh = {name: [v for _, v, stale, phase in _series(paused_run, name)
                    if not stale and phase == "measuring"]
             for name in (m.name for m in METRICS.metrics)}
    per_tick = [v for _, v, stale, _ in _series(paused_run, "xadd_time_seconds") if not stale]
    # Redis counts whole microseconds: a tick of a few fast XADDs can count 0
    assert all(0 <= v < 1e-2 for v in per_tick), per_tick
    cumulative = paused_run.xadd_usec / paused_run.commandstats["xadd"] / 1e6
    assert 0.9 * min(per_tick) <= cumulative <= 1.1 * max(per_tick), (per_tick, cumulative)
    assert min(fresh["used_memory_bytes"]) > 1e6  # a few seconds of 1 KiB messages kept
    # producer, consumer, collectors
    assert all(v >= 3 for v in fresh["connected_clients"]), fresh["connected_clients"]
    assert all(0 <= b <= c for b, c in zip(fresh["blocked_clients"], fresh["connected_clients"],
                                           strict=True)), fresh["blocked_clients"]
    assert all(v > 0 for v in fresh["mem_fragmentation_ratio"]), fresh["mem_fragmentation_ratio"]
    assert set(fresh["aof_rewrite_in_progress"]) <= {0.0, 1.0}
    assert all(v >= 0 for v in fresh["aof_delayed_fsync_total"]), fresh["aof_delayed_fsync_total"]


def test_a_paused_servers_metrics_are_stale(paused_run: PausedRun) -> None:
    """The ticks taken while the server is paused carry the last values read, marked stale;
    the server answers again within two ticks of being resumed. (A tick's time is when it
    was cut; its read follows, for up to 0.9 s: a tick cut in the last second of the pause
    may be read after it.)"""
    stopped, resumed = paused_run.paused
    series = _series(paused_run, "used_memory_bytes")
    inside = [(v, stale) for when, v, stale, _ in series if stopped + 0.2 < when < resumed - 1.0]
    assert inside and all(stale for _, stale in inside), inside
    before = [v for when, v, stale, _ in series if when < stopped and not stale]
    assert {v for v, _ in inside} == {before[-1]}
    after = [stale for when, _, stale, _ in series if when > resumed + 2.0]
    assert after and not any(after)
    events = ds.dataset(paused_run.run_dir / "events", format="parquet").to_table().to_pydict()
    assert any(k == "collector-error" and d.startswith("redis metrics:")
               for k, d in zip(events["kind"], events["detail"], strict=True))
