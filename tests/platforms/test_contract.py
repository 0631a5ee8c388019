"""The platform contract: what every registered platform does on every runtime it runs here,
checked on two shared runs per platform (tests/platforms/conftest.py): a clean run beside Redis
(2 partitions, 2 consumers of one subscription, delivery tracked) and a run with the faults the
platform takes, stopped once it recovered from them.

- runs and cleans up: exit 0, no broker process, port or data directory left
- rate within 2 % over the measuring phase
- every message consumed once: produced == consumed == expected, no duplicate, in run.json's
  totals and in the ticks' own sums
- lag drains to 0 at the end (per partition where the platform declares lag_per_partition)
- keyed messages (keyDistributor KEY_ROUND_ROBIN) where it declares keyed
- settings read back from the broker in exactly the namespaces it declares
- pause/resume and kill/start, each followed by a `recovered` event, as far as
  Platform.fault_actions declares them; a fault it does not declare is refused in one line
- a bad address: one line, exit 3; a port taken: one line, exit 3
- broker metrics, where the platform declares them: read at (nearly) every measuring tick,
  with the declared names and units
- beside Redis in one report (test_report.py: one report over every case's clean run)

Cases: every platform of the registry on each runtime it declares that can run here, local
for all seven of streambench's own that start brokers (redis, kafka, kafka-zk, pulsar, nats,
rabbitmq, pravega) and for an installed plugin platform. Redpanda is not among them: its record
has no local runtime (no Redpanda distribution runs here without Docker), and its docker
runtime joins only when the Docker engine holds its image. `pytest tests/platforms -k
NAME-local` runs one platform's contract."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import psutil
import pyarrow.dataset as ds
import pytest

from tests.conftest import assert_rate, pids_gone, run_cli, run_json
from tests.platforms.conftest import (
    DURATION_S,
    FAULT_RATE,
    PARTITIONS,
    RATE,
    WARMUP_S,
    Case,
    CleanRun,
    Runs,
    fault_plan,
)

pytestmark = pytest.mark.integration

GONE_TIMEOUT_S = 30


def _table(run_dir: Path, name: str) -> dict:
    return ds.dataset(run_dir / name, format="parquet").to_table().to_pydict()


def _rows(run_dir: Path, name: str, label: str) -> list[dict]:
    table = ds.dataset(run_dir / name, format="parquet").to_table().to_pylist()
    return sorted((r for r in table if r["target"] == label), key=lambda r: r.get("seq", r["time"]))


def _one_error_line(stderr: str, fragment: str) -> None:
    """Progress lines may come first; the failure is one line, the last, no traceback."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("streambench: error")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr[-3000:]
    assert fragment in errors[0], errors[0]
    assert "Traceback" not in stderr


def _ports(endpoint: str) -> list[int]:
    return [int(p) for p in re.findall(r"(?:\[[0-9a-f:.]+\]|[\w.-]+):(\d+)", endpoint)]




def _listening(port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.net_connections("tcp"))


def _clean(runs: Runs, case: Case) -> CleanRun:
    run = runs.clean(case)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    return run


def _target(run: CleanRun, label: str) -> tuple[dict, dict]:
    meta = run_json(run.run_dir)
    (target,) = [t for t in meta["targets"] if t["label"] == label]
    (totals,) = [t for t in meta["totals"] if t["label"] == label]
    return target, totals


# ---- the clean run --------------------------------------------------------------------------

def test_runs_and_cleans_up(runs: Runs, case: Case) -> None:
    run = _clean(runs, case)
    assert "Traceback" not in run.result.stderr
    meta = run_json(run.run_dir)
    assert [t["label"] for t in meta["targets"]] == run.labels
    assert not meta["stopped_early"] and meta["broker_failures"] == []
    for target in meta["targets"]:
        assert target["runtime"] == case.runtime and target["version"], target
        assert target["pids"] or target["containers"], target
        assert pids_gone(target["pids"], GONE_TIMEOUT_S), (
            f"{target['label']}: a broker process is still running")
        data_dir = target["config"].get("data_dir")
        if case.runtime == "local":
            assert data_dir, target["config"]
        assert data_dir is None or not Path(data_dir).exists(), data_dir
        for endpoint in target["endpoints"].values():
            for port in _ports(str(endpoint)):
                assert not _listening(port), f"{target['label']}: {endpoint} still listens"


def test_rate_within_two_percent(runs: Runs, case: Case) -> None:
    run = _clean(runs, case)
    ticks = _rows(run.run_dir, "ticks", case.platform)
    assert sum(1 for t in ticks if t["phase"] == "measuring") == DURATION_S
    _, totals = _target(run, case.platform)
    assert_rate(ticks, totals["produced"], RATE, WARMUP_S)


def test_every_message_consumed_once(runs: Runs, case: Case) -> None:
    run = _clean(runs, case)
    _, totals = _target(run, case.platform)
    assert totals["send_errors"] == totals["receive_errors"] == 0, totals
    assert totals["produced"] == RATE * (WARMUP_S + DURATION_S), totals  # no slot skipped
    assert totals["consumed"] == totals["produced"] == totals["expected"], totals
    assert totals["duplicates"] == 0 and totals["lost"] == 0, totals
    # the ticks' own series add up to the same
    ticks = _rows(run.run_dir, "ticks", case.platform)
    assert sum(t["produced"] for t in ticks) == totals["produced"]
    assert sum(t["consumed"] for t in ticks) == totals["consumed"]
    assert ticks[-1]["produced_total"] == ticks[-1]["consumed_total"] == totals["produced"]
    # and the consumers' rows: every consumer of the subscription read, together all of it
    consumers = _rows(run.run_dir, "consumers", case.platform)
    assert {c["consumer"] for c in consumers} == {0, 1}
    assert sum(c["consumed"] for c in consumers) == totals["consumed"]


def test_lag_drains_to_zero(runs: Runs, case: Case) -> None:
    run = _clean(runs, case)
    _, totals = _target(run, case.platform)
    assert totals["drained"] and totals["final_lag"] == 0, totals
    ticks = _rows(run.run_dir, "ticks", case.platform)
    assert ticks[-1]["lag_total"] == 0
    lag = _rows(run.run_dir, "lag", case.platform)
    if case.record.lag_per_partition:
        last = ticks[-1]["seq"]
        assert {r["partition"]: r["lag"] for r in lag if r["seq"] == last} == dict.fromkeys(
            range(PARTITIONS), 0)
        # every partition in every reading, and the partitions add up to the total
        by_seq: dict[int, dict[int, int]] = {}
        for r in lag:
            by_seq.setdefault(r["seq"], {})[r["partition"]] = r["lag"]
        totals_by_seq = {t["seq"]: t["lag_total"] for t in ticks}
        for seq, parts in by_seq.items():
            assert set(parts) == set(range(PARTITIONS)), (seq, parts)
            assert sum(parts.values()) == totals_by_seq[seq], (seq, parts)
    else:  # the declaration is true: a total only
        assert lag == []


def test_keys(runs: Runs, case: Case) -> None:
    """A platform declaring `keyed` runs keyed messages (KEY_ROUND_ROBIN) in the clean run,
    and they arrive as the unkeyed do (the checks above); the others run unkeyed."""
    run = _clean(runs, case)
    workload = run_json(run.run_dir)["workload"]
    assert workload["keyDistributor"] == ("KEY_ROUND_ROBIN" if case.record.keyed else "NO_KEY")
    _, totals = _target(run, case.platform)
    assert totals["consumed"] == totals["produced"] > 0


def test_settings_read_back(runs: Runs, case: Case) -> None:
    """Settings read back from the broker in exactly the namespaces the platform declares."""
    run = _clean(runs, case)
    target, _ = _target(run, case.platform)
    settings = target["settings"]
    assert settings, "no settings recorded"
    read_back = {name.partition(".")[0] for name, s in settings.items() if s["read_back"]}
    assert read_back == set(case.record.settings_read_back), read_back


def test_broker_metrics(runs: Runs, case: Case) -> None:
    """A platform declaring broker metrics has them read at every measuring tick of the clean
    run (none stale: nothing pauses the broker), only names it declares, each with its unit,
    and run.json names each as the broker does; the others record none."""
    run = _clean(runs, case)
    rows = _rows(run.run_dir, "broker_metrics", case.platform)
    trait = case.record.broker_metrics
    if trait is None:
        assert rows == []
        return
    declared = {m.name: m.unit for m in trait.metrics}
    assert {(r["name"], r["unit"]) for r in rows} <= set(declared.items())
    measuring = {t["seq"] for t in _rows(run.run_dir, "ticks", case.platform)
                 if t["phase"] == "measuring"}
    read = {r["seq"] for r in rows if r["phase"] == "measuring" and not r["stale"]}
    # a read left unanswered for 0.9 s on a busy machine is stale: most are read
    assert read <= measuring and len(read) >= 0.8 * len(measuring), sorted(measuring - read)
    target, _ = _target(run, case.platform)
    assert {m["name"]: m["native"] for m in target["broker_metrics"]["metrics"]} == {
        m.name: m.native for m in trait.metrics}


# ---- the fault run --------------------------------------------------------------------------

def test_faults_and_recovery(runs: Runs, case: Case) -> None:
    """Each fault pair the platform takes on this runtime, then a `recovered` event before the
    next; the run goes on at its rate; the fault's kill is no broker death."""
    plan = fault_plan(case)
    if not plan:  # it takes none of them: a fault is refused before anything starts
        _refused(case, "kill")
        return
    run = runs.faults(case)
    assert "Traceback" not in run.stderr
    assert run.code == 130, run.stderr[-3000:]  # stopped by SIGINT once it recovered
    meta = run_json(run.run_dir)
    assert meta["broker_failures"] == [], meta["broker_failures"]
    events = sorted(_rows(run.run_dir, "events", case.platform), key=lambda e: e["time"])
    kinds = [e["kind"] for e in events if e["kind"].startswith("fault-") or e["kind"] == "recovered"]
    expected = [k for fault, undo in plan for k in (f"fault-{fault}", f"fault-{undo}", "recovered")]
    assert kinds == expected, kinds
    assert "broker-died" not in [e["kind"] for e in events]
    # the stretch after the last recovery runs at the rate (its last measuring tick is cut
    # short by the stop, so it is left out)
    last = max(e["time"] for e in events if e["kind"] == "recovered")
    after = sorted((t for t in _rows(run.run_dir, "ticks", case.platform)
                    if t["phase"] == "measuring" and t["time"] > last), key=lambda t: t["time"])
    assert len(after) >= 2, after
    produced = sum(t["produced"] for t in after[:-1])
    assert produced >= 0.9 * FAULT_RATE * sum(t["interval_s"] for t in after[:-1]), after
    (target,) = meta["targets"]
    assert pids_gone(target["pids"], GONE_TIMEOUT_S)


@pytest.mark.parametrize("fault", ["pause", "kill"])
def test_an_undeclared_fault_is_refused(case: Case, fault: str) -> None:
    """A fault the platform does not declare on this runtime is one line, exit 2, before
    anything starts; one it declares is accepted (the fault run above carries it out)."""
    if fault in case.record.fault_actions(case.runtime):
        assert fault in [f for pair in fault_plan(case) for f in pair]
        return
    _refused(case, fault)


def _refused(case: Case, fault: str) -> None:
    res = run_cli(["run", case.platform, "--runtime", case.runtime, "--rate", "100",
                   "--duration", "3", "--headless", "--at", f"1s:{fault}={case.platform}"])
    assert res.returncode == 2, res.stderr
    _one_error_line(res.stderr, f"has no {fault!r} fault here")


# ---- mistakes: one line, nothing left running -------------------------------------------------

def _unreachable(case: Case) -> str:
    """An address of the platform's form (its record's address_example) where nothing listens."""
    example = case.record.address_example.split(" ")[0].split("[")[0]
    address = re.sub(r"HOST:(PORT|\d+)", "127.0.0.1:1", example)
    assert "HOST" not in address and "127.0.0.1:1" in address, case.record.address_example
    return address


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_bad_address_one_line_exit_3(case: Case, tmp_path: Path) -> None:
    before = _children()
    res = run_cli(["run", f"{case.platform}@{_unreachable(case)}", "--headless", "--duration",
                   "1", "--out", str(tmp_path / "run")], timeout_s=120)
    assert res.returncode == 3, res.stderr
    _one_error_line(res.stderr, "127.0.0.1:1")
    assert _children() <= before


def test_port_taken_one_line_exit_3(case: Case, tmp_path: Path) -> None:
    before = _children()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = run_cli(["run", f"{case.platform}:port={port}", "--runtime", case.runtime,
                       "--headless", "--duration", "1", "--out", str(tmp_path / "run")],
                      timeout_s=120)
    assert res.returncode == 3, res.stderr
    _one_error_line(res.stderr, f"port {port} on 127.0.0.1 is already in use")
    assert _children() <= before
