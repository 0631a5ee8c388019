"""Network faults through a real Toxiproxy (built from the Go module proxy into the cache on
first use) in front of a real local redis-server, loopback only: what the proxy costs with no
toxic, what each toxic does to the figures (a latency toxic to the publish latency, a bandwidth
toxic to the produced bytes, a partition to the consumed flow and its recovery after heal),
the refusals, and no Toxiproxy left after a run or after streambench is killed outright."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pyarrow.dataset as ds
import pytest

from compose.process import free_port, leftover_dirs
from compose.toxiproxy import Toxiproxy, toxiproxy_program
from loadgen.core.interventions import Intervention
from tests.conftest import CliRun, pids_gone, run_cli, run_json

pytestmark = pytest.mark.integration

PINGS = 2000
LATENCY_MS = 20.0
BANDWIDTH = 400_000  # B/s
MESSAGE = 4096  # B: the RESP framing of an XADD adds about 2 % on the wire


@pytest.fixture(scope="module")
def toxiproxy() -> Path:
    """The server program, built into the cache once (about 15 s the first time)."""
    return asyncio.run(toxiproxy_program(print))


def _events(run_dir: Path) -> list[dict]:
    return sorted(ds.dataset(run_dir / "events", format="parquet").to_table().to_pylist(),
                  key=lambda e: e["time"])


def _ticks(run_dir: Path) -> list[dict]:
    return sorted(ds.dataset(run_dir / "ticks", format="parquet").to_table().to_pylist(),
                  key=lambda t: t["seq"])


def _p50_ms(run_dir: Path, kind: str, ticks: set[int]) -> float:
    """The p50 of one latency kind over some ticks, from the latency table's buckets."""
    rows = [r for r in ds.dataset(run_dir / "latency", format="parquet").to_table().to_pylist()
            if r["kind"] == kind and r["seq"] in ticks]
    values = np.array([r["value_ns"] for r in rows], dtype=float)
    counts = np.array([r["count"] for r in rows], dtype=float)
    order = np.argsort(values)
    cum = np.cumsum(counts[order])
    return float(values[order][np.searchsorted(cum, cum[-1] / 2)]) / 1e6


def _between(ticks: list[dict], start: float, end: float, steady: bool = False) -> set[int]:
    """The ticks whose whole interval lies in [start, end] (seconds of the wall clock);
    `steady`: only those in which the load generator kept up (its own loadgen_saturated)."""
    return {t["seq"] for t in ticks if t["phase"] == "measuring"
            and t["time"].timestamp() - t["interval_s"] >= start and t["time"].timestamp() <= end
            and not (steady and t["loadgen_saturated"])}


def _ping_p50_ms(port: int) -> float:
    """The p50 of PINGPINGS PING round trips on one connection (raw RESP)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        took = []
        for _ in range(PINGS):
            t0 = time.perf_counter_ns()
            s.sendall(b"PING\r\n")
            assert s.recv(64) == b"+PONG\r\n"
            took.append(time.perf_counter_ns() - t0)
    return float(np.median(took)) / 1e6


def _proxies(cli: CliRun, timeout_s: float = 120) -> list[int]:
    """The Toxiproxy servers (`server`) a running streambench started, once there is one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and cli.proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            found = [p.pid for p in psutil.Process(cli.proc.pid).children(recursive=True)
                     if p.name() == "server"]
            if found:
                return found
        time.sleep(0.1)
    raise AssertionError("streambench started no Toxiproxy")


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_proxy_adds_little_at_p50_and_its_bandwidth_toxic_holds(toxiproxy: Path,
                                                                     redis_port: int) -> None:
    """PING round trips, direct and through the proxy, alternated in rounds; then a stream
    through a bandwidth toxic, as fast as the writer can, against the toxic's rate."""

    async def measure() -> tuple[list[float], list[float], float]:
        proxy = Toxiproxy("redis")
        await proxy.start(print)
        try:
            link = await proxy.proxy("redis", f"127.0.0.1:{redis_port}")
            port = int(link.listen.rpartition(":")[2])
            direct, proxied = [], []
            for _ in range(3):
                direct.append(await asyncio.to_thread(_ping_p50_ms, redis_port))
                proxied.append(await asyncio.to_thread(_ping_p50_ms, port))
            sink = socket.create_server(("127.0.0.1", 0))
            stream = await proxy.proxy("sink", f"127.0.0.1:{sink.getsockname()[1]}")
            await proxy.apply(Intervention("bandwidth", bandwidth=BANDWIDTH))
            rate = await asyncio.to_thread(_through, sink, int(stream.listen.rpartition(":")[2]))
            return direct, proxied, rate
        finally:
            pid = proxy.pid
            await proxy.stop()
            assert pid is not None and pids_gone([pid], 5)

    direct, proxied, rate = asyncio.run(measure())
    added = float(np.median(proxied) - np.median(direct))
    print(f"PING p50 direct {np.median(direct):.3f} ms, through Toxiproxy {np.median(proxied):.3f} "
          f"ms: {added:.3f} ms added; bandwidth toxic {BANDWIDTH / 1e3:g} KB/s: {rate / 1e3:.1f} "
          f"KB/s through (load {os.getloadavg()[0]:.1f})")
    assert 0 < added < 0.5  # the goal is 0.1 ms on a quiet machine; this one is shared
    assert abs(rate - BANDWIDTH) <= 0.1 * BANDWIDTH


def _through(sink: socket.socket, port: int, seconds: float = 4.0) -> float:
    """Bytes/s a sink receives from a writer sending 4 KiB writes as fast as it can through
    the proxy at `port`, from its first second to its last."""
    got: list[tuple[float, int]] = []

    def read() -> None:
        conn, _ = sink.accept()
        with conn:
            while data := conn.recv(65536):
                got.append((time.monotonic(), len(data)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as out:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            out.sendall(b"x" * 4096)
    reader.join(10)
    sink.close()
    first = got[0][0]
    return sum(n for t, n in got if first + 1 <= t < first + seconds) / (seconds - 1)


def _run(target: str, run_dir: Path, schedule: list[str], duration: int, size: int,
         more: tuple[str, ...] = (), proxies: int = 1) -> tuple[
        str, list[dict], dict[str, list[float]], list[dict]]:
    """A headless run of `target` (on the local runtime) at 200 msg/s with the schedule; its
    output, events, network fault times by kind and ticks. The `proxies` Toxiproxy servers it
    starts are gone after it."""
    cli = CliRun(["run", target, "--runtime", "local", "--headless", "--rate", "200", "--size",
                  str(size), "--warmup", "1", "--duration", str(duration), "--out", str(run_dir),
                  *(a for at in schedule for a in ("--at", at)), *more])
    proxy_pids = _proxies(cli) if proxies else []
    code, out, err = cli.finish(timeout_s=180)
    assert code == 0, err[-3000:]
    assert len(proxy_pids) == proxies and pids_gone(proxy_pids, 5)
    events = _events(run_dir)
    at: dict[str, list[float]] = {}
    for e in events:
        if e["kind"].startswith("net-"):
            at.setdefault(e["kind"], []).append(e["time"].timestamp())
    return out, events, at, _ticks(run_dir)


def _latency_added(run_dir: Path, events: list[dict], at: dict[str, list[float]],
                   ticks: list[dict]) -> float:
    """Publish latency under the latency toxic less before it. The minimum (the median of the
    ticks' own minima: a delay that every reply takes shows there whatever else the machine
    does) is the toxic's delay within 10 %; so is the p50 (the median of the ticks' p50s,
    cross-checked with the latency table's buckets merged over the seconds the generator kept
    up in) while the direct path's p50 is its usual sub-millisecond: on a machine loaded past
    that, queueing in the generator, the broker and the proxy moves the p50 on both sides."""
    start = next(e for e in events if e["kind"] == "phase" and e["phase"] == "measuring")
    by_seq = {t["seq"]: t for t in ticks}
    windows = ((start["time"].timestamp(), at["net-latency"][0]),
               (at["net-latency"][0] + 1, at["net-heal"][0]))
    base, slow = (_between(ticks, a, b) for a, b in windows)

    def median_ms(column: str, seqs: set[int]) -> float:
        return float(np.median([by_seq[s][column] for s in seqs])) / 1e6

    floor = median_ms("publish_min", slow) - median_ms("publish_min", base)
    before = median_ms("publish_p50", base)
    added = median_ms("publish_p50", slow) - before
    steady_base, steady_slow = (_between(ticks, a, b, steady=True) for a, b in windows)
    merged = (_p50_ms(run_dir, "publish", steady_slow) - _p50_ms(run_dir, "publish", steady_base)
              if len(steady_base) >= 2 and len(steady_slow) >= 2 else None)
    e2e_added = _p50_ms(run_dir, "e2e", slow) - _p50_ms(run_dir, "e2e", base)
    said = f"+{merged:.2f} ms" if merged is not None else "not enough seconds the generator kept up in"
    print(f"{ticks[0]['target']}: latency toxic {LATENCY_MS:g} ms: publish min +{floor:.2f} ms, "
          f"p50 +{added:.2f} ms from {before:.2f} ms (buckets merged: {said}), e2e p50 "
          f"+{e2e_added:.2f} ms (load {os.getloadavg()[0]:.1f})")
    assert abs(floor - LATENCY_MS) <= 0.1 * LATENCY_MS
    if before < 1.0:
        assert abs(added - LATENCY_MS) <= 0.1 * LATENCY_MS
        if merged is not None:
            assert abs(merged - LATENCY_MS) <= 0.1 * LATENCY_MS
    return added


def _partition_checked(label: str, events: list[dict], cut: float, healed: float,
                       ticks: list[dict]) -> None:
    """The flow stops within a tick of the cut: nothing moves in the ticks that begin a tick or
    more after it and end before the heal (a NATS client may still hand over a message it had
    read before the cut); it is back within 6 s of the heal (a fresh-clone run's Pulsar took
    over 3 s once, beside two other test processes), and the recovery event says so."""
    # ticks and schedule share their second boundaries, give or take a few ms each way
    later = _between(ticks, cut + ticks[0]["interval_s"] - 0.2, healed + 0.05)
    inside = [t for t in ticks if t["seq"] in later]
    assert inside and all(t["consumed"] == 0 and t["produced"] == 0 for t in inside), [
        (t["seq"], t["produced"], t["consumed"]) for t in inside]
    back = [t for t in ticks if healed < t["time"].timestamp() <= healed + 6 and t["consumed"] > 0]
    assert back, "nothing consumed within 6 s of the heal"
    recovered = [e for e in events if e["kind"] == "recovered" and e["time"].timestamp() > healed]
    assert recovered and f"after heal {label}" in recovered[0]["detail"], [
        (e["kind"], e["detail"]) for e in events if e["kind"] in ("recovered", "not-recovered")]
    assert "send errors" in recovered[0]["detail"]
    print(f"{label}: partition {healed - cut:.1f} s: {recovered[0]['detail']}")


def test_toxics_on_a_local_redis_run(tmp_path: Path, toxiproxy: Path, no_leftover_redis) -> None:
    """One run through the proxy with a schedule: no toxic for 4 s, a 20 ms latency toxic for
    4 s, a partition for 3 s, then (10 s later, once recovered) a bandwidth toxic for 6 s; each
    healed. Publish p50 rises by the toxic's delay within 10 %; the partition stops the flow
    within a tick and it comes back after heal with a recovery event; under the bandwidth
    toxic the consumed and the acknowledged bytes/s stay under the limit, the consumed near it."""
    run_dir = tmp_path / "run"
    out, events, at, ticks = _run("redis", run_dir, [
        "4s:latency=20ms@redis", "8s:heal@redis", "10s:partition@redis", "13s:heal",
        "23s:bandwidth=400KB/s@redis", "29s:heal@redis"], 30, MESSAGE)
    # the end-of-run table counts the six network faults (heals included, as resumes are)
    faults_row = next(line for line in out.splitlines() if line.startswith("faults and restarts"))
    assert faults_row.split()[-1] == "6"
    assert [len(at[k]) for k in ("net-latency", "net-partition", "net-bandwidth", "net-heal")] == [1, 1, 1, 3]
    by_seq = {t["seq"]: t for t in ticks}
    _latency_added(run_dir, events, at, ticks)
    _partition_checked("redis", events, at["net-partition"][0], at["net-heal"][1], ticks)

    # each connection gets its own limit. The consumer, with a backlog to read, nearly fills its
    # link (less the RESP framing, ~2 %, and its own round trips). The producer's
    # acknowledgements come a batch at a time (a batch can take seconds through the link), so
    # its acknowledged byte rate is lumpy per tick: over the window it stays under the limit.
    window = _between(ticks, at["net-bandwidth"][0] + 1, at["net-heal"][2] + 0.05)
    steady = _between(ticks, at["net-bandwidth"][0] + 1, at["net-heal"][2] + 0.05, steady=True)
    assert steady, "the load generator fell behind in every second of the window"
    consumed = (sum(by_seq[s]["consumed_bytes"] for s in steady)
                / sum(by_seq[s]["interval_s"] for s in steady))
    produced = (sum(by_seq[s]["produced_bytes"] for s in window)
                / sum(by_seq[s]["interval_s"] for s in window))
    # cross-check: the bytes are the messages counted times their size
    assert sum(by_seq[s]["consumed_bytes"] for s in steady) == MESSAGE * sum(
        by_seq[s]["consumed"] for s in steady)
    print(f"bandwidth toxic {BANDWIDTH / 1e3:g} KB/s: consumed {consumed / 1e3:.1f} KB/s, "
          f"produced (acknowledged) {produced / 1e3:.1f} KB/s of payload over {len(window)} s "
          f"(demand {200 * MESSAGE / 1e3:g} KB/s)")
    # the toxic's own rate is held within 10 % (the raw stream of the test above); a client
    # that waits for a reply before its next request leaves the link idle meanwhile, the more
    # so the more loaded the machine: the run's rates stay under the limit, near it
    assert 0.7 * BANDWIDTH <= consumed <= 1.1 * BANDWIDTH
    assert produced <= 1.1 * BANDWIDTH

    meta = run_json(run_dir)
    (target,) = meta["targets"]
    assert target["options"]["network_faults"] is True
    assert " → 127.0.0.1:" in target["proxies"]["redis"]
    assert (run_dir / "logs" / "0-redis" / "toxiproxy.log").is_file()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130),
                                         (signal.SIGKILL, -9)])
def test_no_toxiproxy_left_after_streambench_is_stopped(tmp_path: Path, toxiproxy: Path,
                                                       no_leftover_redis, sig: signal.Signals,
                                                       code: int) -> None:
    """Stopped (SIGTERM, SIGINT) or killed outright (SIGKILL) while measuring: the Toxiproxy
    server, the broker and the load process are gone, and no data dir of theirs is left."""
    cli = CliRun(["run", "redis", "--runtime", "local", "--headless", "--rate", "100", "--warmup",
                  "1", "--duration", "60", "--network-faults", "--out", str(tmp_path / "run")])
    proxies = _proxies(cli)
    cli.wait_for_line("measuring", 120)
    started = psutil.Process(cli.proc.pid).children(recursive=True)
    assert len(proxies) == 1 and proxies[0] in {p.pid for p in started}
    cli.proc.send_signal(sig)
    returned, _out, err = cli.finish(timeout_s=60)
    assert returned == code, err[-2000:]
    assert pids_gone(proxies + [p.pid for p in started], 10)
    # its log's data dir went with it (the load process removes what it made, also when its
    # coordinator was killed: compose.process.abandon)
    assert not [path for path, pid in leftover_dirs()
                if path.name.startswith("streambench-toxiproxy-")
                and int(pid) in {p.pid for p in started}]


@pytest.mark.parametrize(("args", "said"), [
    (["redis@127.0.0.1:1", "--network-faults"], "an existing cluster's links are not proxied"),
    (["redis@127.0.0.1:1", "--network-faults=127.0.0.1:8474"], "not a Toxiproxy API's URL"),
    (["redis@127.0.0.1:1", "--at", "2s:partition"], "an existing cluster's links are not proxied"),
    (["kafka-zk:runtime=local", "--network-faults"], "kafka-zk has no links streambench can proxy"),
    (["kafka:runtime=docker", "--network-faults"], "proxied on the local runtime only, not docker"),
    (["kafka@127.0.0.1:1", "--network-faults=http://127.0.0.1:8474"],
     "proxied on the local runtime only, not external"),
    (["redis:runtime=local", "--at", "2s:latency=fast@redis"], "'fast' is not a delay"),
    (["pulsar:runtime=docker", "--network-faults"], "proxied on runtime local only, not docker"),
    (["rabbitmq@127.0.0.1:1", "--at", "2s:partition"], "proxied on runtime local only, not external"),
])
def test_network_faults_refused_in_one_line(args: list[str], said: str) -> None:
    res = run_cli(["run", *args, "--headless", "--duration", "5"], timeout_s=60)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streambench: error:") and said in lines[0], lines


def test_latency_and_partition_on_a_local_nats_run(tmp_path: Path, toxiproxy: Path) -> None:
    """NATS JetStream through the proxy: a 20 ms latency toxic raises the publish p50 by 20 ms
    within 10 %; a 3 s partition stops the flow within a tick and heal brings it back; after a
    reset the flow goes on."""
    run_dir = tmp_path / "run"
    _out, events, at, ticks = _run("nats", run_dir, [
        "4s:latency=20ms@nats", "8s:heal", "10s:partition@nats", "13s:heal@nats",
        "21s:reset@nats"], 24, 1024)
    _latency_added(run_dir, events, at, ticks)
    _partition_checked("nats", events, at["net-partition"][0], at["net-heal"][1], ticks)
    # a reset closes the connections once: the clients connect again and the flow goes on
    (reset,) = at["net-reset"]
    lost = [e for e in events if e["kind"] == "connection-lost" and e["time"].timestamp() >= reset]
    again = [t for t in ticks if reset + 1 < t["time"].timestamp() <= reset + 3 and t["consumed"] > 0]
    assert again, [(e["kind"], e["detail"]) for e in events if e["time"].timestamp() >= reset]
    print(f"nats: reset: {len(lost)} connection-lost event(s), consumed {again[-1]['consumed']} "
          "in the last tick")
    (target,) = run_json(run_dir)["targets"]
    assert " → 127.0.0.1:" in target["proxies"]["nats"]


def test_an_existing_cluster_behind_the_users_own_toxiproxy(tmp_path: Path, toxiproxy: Path,
                                                            redis_port: int) -> None:
    """An existing Redis (@ADDRESS) reached through a Toxiproxy the user runs: with
    --network-faults=URL of its API, the run's latency toxic goes on the user's proxy that
    listens at the target's address; the proxy and its server are left running, healed."""
    users = Toxiproxy("user")
    asyncio.run(users.start(print))
    try:
        link = asyncio.run(users.proxy("users-redis", f"127.0.0.1:{redis_port}"))
        api = f"http://127.0.0.1:{users._port}"
        run_dir = tmp_path / "run"
        _out, events, at, ticks = _run(f"redis@{link.listen}", run_dir, [
            "4s:latency=20ms", "8s:heal"], 9, 1024, ("--network-faults=" + api,), proxies=0)
        assert _latency_added(run_dir, events, at, ticks) > 0
        (target,) = run_json(run_dir)["targets"]
        assert target["proxies"] == {"users-redis": f"{link.listen} → 127.0.0.1:{redis_port}"}
        shown = asyncio.run(users._call("GET", "/proxies/users-redis"))
        assert shown["enabled"] is True and shown["toxics"] == []
        assert users.pid is not None and psutil.pid_exists(users.pid)
        # the broker's own address, which none of the user's proxies listens at: one line, exit 3
        res = run_cli(["run", f"redis@127.0.0.1:{redis_port}", "--network-faults=" + api,
                       "--headless", "--warmup", "0", "--duration", "3"], timeout_s=60)
        last = res.stderr.strip().splitlines()[-1]
        assert res.returncode == 3 and last.startswith("streambench: error:"), res.stderr[-2000:]
        assert f"none of the proxies of the Toxiproxy at {api} listens at 127.0.0.1:{redis_port}" in last
    finally:
        asyncio.run(users.stop())
