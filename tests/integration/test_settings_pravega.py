"""`broker.` settings of a real local Pravega standalone (0.13, from its Maven Central jars): a run
whose standalone keeps its long-term storage (tier 2) in files under a directory of the test's,
through broker.pravegaservice.storage.impl.name=FILESYSTEM and broker.filesystem.root, with the
segment store's writer flushing to it every 200 ms. The standalone does not tell its
configuration, so the setting is seen in force by its effect: the segment store's chunk files
in that directory. run.json records the settings as written, with their sources (the client's
too). Bad keys, broker settings for an existing cluster and the durable profile end before
anything starts, with one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from analysis.configuration import non_default_rows
from tests.integration.conftest import run_cli, run_json
from tests.integration.test_pravega import CLI_TIMEOUT_S, nothing_left_running, started_pids

pytestmark = pytest.mark.integration

__all__ = ["nothing_left_running"]  # the fixture, used by name


def _files(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


def test_storage_settings_in_force_and_recorded(tmp_path: Path, nothing_left_running):
    tier2 = tmp_path / "tier2"
    tier2.mkdir()
    run_dir = tmp_path / "run"
    spec = ("pravega:runtime=local,broker.pravegaservice.storage.impl.name=FILESYSTEM,"
            f"broker.filesystem.root={tier2},broker.writer.flush.threshold.milliseconds=200")
    res = run_cli(["run", spec, "--rate", "200", "--duration", "3", "--warmup", "0",
                   "--headless", "--out", str(run_dir)], timeout_s=CLI_TIMEOUT_S)
    assert res.returncode == 0, res.stderr[-3000:]
    written = _files(tier2)
    assert written, "the standalone wrote nothing under filesystem.root"
    # chunks of the run's own streams, under the scope's directory, with the messages' bytes
    scope = [f for f in written if f.relative_to(tier2).parts[0] == "streambench"]
    assert scope and sum(f.stat().st_size for f in scope) > 0, written
    (target,) = run_json(run_dir)["targets"]
    settings = target["settings"]
    assert settings["broker.filesystem.root"] == {"value": str(tier2), "source": "user",
                                                  "read_back": False}
    assert settings["broker.pravegaservice.storage.impl.name"] == {
        "value": "FILESYSTEM", "source": "user", "read_back": False}
    assert settings["broker.writer.flush.threshold.milliseconds"]["value"] == "200"
    assert settings["broker.pravegaservice.service.listener.host.nameOrIp"] == {
        "value": "127.0.0.1", "source": "streambench default", "read_back": False}
    assert settings["producer.max_inflight_events"] == {
        "value": "10000", "source": "streambench default", "read_back": False}
    # the metadata view and the report's configuration table mark them as not read back
    assert ["broker.filesystem.root", str(tier2), "user (as set)"] in non_default_rows(settings)
    totals = run_json(run_dir)["totals"][0]
    assert totals["produced"] == totals["consumed"] == 600


BAD = [
    ("pravega:broker.writer.flush.treshold.milliseconds=1",
     "did you mean writer.flush.threshold.milliseconds?"),
    ("pravega:broker.singlenode.segmentStore.port=12345", "use pravega:segment_store_port=N"),
    ("pravega:broker.bookkeeper.ledger.size.max=1", "runs no BookKeeper"),
    ("pravega:broker.writer.flush.threshold.milliseconds=200@tcp://127.0.0.1:9090",
     "broker settings apply to brokers streambench starts itself"),
    ("pravega:profile=durable", "no write reaches a disk to be fsynced"),
    ("pravega:producer.max_inflight=1", "did you mean max_inflight_events?"),
    ("pravega:producer.max_inflight_events=-1", "at least 0"),
    ("pravega:consumer.read_from_tail=true", "set by streambench"),
]


@pytest.mark.parametrize("spec, fragment", BAD, ids=[s for s, _ in BAD])
def test_refused_before_anything_starts(spec: str, fragment: str, tmp_path: Path):
    before = started_pids()
    run_dir = tmp_path / "run"
    res = run_cli(["run", spec, "--headless", "--duration", "1", "--out", str(run_dir)], timeout_s=60)
    assert res.returncode == 2, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("streambench: error"), res.stderr
    assert fragment in lines[0]
    assert not run_dir.exists()
    assert not started_pids() - before
