"""Benchmark: the aggregate maximum rate of one Redis target with its load in two local worker
processes (--processes 2) against two Ray actors on a two-node Ray cluster of this machine
(--cluster), in alternating pairs in the same run, and the coordinator's CPU in each.

Both placements drive the same redis-server with 2 producers and 2 consumers (2 partitions,
1 KiB, as fast as acknowledged). A run's rate is its measuring ticks' produced messages over
their intervals; its count is checked against the server's own XADD calls (INFO
commandstats). The coordinator's CPU is this process's user + system time over the run (the
run loop, the Parquet writer, and with Ray its driver threads), in % of one core. Prints both
side by side and the ratio Ray / local; the engine's goal is >= 0.9."""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pyarrow.dataset as ds

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analysis.sink import ParquetSink
from loadgen.cluster import Cluster
from loadgen.core.target import unique_labels
from loadgen.core.workload import Workload
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.conftest import redis_server
from tests.integration.ray_support import two_node_cluster


def xadd_calls(port: int) -> int:
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"cmdstat_xadd:calls=(\d+)", out)
    return int(m.group(1)) if m else 0


def one_run(port: int, gcs: str | None, seconds: float, out: Path) -> tuple[float, float, float]:
    """(produced msg/s, consumed msg/s, coordinator CPU %) of one max-rate run."""
    workload = Workload(name="bench-ray", rate=0, message_size=1024, partitions=2, producers=2,
                        consumers=2, duration_s=seconds, warmup_s=2)
    cluster = None
    if gcs is not None:
        cluster = Cluster(gcs, nodes=2, strategy="spread")
        cluster.connect()
    me = psutil.Process()
    before_cpu, before_wall, before_xadd = me.cpu_times(), time.monotonic(), xadd_calls(port)
    run = Run(workload, unique_labels([resolve_target(f"redis@127.0.0.1:{port}")]), out_dir=out,
              processes=2, cluster=cluster, recorder=ParquetSink)
    summary = run_precise(run.execute())
    cpu, wall = me.cpu_times(), time.monotonic() - before_wall
    coordinator = 100 * ((cpu.user - before_cpu.user) + (cpu.system - before_cpu.system)) / wall
    (t,) = summary.targets
    server = xadd_calls(port) - before_xadd
    if server != t.produced + t.send_errors or t.send_errors or t.consumed != t.produced:
        raise SystemExit(f"count mismatch: produced {t.produced:,} (+{t.send_errors} errors), "
                         f"consumed {t.consumed:,}, the server executed {server:,} XADDs")
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pydict()
    rows = [i for i, p in enumerate(ticks["phase"]) if p == "measuring"]
    interval = sum(ticks["interval_s"][i] for i in rows)
    if not interval:
        # the run loop woke late and merged the measuring seconds into a warm-up tick
        # (coordinator-late), or a stop (memory-low) ended the load in the warm-up
        events = ds.dataset(out / "events", format="parquet").to_table().to_pydict()
        why = "; ".join(f"{k}: {d}" for k, d in zip(events["kind"], events["detail"], strict=True)
                        if k in ("coordinator-late", "memory-low"))
        raise SystemExit(f"the {'Ray' if gcs else 'local'} run has no measuring tick to take "
                         f"a rate from ({why or 'no tick was cut in its measuring phase'}): "
                         "a longer --seconds gives the measuring phase more ticks")
    late = sum(1 for i in rows if ticks["nodes_late"][i] or ticks["nodes_late_counted"][i])
    if late:  # a late node's counts fall in a later tick: a short phase gains or loses them
        print(f"  {late} of {len(rows)} measuring ticks had a load node's tick late", flush=True)
    return (sum(ticks["produced"][i] for i in rows) / interval,
            sum(ticks["consumed"][i] for i in rows) / interval, coordinator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10, help="measuring phase of each run")
    parser.add_argument("--pairs", type=int, default=2, help="local/Ray pairs, alternated")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {"local": [], "ray": []}
    # the cluster's network namespace holds the nodes, the redis-server and this process's
    # runs: loopback is its only address
    with two_node_cluster() as cluster, cluster.net.entered(), redis_server() as port, \
            tempfile.TemporaryDirectory() as tmp:
        for k in range(args.pairs):
            for name, gcs in (("local", None), ("ray", cluster.gcs)):
                load = os.getloadavg()[0]
                r = one_run(port, gcs, args.seconds, Path(tmp) / f"{name}-{k}")
                results[name].append(r)
                print(f"pair {k + 1} {name:5}: produced {r[0]:>9,.0f} msg/s, consumed "
                      f"{r[1]:>9,.0f} msg/s, coordinator CPU {r[2]:5.1f} % "
                      f"(load {load:.1f} before)", flush=True)
    print(f"\n{'placement':26}{'produced msg/s':>16}{'consumed msg/s':>16}{'coordinator CPU %':>19}")
    medians = {}
    for name, label in (("local", "local, --processes 2"), ("ray", "Ray, 2 nodes × 1 actor")):
        rows = results[name]
        medians[name] = [statistics.median(r[i] for r in rows) for i in range(3)]
        m = medians[name]
        print(f"{label:26}{m[0]:>16,.0f}{m[1]:>16,.0f}{m[2]:>19.1f}")
    print(f"ratio Ray / local (medians of {args.pairs} pair(s)): produced "
          f"{medians['ray'][0] / medians['local'][0]:.2f}, coordinator CPU "
          f"{medians['ray'][2] / max(medians['local'][2], 1e-9):.2f}")


if __name__ == "__main__":
    main()
