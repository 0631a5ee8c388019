"""End-to-end runs against a real redis-server started by streambench itself."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from analysis.sink import ROTATE_S, ParquetSink
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import DRAIN_FIRST_LOOK_S, Run, RunSummary
from tests.conftest import assert_rate, pids_gone
from tests.integration.conftest import CliRun, port_listening, run_cli, run_json

pytestmark = pytest.mark.integration

RATE = 2000.0


def _table(run_dir: Path, name: str):
    return ds.dataset(run_dir / name, format="parquet").to_table()


@pytest.fixture(scope="module")
def fixed_rate_run(tmp_path_factory) -> tuple[Path, RunSummary]:
    """A 20-second run at 2,000 msg/s: 2 partitions, 2 consumers in one group, raw samples on."""
    run_dir = tmp_path_factory.mktemp("fixed") / "run"
    workload = Workload(name="fixed-rate", rate=RATE, duration_s=20, warmup_s=2, partitions=2,
                        consumers=2, message_size=1024)
    run = Run(workload, unique_labels([resolve_target("redis")]), out_dir=run_dir,
              record_raw=True, audit=True, recorder=ParquetSink)
    summary = run_precise(run.execute())
    return run_dir, summary


def test_rate_within_two_percent(fixed_rate_run):
    run_dir, summary = fixed_rate_run
    ticks = _table(run_dir, "ticks").to_pydict()
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    assert len(measuring) == 20
    produced = sum(ticks["produced"][i] for i in measuring)
    assert_rate(_table(run_dir, "ticks").to_pylist(), summary.targets[0].produced, RATE, 2)
    # the payload byte counter agrees with the message count
    assert sum(ticks["produced_bytes"][i] for i in measuring) == produced * 1024


def test_running_totals_and_tick_counts_are_cut_at_one_instant(fixed_rate_run):
    run_dir, _ = fixed_rate_run
    ticks = _table(run_dir, "ticks").to_pydict()
    order = sorted(range(len(ticks["seq"])), key=ticks["seq"].__getitem__)
    produced = consumed = 0
    for i in order:
        produced += ticks["produced"][i]
        consumed += ticks["consumed"][i]
        assert ticks["produced_total"][i] == produced, f"tick {ticks['seq'][i]}"
        assert ticks["consumed_total"][i] == consumed, f"tick {ticks['seq'][i]}"


def test_ticks_carry_the_load_generators_own_cpu(fixed_rate_run):
    run_dir, _ = fixed_rate_run
    ticks = _table(run_dir, "ticks").to_pydict()
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    cpu = [ticks["loadgen_cpu_percent"][i] for i in measuring]
    assert all(c is not None and 0 < c < 400 for c in cpu), cpu
    assert all(ticks["loadgen_loop_lag_ms"][i] is not None for i in measuring)
    assert all(ticks["loadgen_saturated"][i] is not None for i in measuring)


def test_a_late_run_loop_merges_ticks_instead_of_firing_empty_ones(tmp_path, no_leftover_redis):
    """The coordinator frozen for 2.5 s (an overloaded host) while the worker keeps sending:
    the missed seconds become one tick with its true interval and an event says so."""
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--rate", "1000", "--duration", "8", "--warmup", "1",
                  "--headless", "--out", str(run_dir)])
    cli.wait_for_line("measuring", 60)
    cli.wait_for_line("measuring", 10)
    os.kill(cli.proc.pid, signal.SIGSTOP)
    time.sleep(2.5)
    os.kill(cli.proc.pid, signal.SIGCONT)
    rc, _out, err = cli.finish(timeout_s=60)
    assert rc == 0, err
    ticks = _table(run_dir, "ticks").to_pydict()
    measuring = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    # no empty ticks fired back to back: every measuring tick covers real time and real traffic
    rates = [ticks["produced"][i] / ticks["interval_s"][i] for i in measuring]
    assert all(ticks["interval_s"][i] > 0.1 for i in measuring), ticks["interval_s"]
    assert all(abs(r - 1000) < 150 for r in rates), rates
    assert max(ticks["interval_s"][i] for i in measuring) > 2.5
    seconds = sum(ticks["interval_s"][i] for i in measuring)
    assert abs(seconds - 8) < 0.5
    assert abs(sum(ticks["produced"][i] for i in measuring) / seconds - 1000) < 20
    events = _table(run_dir, "events").to_pydict()
    assert "coordinator-late" in events["kind"]


def test_every_message_consumed_once_and_lag_drains(fixed_rate_run):
    run_dir, summary = fixed_rate_run
    (t,) = summary.targets
    assert t.send_errors == 0
    assert t.produced == int(RATE * 22)  # warm-up + measuring slots, none skipped
    assert t.consumed == t.produced == t.expected
    assert t.duplicates == 0
    assert t.drained and t.final_lag == 0
    lag = _table(run_dir, "lag").to_pydict()
    last_seq = max(lag["seq"])
    assert {p: v for s, p, v in zip(lag["seq"], lag["partition"], lag["lag"], strict=True)
            if s == last_seq} == {0: 0, 1: 0}


def test_the_drain_takes_its_first_look_as_soon_as_the_producers_finish(fixed_rate_run):
    """The drain's first tick is cut about DRAIN_FIRST_LOOK_S after the last messages are
    answered, not at the next second, and its true interval is the one recorded. The
    consumers had read everything by then on an idle machine, so it is the drain's only tick;
    a second one is there only if the first found messages still unread (a busy machine)."""
    run_dir, _ = fixed_rate_run
    ticks = _table(run_dir, "ticks").to_pydict()
    drain = [i for i, p in enumerate(ticks["phase"]) if p == "draining"]
    first = ticks["interval_s"][drain[0]]
    assert DRAIN_FIRST_LOOK_S <= first < 0.9, first
    if len(drain) > 1:
        produced, consumed = ticks["produced_total"][drain[0]], ticks["consumed_total"][drain[0]]
        assert consumed < produced, (len(drain), produced, consumed)


def test_raw_samples_cover_every_message(fixed_rate_run):
    run_dir, summary = fixed_rate_run
    raw = _table(run_dir, "raw").to_pydict()
    kinds = np.array(raw["kind"])
    assert (kinds == "e2e").sum() == summary.targets[0].consumed
    assert (kinds == "publish").sum() == summary.targets[0].produced
    values = np.array(raw["value_ns"])
    assert values[kinds == "e2e"].min() > 0  # receive is after the intended send time


def test_broker_stopped_and_cleaned(fixed_rate_run):
    run_dir, _ = fixed_rate_run
    meta = run_json(run_dir)
    (target,) = meta["targets"]
    assert target["version"].startswith("7.")
    port = int(target["endpoints"]["redis"].rsplit(":", 1)[1])
    assert not port_listening(port)
    assert not any(psutil.pid_exists(pid) for pid in target["pids"])
    assert not Path(target["config"]["data_dir"]).exists()
    # the server's log outlives its data dir, in the run's log dir
    log = run_dir / "logs" / "0-redis" / "redis.log"
    assert "Ready to accept connections" in log.read_text()


def test_cpu_and_memory_recorded(fixed_rate_run):
    run_dir, _ = fixed_rate_run
    ticks = _table(run_dir, "ticks").to_pydict()
    cpu = [c for c, p in zip(ticks["cpu_percent"], ticks["phase"], strict=True) if p == "measuring"]
    mem = [m for m, p in zip(ticks["memory_bytes"], ticks["phase"], strict=True) if p == "measuring"]
    assert all(c > 0 for c in cpu)
    assert all(m > 1_000_000 for m in mem)




@pytest.mark.parametrize("sig, code, group", [
    (signal.SIGINT, 130, False), (signal.SIGTERM, 143, False), (signal.SIGHUP, 129, False),
    # what `timeout`, CI cancellation and `kill -TERM -- -PGID` do: the workers get it too
    (signal.SIGTERM, 143, True), (signal.SIGINT, 130, True), (signal.SIGHUP, 129, True),
], ids=["int", "term", "hup", "term-group", "int-group", "hup-group"])
def test_signal_during_measuring_flushes_and_cleans(tmp_path, sig, code, group, no_leftover_redis):
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--rate", "1000", "--duration", "60", "--warmup", "1",
                  "--headless", "--out", str(run_dir)])
    cli.wait_for_line("measuring", 60)
    cli.wait_for_line("measuring", 10)
    if group:
        os.killpg(cli.proc.pid, sig)  # the CLI leads its own session: its group is its pid
    else:
        cli.signal(sig)
    rc, _out, err = cli.finish(timeout_s=60)
    assert rc == code, err
    assert "Traceback" not in err
    assert "ended unexpectedly" not in err and "never retrieved" not in err, err
    meta = run_json(run_dir)
    assert meta["stopped_early"] is True
    assert "ended" in meta and meta["totals"][0]["drained"] is True
    (target,) = meta["targets"]
    assert pids_gone(target["pids"])
    assert not Path(target["config"]["data_dir"]).exists()
    ticks = _table(run_dir, "ticks").to_pydict()
    assert "measuring" in ticks["phase"]
    assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"] > 0


def test_a_hang_up_under_nohup_does_not_stop_a_headless_run(tmp_path, no_leftover_redis):
    """Started with SIGHUP ignored (nohup), a headless run goes on through a hang-up to its
    planned end: exit 0, not stopped early, every planned measuring tick written."""
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--rate", "500", "--duration", "4", "--warmup", "1",
                  "--headless", "--out", str(run_dir)], hup_ignored=True)
    cli.wait_for_line("measuring", 60)
    os.killpg(cli.proc.pid, signal.SIGHUP)
    rc, _out, err = cli.finish(timeout_s=60)
    assert rc == 0, err
    meta = run_json(run_dir)
    assert meta["stopped_early"] is False and meta.get("stopped_for") is None
    assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"] >= 500 * 4


def test_sigkill_leaves_readable_files(tmp_path, no_leftover_redis):
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--rate", "1000", "--duration", "60", "--warmup", "1",
                  "--headless", "--out", str(run_dir)])
    cli.wait_for_line("measuring", 60)
    started = time.monotonic()
    while time.monotonic() - started < ROTATE_S + 2:  # past the sink's first rotation
        cli.wait_for_line("measuring", 10)
    last_elapsed = float(cli.lines[-1].split()[1].rstrip("s"))
    cli.proc.kill()
    cli.finish(timeout_s=30)
    meta = run_json(run_dir)
    assert pids_gone(meta["targets"][0]["pids"])  # the broker dies with streambench
    # files renamed into place are complete; at most the last rotation interval is lost
    ticks = _table(run_dir, "ticks").to_pydict()
    assert max(ticks["elapsed_s"]) >= last_elapsed - ROTATE_S - 1
    # every visible file is whole (a hidden .inprogress leftover is allowed: readers skip it)
    for f in run_dir.glob("*/*.parquet"):
        assert pq.read_metadata(f).num_rows > 0, f


BAD_INPUTS = [
    (["run", "redis", "--workload", "/nonexistent/w.yaml"], "not found"),
    (["run", "redis", "--rate", "-5"], "--rate"),
    (["run", "redis", "--rate", "0"], "--rate"),
    (["run", "redis", "--size", "0"], "--size"),
    (["run", "kafak"], "unknown platform"),
    (["run", "redis:aoff"], "unknown option"),
    (["run", "redis", "--headless", "--out", "/proc/streambench-run"], "/proc/streambench-run"),
    (["report", "/nonexistent-run"], "/nonexistent-run"),
]


def _one_error_line(stderr: str, fragment: str) -> None:
    """Progress lines may come first; the failure itself is one line, the last, no traceback."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("streambench: error")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    assert fragment in errors[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize("args, fragment", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_one_line_exit_2(args, fragment, no_leftover_redis):
    res = run_cli(args)
    assert res.returncode == 2, res.stderr
    _one_error_line(res.stderr, fragment)


def test_unreachable_server_one_line_exit_3(no_leftover_redis):
    res = run_cli(["run", "redis@127.0.0.1:1", "--headless", "--duration", "1"])
    assert res.returncode == 3, res.stderr  # the platform cannot be reached
    _one_error_line(res.stderr, "cannot reach redis")


def test_malformed_workload_file(tmp_path, no_leftover_redis):
    bad = tmp_path / "bad.yaml"
    bad.write_text("producerRate: [1, 2\n")
    res = run_cli(["run", "redis", "--workload", str(bad), "--headless"])
    assert res.returncode == 2
    _one_error_line(res.stderr, "not valid YAML")


def test_unwritable_output_dir(tmp_path, no_leftover_redis):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    res = run_cli(["run", "redis", "--headless", "--duration", "1", "--out", str(ro / "run")])
    # root ignores permission bits; fall back to a path under a file
    if res.returncode != 2:
        blocker = tmp_path / "file"
        blocker.write_text("x")
        res = run_cli(["run", "redis", "--headless", "--duration", "1", "--out", str(blocker / "run")])
    assert res.returncode == 2
    _one_error_line(res.stderr, "run")


@contextmanager
def _server(bind: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A redis-server of the test's own on a free port (the external server of a run)."""
    from compose.process import free_port

    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", bind,
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        yield server, port
    finally:
        server.terminate()
        server.wait()


def test_external_runtime_starts_nothing(tmp_path, no_leftover_redis):
    with _server("127.0.0.1") as (server, port):
        res = run_cli(["run", f"redis@127.0.0.1:{port}", "--rate", "500", "--duration", "3",
                       "--warmup", "0", "--headless", "--out", str(tmp_path / "run")])
        assert res.returncode == 0, res.stderr
        meta = run_json(tmp_path / "run")
        assert meta["targets"][0]["runtime"] == "external"
        assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"] == 1500
        assert server.poll() is None  # still running: streambench does not stop what it did not start
        # the server's own counters agree with what streambench reports
        stats = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                               capture_output=True, text=True).stdout
        calls = {m[0]: int(m[1]) for m in re.findall(r"cmdstat_(\w+):calls=(\d+)", stats)}
        assert calls["xadd"] == 1500
        # the streams streambench created were removed again
        keys = subprocess.run(["redis-cli", "-p", str(port), "--scan"], capture_output=True,
                              text=True).stdout.split()
        assert keys == []


def test_external_server_on_ipv6_loopback(tmp_path, no_leftover_redis):
    """`redis@[::1]:PORT`: the IPv6 address is parsed, connected to and recorded in brackets
    (the endpoint the collectors and the drivers read back)."""
    with _server("::1") as (_, port):
        res = run_cli(["run", f"redis@[::1]:{port}", "--rate", "500", "--duration", "2",
                       "--warmup", "0", "--headless", "--out", str(tmp_path / "run")])
        assert res.returncode == 0, res.stderr
        meta = run_json(tmp_path / "run")
        assert meta["targets"][0]["endpoints"] == {"redis": f"[::1]:{port}"}
        assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"] == 1000
        stats = subprocess.run(["redis-cli", "-h", "::1", "-p", str(port), "INFO", "commandstats"],
                               capture_output=True, text=True).stdout
        assert re.search(r"cmdstat_xadd:calls=1000,", stats), stats


def test_cli_help_runs():
    res = subprocess.run([sys.executable, "-m", "tui.cli", "run", "--help"], capture_output=True,
                         text=True)
    assert res.returncode == 0 and "PLATFORM[:OPTION[=VALUE],...][@ADDRESS]" in res.stdout


@pytest.mark.spark
def test_report_percentiles_equal_numpy_over_raw_samples(fixed_rate_run, spark, tmp_path):
    from analysis.report import build_report, compute_report, load_runs

    run_dir, _ = fixed_rate_run
    report_md = build_report([run_dir], out_dir=tmp_path / "report")
    assert "redis" in report_md.read_text()
    data = compute_report(spark, load_runs([run_dir]))
    (target,) = data.targets
    raw = _table(run_dir, "raw").to_pydict()
    for kind in ("e2e", "publish", "delay"):
        values = np.array([v for v, k, p in zip(raw["value_ns"], raw["kind"], raw["phase"], strict=True)
                           if k == kind and p == "measuring"], dtype=np.float64)
        stats = target.latency[kind]
        assert stats.samples == len(values)
        assert stats.min_ms == pytest.approx(values.min() / 1e6)
        assert stats.max_ms == pytest.approx(values.max() / 1e6)
        for p, ours in stats.percentiles_ms.items():
            exact = np.percentile(values, p) / 1e6
            # within the histogram's resolution: 0.1 % relative, or one exact-range step (1 ns)
            assert abs(ours - exact) <= max(exact * 1e-3, 1e-6), (kind, p, ours, exact)
    # the report's rate is the measuring ticks' acknowledged messages over their seconds (the
    # ticks table through numpy); the generator's own pace is test_rate_within_two_percent's:
    # acknowledgements in the window carry the warm-up's stragglers too (a CI run: 2,063 msg/s)
    ticks = _table(run_dir, "ticks").to_pydict()
    window = np.array([(n, s) for n, s, p in zip(ticks["produced"], ticks["interval_s"],
                                                  ticks["phase"], strict=True) if p == "measuring"])
    acked = window[:, 0].sum() / window[:, 1].sum()
    assert target.throughput.produce_msg_s == pytest.approx(acked, rel=1e-9)
    assert acked == pytest.approx(RATE, rel=0.10)


def test_each_subscription_reads_every_message_once(tmp_path: Path) -> None:
    """With two subscriptions every message is read twice, once by each: --track-delivery
    counts duplicates per subscription, so there are none."""
    res = run_cli(["run", "redis", "--rate", "500", "--duration", "3", "--warmup", "0",
                   "--subscriptions", "2", "--partitions", "2", "--track-delivery", "--headless",
                   "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.stderr
    totals = run_json(tmp_path / "run")["totals"][0]
    assert totals["produced"] == 1500
    assert totals["expected"] == totals["consumed"] == 3000
    assert totals["duplicates"] == 0 and totals["drained"]
