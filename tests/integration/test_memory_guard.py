"""The run stops itself before the machine runs out of memory: a floor above what the machine
has trips the guard at the first tick, and the run ends as a stopped one does, saying why."""

from __future__ import annotations

from pathlib import Path

import psutil
import pyarrow.dataset as ds

from analysis.labels import ending
from loadgen.memguard import DEFAULT_MIN, MemoryGuard, default_floor
from tests.conftest import run_cli, run_json


def test_a_run_under_the_memory_floor_stops_itself_with_complete_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    floor = psutil.virtual_memory().total * 2  # more than the machine has
    res = run_cli(["run", "redis", "--rate", "500", "--warmup", "1", "--duration", "30",
                   "--headless", "--min-free-memory", str(floor), "--out", str(out)])
    assert res.returncode == 4, res.stderr[-2000:]
    assert "stopped by streambench: the machine has" in res.stderr
    assert "STOPPED EARLY after" in res.stdout and "(the machine's memory ran low)" in res.stdout
    assert "(--min-free-memory)" in res.stderr
    meta = run_json(out)
    assert meta["stopped_early"] is True
    assert "memory available, under the" in meta["stopped_for"]
    assert meta["measured_ticks"] < 30
    assert meta["totals"][0]["drained"]  # the consumers drained what was produced
    assert ending(meta) == "stopped early by streambench: the machine's memory ran low"
    events = ds.dataset(out / "events", format="parquet").to_table().to_pylist()
    assert [e["detail"] for e in events if e["kind"] == "memory-low"] == [meta["stopped_for"]]
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()
    assert sum(ticks["produced"]) == meta["totals"][0]["produced"] > 0


def test_a_run_whose_redis_streams_will_not_fit_is_warned_before_it_starts(
        tmp_path: Path) -> None:
    """100,000 msg/s for 23 days into a Redis stream without maxlen=: a warning line before
    the start, with what the streams would take; the guard (its floor set above what the
    machine has) then stops the run at its first tick."""
    out = tmp_path / "run"
    floor = psutil.virtual_memory().total * 2
    res = run_cli(["run", "redis", "--rate", "100000", "--warmup", "0",
                   "--duration", "2000000", "--headless", "--min-free-memory", str(floor),
                   "--out", str(out)])
    assert res.returncode == 4, res.stderr[-2000:]
    (line,) = [ln for ln in res.stderr.splitlines() if "will take about" in ln]
    # 100,000 msg/s × 2,000,000 s × (1,024 + 180) B
    assert line.startswith("streambench: warning: the run's brokers will take about "
                           f"{100_000 * 2_000_000 * 1204 / 2**30:.1f} GiB of memory"), line
    assert "maxlen=" in line
    quiet = run_cli(["run", "redis:maxlen=1000", "--rate", "100000", "--warmup", "0",
                     "--duration", "2000000", "--headless", "--min-free-memory", str(floor),
                     "--out", str(tmp_path / "trimmed")])
    assert quiet.returncode == 4 and "will take about" not in quiet.stderr


def test_no_floor_and_the_default_floor() -> None:
    assert MemoryGuard(0).check() is None  # 0: never
    guard = MemoryGuard(1 << 62)
    assert guard.check() is not None and guard.check() is None  # says it once
    assert default_floor(8 << 30) == max(DEFAULT_MIN, int((8 << 30) * 0.05))
    assert default_floor(1 << 30) == DEFAULT_MIN


def test_a_redis_container_whose_limit_will_not_hold_the_stream_is_warned(capsys) -> None:
    """A docker Redis target with memory= under what its stream will take gets its own warning
    line before the start (the kernel would kill redis-server inside its container long before
    the machine runs low); with maxlen=, or a limit that holds the stream, none."""
    from loadgen.core.workload import Workload
    from loadgen.platforms import resolve_target
    from tui.bench.runbuild import check_memory_room

    workload = Workload(rate=10_000, duration_s=60, warmup_s=0, message_size=1024)
    need = 10_000 * 60 * (1024 + 180)  # 722 MB
    small = resolve_target("redis:runtime=docker,memory=256m")
    check_memory_room(workload, [small], 0)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"streambench: warning: target {small.label}: its broker will "
                           f"take about {need / 2**20:.0f} MiB of memory"), line
    assert "(memory=256m)" in line and "maxlen=" in line
    for fits in ("redis:runtime=docker,memory=2g", "redis:runtime=docker,memory=256m,maxlen=1000",
                 "redis:runtime=docker"):
        check_memory_room(workload, [resolve_target(fits)], 0)
        assert capsys.readouterr().err == "", fits


def test_containers_near_their_memory_limit_are_said_once_until_they_fall_back() -> None:
    from loadgen.memguard import ContainerLimit, ContainerMemoryWatch

    mib = 1 << 20
    watch = ContainerMemoryWatch({
        "redis": ContainerLimit(64 * mib, 1, "64m", "the target option maxlen= trims a Redis stream"),
        "kafka": ContainerLimit(512 * mib, 3, "512m")})
    # steady memory: said only within 10 % of the limit
    assert watch.check("redis", 57 * mib, 0.0) is None  # 89 %
    assert watch.check("redis", 57 * mib, 1.0) is None
    line = watch.check("redis", int(58.5 * mib), 100.0)  # 91 %, growing slowly
    assert line == ("its broker container uses 58 MiB of memory, 91% of the limit (memory=64m); "
                    "at the limit the broker stalls while the kernel reclaims its memory, then the "
                    "kernel kills it (the run reports it as died); the target option maxlen= trims "
                    "a Redis stream")
    assert watch.check("redis", 63 * mib, 103.0) is None  # said once
    assert watch.check("redis", 52 * mib, 200.0) is None  # 81 %: not yet fallen back
    assert watch.check("redis", 60 * mib, 300.0) is None
    assert watch.check("redis", 50 * mib, 400.0) is None  # 78 %: fallen back, said again when near
    assert watch.check("redis", 60 * mib, 500.0) is not None
    # three containers: their sum against three limits
    assert watch.check("kafka", 1300 * mib, 0.0) is None  # 85 %
    assert watch.check("kafka", 1400 * mib, 100.0) == (
        "its 3 broker containers use together 1.4 GiB of memory, 91% of the limit (memory=512m "
        "each); at the limit the broker stalls while the kernel reclaims its memory, then the "
        "kernel kills it (the run reports it as died)")
    assert watch.check("nats", 10 << 30, 0.0) is None  # no limit
    assert watch.check("redis", 0, 600.0) is None  # no figure


def test_containers_growing_fast_towards_their_limit_are_said_ahead() -> None:
    """6 MB/s into a 48 MiB limit crosses the last 10 % within a tick: said once past half the
    limit, with the pace and the time left at it (over the last 5 ticks); slower growth that
    would take longer than 30 s, or growth under half the limit, is not said."""
    from loadgen.memguard import ContainerLimit, ContainerMemoryWatch

    mib = 1 << 20
    watch = ContainerMemoryWatch({"redis": ContainerLimit(48 * mib, 1, "48m")})
    lines = [watch.check("redis", int(10e6 + 6e6 * s), float(s)) for s in range(8)]
    # 10, 16, 22 MB (under half of 50.3 MB), then 28 MB: 56 %, (50.3 - 28) / 6 ≈ 4 s left
    assert lines[:3] == [None] * 3 and lines[4:] == [None] * 4
    assert lines[3] == ("its broker container uses 27 MiB of memory, 56% of the limit "
                        "(memory=48m), growing by 6.0 MB/s: the limit in about 4 s at this pace; "
                        "at the limit the broker stalls while the kernel reclaims its memory, then "
                        "the kernel kills it (the run reports it as died)")
    # said at 56 %: said again only after falling under 46 %
    assert watch.check("redis", int(24e6), 8.0) is None  # 48 %
    assert watch.check("redis", int(22e6), 9.0) is None  # 44 %: fallen back
    assert watch.check("redis", int(46e6), 10.0) is not None  # 91 %
    slow = ContainerMemoryWatch({"redis": ContainerLimit(48 * mib, 1, "48m")})
    # 0.5 MB/s from 60 %: 40 s to the limit
    assert all(slow.check("redis", int(30e6 + 0.5e6 * s), float(s)) is None for s in range(8))
