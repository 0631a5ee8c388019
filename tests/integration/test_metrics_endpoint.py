"""`run --metrics`: a real Redis run served to Prometheus, scraped while it runs with plain HTTP
and read back with prometheus_client's own text parser; its figures against the run's files."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.exporter import LATENCY_BOUNDS_S
from tests.conftest import CLI, port_listening, run_cli, run_json

pytestmark = pytest.mark.integration

SIZE = 1024
SCRAPE_EVERY_S = 0.1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Nothing listens there and a server can bind it again (connections the endpoint closed
    may wait in TIME_WAIT, which SO_REUSEADDR, as every server sets it, passes)."""
    if port_listening(port):
        return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
            return answer.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape by (name, labels), as prometheus_client parses the text."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    matches = [v for (n, ls), v in found.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(matches) == 1, (name, labels, matches)
    return float(matches[0])


def phase_of(found: dict) -> str:
    (phase,) = [dict(ls)["phase"] for (n, ls), v in found.items()
                if n == "streambench_phase" and v == 1.0]
    return phase


@dataclass
class ServedRun:
    run_dir: Path
    port: int
    returncode: int
    stderr: str
    scrapes: list[str]


@pytest.fixture(scope="module")
def served_run(tmp_path_factory) -> ServedRun:
    """A 2 s warm-up + 4 s run at 1,000 msg/s of 1 KiB on a local redis-server, scraped every
    0.1 s from before the load until the endpoint closes."""
    run_dir = tmp_path_factory.mktemp("metrics") / "run"
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "run", "redis", "--runtime", "local", "--headless", "--warmup", "2",
         "--duration", "4", "--rate", "1000", "--size", str(SIZE), "--metrics", str(port),
         "--out", str(run_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    scrapes: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if (text := scrape(port)) is not None:
                scrapes.append(text)
            time.sleep(SCRAPE_EVERY_S)
        _, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return ServedRun(run_dir, port, proc.returncode, stderr, scrapes)


def test_the_run_is_served_from_before_the_load_to_its_end(served_run: ServedRun) -> None:
    assert served_run.returncode == 0, served_run.stderr
    assert f"metrics at http://127.0.0.1:{served_run.port}/metrics" in served_run.stderr
    phases: list[str] = []
    for text in served_run.scrapes:
        phase = phase_of(samples(text))
        if not phases or phases[-1] != phase:
            phases.append(phase)
    # the live phase moves forward through the run's phases; the drain of a run this small
    # can be shorter than the scrape interval, so each phase's start time says it was entered
    run_order = ["starting", "warm-up", "measuring", "draining", "writing", "done"]
    assert phases == sorted(phases, key=run_order.index), phases
    assert phases[0] == "starting" and {"warm-up", "measuring"} <= set(phases), phases
    last = samples(served_run.scrapes[-1])
    started = {p: value(last, "streambench_phase_start_time_seconds", phase=p) for p in run_order}
    assert sorted(started, key=started.__getitem__) == run_order, started
    ticks = ds.dataset(served_run.run_dir / "ticks", format="parquet").to_table().to_pydict()
    draining = min(t for t, p in zip(ticks["time"], ticks["phase"], strict=True) if p == "draining")
    assert started["measuring"] < started["draining"] <= draining.timestamp()
    # the endpoint waited for one scrape of the final figures, then freed its port
    assert phases[-1] == "done", phases
    assert port_free(served_run.port)


def test_counters_at_the_end_equal_the_run_files(served_run: ServedRun) -> None:
    last = samples(served_run.scrapes[-1])
    (totals,) = run_json(served_run.run_dir)["totals"]
    target = {"target": totals["label"], "platform": "redis"}
    produced = value(last, "streambench_produced_messages_total", **target)
    assert produced == totals["produced"] > 0
    assert value(last, "streambench_consumed_messages_total", **target) == totals["consumed"]
    assert value(last, "streambench_produced_bytes_total", **target) == produced * SIZE
    assert value(last, "streambench_send_errors_total", **target) == totals["send_errors"]
    ticks = ds.dataset(served_run.run_dir / "ticks", format="parquet").to_table().to_pydict()
    assert value(last, "streambench_broker_network_receive_bytes_total", **target) == sum(
        ticks["net_rx_bytes"])
    # the counters never went backwards between scrapes
    seen = [value(samples(t), "streambench_produced_messages_total", **target)
            for t in served_run.scrapes
            if any(n == "streambench_produced_messages_total" for n, _ in samples(t))]
    assert seen == sorted(seen)


def test_events_are_counted_by_kind(served_run: ServedRun) -> None:
    last = samples(served_run.scrapes[-1])
    events = ds.dataset(served_run.run_dir / "events", format="parquet").to_table().to_pydict()
    kinds = [k for k, t in zip(events["kind"], events["target"], strict=True) if t]
    assert "assignment" in kinds
    for kind in set(kinds):
        served = sum(v for (n, ls), v in last.items()
                     if n == "streambench_events_total" and dict(ls)["kind"] == kind)
        assert served == kinds.count(kind), kind


@pytest.mark.parametrize("kind, series", [("e2e", "end_to_end_latency"),
                                          ("publish", "publish_latency"),
                                          ("delay", "publish_delay")])
def test_histograms_are_the_runs_own_buckets(served_run: ServedRun, kind: str, series: str) -> None:
    """_count and _sum equal the ticks' samples; each bucket equals the latency table's
    samples whose bucket value is at most its bound (numpy on the Parquet rows)."""
    last = samples(served_run.scrapes[-1])
    name = f"streambench_{series}_seconds"
    latency = ds.dataset(served_run.run_dir / "latency", format="parquet").to_table().to_pydict()
    mine = [i for i, k in enumerate(latency["kind"]) if k == kind]
    values = np.array([latency["value_ns"][i] for i in mine], dtype=np.int64)
    counts = np.array([latency["count"][i] for i in mine], dtype=np.int64)
    ticks = ds.dataset(served_run.run_dir / "ticks", format="parquet").to_table().to_pydict()
    assert value(last, f"{name}_count") == counts.sum() == sum(ticks[f"{kind}_count"]) > 0
    assert value(last, f"{name}_sum") == pytest.approx(sum(ticks[f"{kind}_sum"]) / 1e9, rel=1e-12)
    buckets = {dict(ls)["le"]: v for (n, ls), v in last.items() if n == f"{name}_bucket"}
    assert len(buckets) == len(LATENCY_BOUNDS_S) + 1
    for le, served in buckets.items():
        bound = float(le)
        assert served == (counts[values <= bound * 1e9].sum() if bound != float("inf")
                          else counts.sum()), le


BAD = [(["--metrics", "nine"], "expected PORT or ADDRESS:PORT"),
       (["--metrics", "127.0.0.1:0"], "a port from 1 to 65535"),
       (["--metrics", "somehost:9464"], "is not an IP address")]


@pytest.mark.parametrize("args, fragment", BAD, ids=[a[1] for a, _ in BAD])
def test_bad_metrics_address_one_line_exit_2(args: list[str], fragment: str) -> None:
    res = run_cli(["run", "redis", "--runtime", "local", "--headless", "--duration", "1", *args])
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("streambench: error") and fragment in lines[0], \
        res.stderr


def test_a_taken_port_exit_2_before_anything_starts(no_leftover_redis) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_cli(["run", "redis", "--runtime", "local", "--headless", "--duration", "1",
                       "--metrics", f"127.0.0.1:{port}"])
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cannot listen there" in lines[0], res.stderr


def test_prometheus_lint_finds_nothing_wrong_in_a_scrape(served_run: ServedRun,
                                                          promcheck: Path) -> None:
    """Prometheus's exposition lint (promlint, the check of `promtool check metrics`) on a
    scrape from the measuring phase and on the final one; and the lint does find a problem in
    an exposition that breaks its rules, so its silence means something."""
    measuring = next(t for t in served_run.scrapes if phase_of(samples(t)) == "measuring")
    for text in (measuring, served_run.scrapes[-1]):
        checked = subprocess.run([str(promcheck), "lint"], input=text,
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.strip() == checked.stderr.strip() == "", checked.stdout + checked.stderr
    broken = "# HELP latency_ms a latency\n# TYPE latency_ms gauge\nlatency_ms 3\n"
    checked = subprocess.run([str(promcheck), "lint"], input=broken, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 3 and "abbreviated units" in checked.stderr, checked.stderr


DASHBOARD = Path(__file__).resolve().parents[2] / "compose" / "grafana" / "streambench.json"
# what Grafana puts in place of its variables before a query reaches Prometheus
GRAFANA_VARIABLES = {"$__rate_interval": "10s", "$target": ".*"}


def dashboard_queries() -> tuple[list[str], list[str]]:
    """The dashboard's PromQL expressions (panels and annotations, Grafana's variables filled
    in as Grafana fills them) and its template variables' queries (Grafana's own functions)."""
    import json

    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in board["annotations"]["list"]]
    for grafana, value_ in GRAFANA_VARIABLES.items():
        exprs = [e.replace(grafana, value_) for e in exprs]
    templates = [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs, templates


def test_every_dashboard_query_parses_and_names_a_served_metric(
        served_run: ServedRun, promcheck: Path) -> None:
    """Each expression goes through Prometheus's own PromQL parser, and every metric its
    selectors name (read from the parsed expression) is in a live scrape of a real run."""
    exprs, templates = dashboard_queries()
    assert len(exprs) >= 20 and all("\n" not in e for e in exprs)
    checked = subprocess.run([str(promcheck), "parse"], input="\n".join(exprs) + "\n",
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    per_query = checked.stdout.splitlines()
    assert len(per_query) == len(exprs) and all(per_query), per_query
    # a gauge without a figure in a tick is left out of that scrape (lag in seconds while
    # nothing is consumed): the names of every scrape of the run
    served = {s.name for text in served_run.scrapes for f in text_string_to_metric_families(text)
              for s in f.samples}
    named = {n for line in per_query for n in line.split()}
    assert named and named <= served, sorted(named - served)
    # the template variables' queries are Grafana's functions, not PromQL: their metric names
    in_templates = {n for q in templates for n in re.findall(r"\bstreambench_\w+", q)}
    assert in_templates <= served, sorted(in_templates - served)
    # and the parser refuses what is not PromQL
    bad = subprocess.run([str(promcheck), "parse"], input="rate(streambench_x[10s]\n",
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "parse error" in bad.stderr, bad.stderr


async def test_a_replay_serves_the_figures_the_live_run_served(served_run: ServedRun) -> None:
    """replay --metrics: the recorded run replayed to its end serves the counters and the
    histograms the live endpoint served last (the same ticks, read back from the run files),
    and seeking back to the start clears them."""
    from loadgen.exporter import replay_endpoint
    from tui.bench.recording import load_recording
    from tui.replay import ReplayApp

    recording = load_recording(served_run.run_dir)
    port = free_port()
    endpoint = replay_endpoint(recording.meta, ("127.0.0.1", port))
    try:
        app = ReplayApp(recording, playing=False, metrics=endpoint.collector)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("end")
            await pilot.pause()
            replayed = samples(scrape(port) or "")
            await pilot.press("home")
            await pilot.pause()
            restarted = samples(scrape(port) or "")
    finally:
        endpoint.close()
    live = samples(served_run.scrapes[-1])
    for name in ("streambench_produced_messages_total", "streambench_consumed_bytes_total",
                 "streambench_end_to_end_latency_seconds_count",
                 "streambench_publish_latency_seconds_sum"):
        assert value(replayed, name) == pytest.approx(value(live, name), rel=1e-12), name
    live_buckets = {k: v for k, v in live.items() if k[0].endswith("_bucket")}
    assert {k: v for k, v in replayed.items() if k[0].endswith("_bucket")} == live_buckets
    assert value(restarted, "streambench_produced_messages_total") < value(
        replayed, "streambench_produced_messages_total")
    assert port_free(port)


def test_a_dashboard_run_is_served_too(tmp_path: Path, no_leftover_redis) -> None:
    """The same endpoint under the dashboard (a real pseudo-terminal): scraped while the
    dashboard draws, its last counters are run.json's and its port is free at the end."""
    from tests.integration.test_dashboard_exit import PtyRun

    run_dir, port = tmp_path / "run", free_port()
    run = PtyRun(["run", "redis", "--runtime", "local", "--rate", "500", "--warmup", "1",
                  "--duration", "3", "--metrics", str(port), "--out", str(run_dir)])
    scrapes: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not run._reaped():
            run.read_for(0.1)
            if (text := scrape(port)) is not None:
                scrapes.append(text)
        assert run.wait_exit(10) == 0, run.screen[-2000:]
    finally:
        run.close()
    (totals,) = run_json(run_dir)["totals"]
    last = samples(scrapes[-1])
    assert value(last, "streambench_produced_messages_total") == totals["produced"] > 0
    assert value(last, "streambench_consumed_messages_total") == totals["consumed"]
    assert {phase_of(samples(t)) for t in scrapes} >= {"warm-up", "measuring", "done"}
    assert port_free(port)


def test_a_suite_serves_each_cell_in_turn(tmp_path: Path) -> None:
    """suite --metrics: every cell's run is served at the one address in turn, each with its
    own run_id, and each cell's last produced count is its run.json's."""
    suite_file = tmp_path / "two.yaml"
    suite_file.write_text(
        "name: two\ndescription: two small cells\ntargets: ['redis:runtime=local']\n"
        "workloads:\n"
        "  - {name: a, producerRate: 300, messageSize: 100, testDurationSeconds: 2,"
        " warmupDurationSeconds: 0}\n"
        "  - {name: b, producerRate: 500, messageSize: 100, testDurationSeconds: 2,"
        " warmupDurationSeconds: 0}\n")
    port, root = free_port(), tmp_path / "suite"
    proc = subprocess.Popen([*CLI, "suite", str(suite_file), "--headless", "--no-report",
                             "--metrics", str(port), "--out", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)
    produced: dict[str, float] = {}  # the last produced count served, by run_id
    deadline = time.monotonic() + 180
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if (text := scrape(port)) is not None:
                found = samples(text)
                run_id = next(dict(ls)["run_id"] for (n, ls) in found if n == "streambench_run_info")
                if any(n == "streambench_produced_messages_total" for n, _ in found):
                    produced[run_id] = value(found, "streambench_produced_messages_total")
            time.sleep(SCRAPE_EVERY_S)
        _, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    recorded = {(m := run_json(p.parent))["run_id"]: m["totals"][0]["produced"]
                for p in root.rglob("run.json")}
    assert len(recorded) == 2
    assert produced == recorded
    assert port_free(port)
