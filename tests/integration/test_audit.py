"""The delivery audit (--audit) against real brokers, its counts held to what the broker holds:
a Redis server's streams read with XRANGE while the run still has them (the verdict's event
comes before the stacks go down), entries deleted, re-added and copied by the test so that the
broker really loses, reorders and duplicates messages; NATS through the command line."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from analysis.sink import ParquetSink
from compose.toxiproxy import toxiproxy_program
from loadgen.core.audit import unstamp
from loadgen.core.bus import BusItem
from loadgen.core.events import RunEvent
from loadgen.core.interventions import PROXIED_OPTION, parse_at
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.integration.conftest import run_cli, run_json

pytestmark = pytest.mark.integration


def _stream_keys(client: redis.Redis, run: Run) -> list[str]:
    topic = f"streambench-{run.run_id}-0-0"
    return sorted(k.decode() for k in client.scan_iter(match=f"{topic}-*"))


def _stored(client: redis.Redis, keys: list[str]) -> list[tuple[int, int]]:
    """(producer, seq) of every entry the server holds, read back with XRANGE."""
    out = []
    for key in keys:
        for _, fields in client.xrange(key):
            producer, seq, _ = unstamp(int(fields[b"t"]))
            out.append((producer, seq))
    return out


class _Broker:
    """What the test reads from the server when the verdict comes, on the run's bus."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.client: redis.Redis | None = None
        self.stored: list[tuple[int, int]] = []
        self.xlen = 0
        self.verdict = ""
        self.consumers_stopped = threading.Event()
        run.subscribe(self.on_item)

    def connect(self) -> redis.Redis:
        desc = self.run.runners[0].describe()
        host, port = desc["endpoints"]["redis"].rsplit(":", 1)
        self.client = redis.Redis(host=host.strip("[]"), port=int(port))
        return self.client

    def on_item(self, item: BusItem) -> None:
        if not isinstance(item, RunEvent):
            return
        if item.kind == "consumers" and item.detail.endswith("stopped"):
            self.consumers_stopped.set()
        if item.kind == "delivery-audit":
            client = self.client or self.connect()
            keys = _stream_keys(client, self.run)
            self.stored = _stored(client, keys)
            self.xlen = sum(client.xlen(k) for k in keys)
            self.verdict = item.detail


def test_redis_loss_reorder_duplicate_counted_as_the_server_holds(tmp_path: Path) -> None:
    """With the consumers stopped, the test deletes three unread entries (XDEL), adds the first
    of them again at the stream's end (read after later ones: reordered) and adds a copy of an
    entry already read (read twice, at two positions: duplicated). The audit must count two
    lost, one reordered, one duplicated, and its acknowledged messages must be what XRANGE
    shows minus the copies plus the deleted."""
    workload = Workload(name="audit", rate=1000, duration_s=7, warmup_s=0, partitions=1,
                        consumers=1, message_size=100,
                        schedule=(parse_at("2s:consumers=stop"), parse_at("4s:consumers=start")))
    run = Run(workload, unique_labels([resolve_target("redis:runtime=local")]),
              out_dir=tmp_path / "run", audit=True, recorder=ParquetSink)
    broker = _Broker(run)
    done: dict[str, object] = {}

    def meddle() -> None:
        assert broker.consumers_stopped.wait(60)
        time.sleep(0.5)  # unread entries pile up
        client = broker.connect()
        (key,) = _stream_keys(client, run)
        (group,) = client.xinfo_groups(key)
        last = group["last-delivered-id"]
        read = client.xrange(key, max=last, count=10**9)
        unread = client.xrange(key, min=f"({last.decode()}", count=3)
        assert len(unread) == 3 and read
        client.xdel(key, *[e[0] for e in unread])
        client.xadd(key, unread[0][1])  # the first deleted, again at the end
        client.xadd(key, read[-1][1])  # a copy of one read already
        done["deleted"] = [unstamp(int(e[1][b"t"]))[:2] for e in unread]
        done["copied"] = unstamp(int(read[-1][1][b"t"]))[:2]

    helper = threading.Thread(target=meddle, daemon=True)
    helper.start()
    summary = run_precise(run.execute())
    helper.join(5)
    assert "deleted" in done, "the test did not get to change the stream"
    (totals,) = summary.targets
    audit = totals.audit
    assert audit is not None
    assert (audit["lost"], audit["reordered"], audit["duplicated"]) == (2, 1, 1), audit
    assert audit["unexpected"] == audit["unseen"] == 0, audit
    deleted = done["deleted"]
    assert isinstance(deleted, list)
    shown = audit["examples"]
    assert shown["lost"] == [f"producer {p} #{s}" for p, s in deleted[1:]]
    assert shown["reordered"] == [f"producer {deleted[0][0]} #{deleted[0][1]}"]
    copied = done["copied"]
    assert isinstance(copied, tuple)
    assert shown["duplicated"] == [f"producer {copied[0]} #{copied[1]}"]
    # the server's own records: every acknowledged message is there but the two lost, one
    # entry is there twice, the re-added one once
    held = Counter(broker.stored)
    assert broker.xlen == len(broker.stored) == audit["acknowledged"] - 2 + 1
    assert [k for k, n in held.items() if n > 1] == [copied]
    acked = {(0, s) for s in range(1, audit["sent"] + 1)}
    assert acked - set(held) == set(deleted[1:])
    assert audit["acknowledged"] == audit["sent"] == totals.produced
    # the window after the consumers' stop is not a fault: one window holds it all
    assert [w["name"] for w in audit["windows"]] == ["before any fault"]
    assert broker.verdict.startswith("lost 2, unexpected 0, duplicated 1, reordered 1")
    meta = run_json(tmp_path / "run")
    assert meta["totals"][0]["audit"]["lost"] == 2


def test_redis_two_processes_two_subscriptions_clean(tmp_path: Path) -> None:
    """Producers and consumers over two load processes, two subscriptions each dealt over
    consumers in both: every acknowledged message read once by each, and the audit's counts
    are the server's (XLEN, XRANGE)."""
    workload = Workload(name="audit-2p", rate=2000, duration_s=4, warmup_s=0, partitions=2,
                        producers=2, consumers=2, subscriptions=2, message_size=100)
    run = Run(workload, unique_labels([resolve_target("redis:runtime=local")]),
              out_dir=tmp_path / "run", audit=True, processes=2, recorder=ParquetSink)
    broker = _Broker(run)
    summary = run_precise(run.execute())
    (totals,) = summary.targets
    audit = totals.audit
    assert audit is not None and audit["sent"] > 5000, audit
    assert broker.xlen == audit["acknowledged"] == audit["consumed"] == totals.produced
    assert Counter(broker.stored).most_common(1)[0][1] == 1
    assert {p for p, _ in broker.stored} == {0, 1}  # both producers, one in each process
    assert totals.consumed == 2 * audit["consumed"]  # each subscription read each message
    for key in ("lost", "unexpected", "duplicated", "reordered", "unseen", "failed"):
        assert audit[key] == 0, (key, audit)
    assert broker.verdict.startswith("clean: ")


def test_nats_audit_through_the_command_line(tmp_path: Path) -> None:
    """A NATS JetStream run with --audit (two partitions): clean, its acknowledged count the
    producers' and what the stream's consumers read."""
    out = tmp_path / "run"
    done = run_cli(["run", "nats:runtime=local", "--rate", "1000", "--duration", "3",
                    "--warmup", "0", "--partitions", "2", "--audit", "--headless", "--out",
                    str(out)], timeout_s=180)
    assert done.returncode == 0, done.stderr[-2000:]
    (totals,) = run_json(out)["totals"]
    audit = totals["audit"]
    assert audit["acknowledged"] == totals["produced"] == audit["consumed"] > 2000, audit
    assert audit["lost"] == audit["duplicated"] == audit["reordered"] == 0, audit
    assert "delivery audit: lost 0, unexpected 0, duplicated 0, reordered 0, unseen 0" in done.stderr


@pytest.fixture(scope="module")
def toxiproxy() -> Path:
    """The proxy's server program, built into the cache once."""
    return asyncio.run(toxiproxy_program(print))


def test_redis_partitioned_from_its_clients_loses_nothing(tmp_path: Path, toxiproxy: Path) -> None:
    """The Redis drill: the server cut from its clients by Toxiproxy for 3 s. Sends fail
    meanwhile, the target recovers after the heal, and on return nothing acknowledged is lost.
    A send whose reply the cut swallowed may still have been stored: the audit counts it as
    unexpected, and the server's own records (XRANGE) must show exactly the acknowledged
    messages plus those."""
    workload = Workload(name="audit-partition", rate=1000, duration_s=16, warmup_s=1,
                        partitions=2, consumers=2, message_size=100,
                        schedule=(parse_at("3s:partition"), parse_at("6s:heal")))
    (target,) = unique_labels([resolve_target("redis:runtime=local")])
    target.options[PROXIED_OPTION] = True
    run = Run(workload, [target], out_dir=tmp_path / "run", audit=True, recorder=ParquetSink)
    broker = _Broker(run)
    events: list[RunEvent] = []
    run.subscribe(lambda item: events.append(item) if isinstance(item, RunEvent) else None)
    summary = run_precise(run.execute())
    (totals,) = summary.targets
    audit = totals.audit
    assert audit is not None
    kinds = [e.kind for e in events]
    assert "net-partition" in kinds and "net-heal" in kinds
    recovered = [e.detail for e in events if e.kind == "recovered"]
    assert recovered and "after heal redis" in recovered[0], [
        (e.kind, e.detail) for e in events if e.kind in ("recovered", "not-recovered")]
    assert totals.send_errors > 0 and audit["failed"] == totals.send_errors, audit
    assert audit["lost"] == audit["duplicated"] == audit["unseen"] == 0, audit
    assert audit["acknowledged"] == totals.produced
    # against the server: stored = acknowledged + unexpected, each stored once
    held = Counter(broker.stored)
    assert max(held.values()) == 1
    acked_count = audit["acknowledged"]
    assert broker.xlen == acked_count + audit["unexpected"], (broker.xlen, audit)
    assert audit["unexpected"] == audit["unexpected_failed"]  # each one's send said it failed
    windows = {w["name"].split(" ")[0]: w for w in audit["windows"]}
    assert set(windows) == {"before", "net-partition", "net-heal"}, list(windows)
    # a message belongs to the window its intended send time falls in: those in flight when the
    # proxy stopped (sent before the fault, their replies cut) fail in the window before
    assert windows["net-partition"]["failed"] > windows["before"]["failed"], windows
    assert windows["net-heal"]["lost"] == windows["net-heal"]["unexpected"] == 0
    print(f"redis partitioned 3 s: {totals.send_errors:,} send errors, {recovered[0]}; audit: "
          f"{broker.verdict}; the server holds {broker.xlen:,} entries; failed per window: "
          f"{ {k: w['failed'] for k, w in windows.items()} }")
