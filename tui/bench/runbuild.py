"""Building a run from the command line: the workload with its flags over it, each TARGET as
the run takes it, and the pre-flight checks (will the backlog and the kept messages fit here);
nothing is started. `streambench run` and the launcher build their runs here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from loadgen.core.errors import StreambenchError, WorkloadError

if TYPE_CHECKING:
    from loadgen.cluster import Cluster
    from loadgen.core.target import Target
    from loadgen.core.workload import Workload
    from loadgen.run import Run
    from tui.history import Baseline


def warn(message: str) -> None:
    sys.stderr.write(f"streambench: warning: {message}\n")


def workload_from(args: argparse.Namespace) -> Workload:
    """The workload a run of these arguments measures: its file (or the default) with the
    flags over it."""
    from loadgen.core.interventions import parse_at
    from loadgen.core.workload import Workload, load_workload

    base = load_workload(args.workload) if args.workload else Workload(warmup_s=10.0)
    for w in base.warnings:
        warn(w)
    if args.max_rate and args.rate is not None:
        raise WorkloadError("--rate and --max-rate exclude each other")
    overrides = {
        "rate": 0.0 if args.max_rate else args.rate,
        "message_size": args.size,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "pacing_window_ms": args.pacing_window,
        "partitions": args.partitions,
        "producers": args.producers,
        "consumers": args.consumers,
        "subscriptions": args.subscriptions,
        "schedule": (base.schedule + tuple(parse_at(text) for text in args.at)) if args.at else None,
    }
    if args.max_rate:
        # with_overrides refuses a zero --rate; max rate is asked for explicitly here
        import dataclasses

        base = dataclasses.replace(base, rate=0.0, rate_search=args.max_rate == "search")
        overrides["rate"] = None
    return base.with_overrides(**overrides)


def with_driver(specs: Sequence[str], driver: str | None) -> list[str]:
    """--driver FILE: the option driver=FILE added to every target (each must take it)."""
    if driver is None:
        return list(specs)
    from loadgen.core.workload import shown
    from loadgen.platforms import PLATFORMS

    if any(c in driver for c in ",@=") or not driver:
        raise WorkloadError(f"--driver {shown(driver, 100)}: a driver file's path cannot contain "
                            "',', '@' or '=' (the TARGET syntax uses them); use driver=FILE")
    out = []
    for spec in specs:
        head, at, address = spec.partition("@")
        platform = head.split(":", 1)[0]
        takes = [name for name, p in PLATFORMS.items() if "driver" in p.options]
        if platform in PLATFORMS and "driver" not in PLATFORMS[platform].options:
            raise WorkloadError(f"--driver: target {shown(spec, 100, quote=True)} takes no OMB "
                                f"driver file (those that do: {', '.join(takes)})")
        head += ("," if ":" in head else ":") + f"driver={driver}"
        out.append(head + at + address)
    return out


def check_backlog_room(workload: Workload, targets: Sequence[Target]) -> None:
    """A backlog phase (consumerBacklogSizeGB) must fit where the brokers streambench starts keep
    it: in memory for a platform that keeps its messages there, else on the disk of the
    temporary folder (the brokers' data folders)."""
    if not workload.backlog_bytes:
        return
    import shutil
    import tempfile

    import psutil

    from loadgen.platforms import PLATFORMS

    need = workload.backlog_bytes * workload.topics
    started = [t for t in targets if t.runtime != "external"]
    in_memory = [t for t in started if PLATFORMS[t.platform].memory_per_message is not None]
    if in_memory:
        free = psutil.virtual_memory().available
        if need > free:
            names = ", ".join(dict.fromkeys(t.platform for t in in_memory))
            raise WorkloadError(f"consumerBacklogSizeGB: the backlog ({need / 2**30:.1f} GiB) does "
                                f"not fit in the {free / 2**30:.1f} GiB of free memory {names} "
                                "keeps its messages in")
    if len(in_memory) < len(started):
        folder = tempfile.gettempdir()
        free = shutil.disk_usage(folder).free
        if need > free:
            raise WorkloadError(f"consumerBacklogSizeGB: the backlog ({need / 2**30:.1f} GiB) does "
                                f"not fit in the {free / 2**30:.1f} GiB free on the disk of {folder}, "
                                "where the brokers keep their data")


def check_memory_room(workload: Workload, targets: Sequence[Target], floor: int | None) -> None:
    """A warning before the start when the brokers streambench starts on this machine will not
    hold the run's messages in memory (a platform whose broker keeps every message there, its
    memory_per_message): the memory guard would stop the run part-way."""
    import psutil

    from compose.docker import memory_bytes
    from loadgen.memguard import default_floor, size_text
    from loadgen.platforms import PLATFORMS

    if workload.rate <= 0:
        return
    kept: list[tuple[Target, int]] = []
    for t in targets:
        per_message = PLATFORMS[t.platform].memory_per_message
        each_message = per_message(t, workload) if per_message and t.runtime != "external" else None
        if each_message:
            kept.append((t, each_message))
    if not kept:
        return
    seconds = workload.warmup_s + workload.duration_s
    # the rate is the target's, over all its topics and producers
    messages = workload.rate * seconds
    need = sum(messages * per for _, per in kept)
    available = psutil.virtual_memory().available
    floor = default_floor() if floor is None else floor
    for t, per in kept:
        relief = PLATFORMS[t.platform].memory_relief
        limit = t.options.get("memory") if t.runtime == "docker" else None
        if limit and messages * per > memory_bytes(str(limit)):
            warn(f"target {t.label or t.spec}: its broker will take about "
                 f"{size_text(messages * per)} of memory for its messages ({workload.rate:,.0f} "
                 f"msg/s for {seconds:g} s), more than its container's limit (memory={limit}): the "
                 "kernel will kill the broker part-way and the run will report it as died"
                 + (f"; {relief}" if relief else ""))
    if need > available - floor:
        reliefs = "; ".join(dict.fromkeys(r for t, _ in kept if (r := PLATFORMS[t.platform].memory_relief)))
        per_text = "/".join(dict.fromkeys(f"{per:,}" for _, per in kept))
        warn(f"the run's brokers will take about {size_text(need)} of memory for their messages "
             f"({workload.rate:,.0f} msg/s for {seconds:g} s, about {per_text} B per message), "
             f"and the machine has {size_text(available)} available: the run will stop itself "
             f"when it falls under {size_text(floor)} (--min-free-memory)"
             + (f"; {reliefs}" if reliefs else ""))


def check_target(spec: str, args: argparse.Namespace, workload: Workload | None = None) -> Target:
    """One TARGET of `streambench run` as the run takes it (its runtime, --driver, --cpus,
    --memory, --resources, --keep); raises the error the command line prints."""
    from loadgen.platforms import resolve_target
    from loadgen.platforms.runtime import with_run_settings

    cpus = args.cpus if args.cpus is not None or workload is None else workload.broker_cpus
    memory = args.memory if args.memory is not None or workload is None else workload.broker_memory
    (spec,) = with_driver([spec], args.driver)
    return with_run_settings(resolve_target(spec, args.runtime), cpus, memory, args.resources,
                             args.keep, getattr(args, "cadvisor", None))


def with_network_faults(targets: Sequence[Target], workload: Workload, asked: bool | str) -> None:
    """--network-faults, or a network fault in the schedule: every target's clients go through
    a proxy (its options' PROXIED_OPTION: True for a proxy streambench starts, the URL of the
    user's own Toxiproxy for an existing cluster, --network-faults=URL). A target whose links
    cannot be proxied (an existing cluster without that URL, a platform with no proxied
    endpoints) is refused in one line."""
    from loadgen.core.errors import TargetError
    from loadgen.core.interventions import PROXIED_OPTION
    from loadgen.platforms import PLATFORMS

    scheduled = [i for i in workload.schedule if i.network]
    if not (asked or scheduled):
        return
    why = "--network-faults" if asked else f"the scheduled {scheduled[0].describe()}"
    for t in targets:
        if scheduled and not asked and all(i.target not in (None, t.label) for i in scheduled):
            continue
        platform = PLATFORMS[t.platform]
        if not platform.proxies_links(t.runtime):
            if platform.stack_proxies:
                raise TargetError(f"target {t.label}: {why}: {t.platform}'s links are proxied on "
                                  f"the {' and '.join(platform.stack_proxies)} runtime only, "
                                  f"not {t.runtime}")
            raise TargetError(f"target {t.label}: {why}: {t.platform} has no links streambench "
                              "can proxy yet (those that do: " + ", ".join(
                                  n for n, p in PLATFORMS.items()
                                  if p.proxied_endpoints or p.stack_proxies) + ")")
        runtimes = platform.proxied_runtimes
        if runtimes is not None and t.runtime not in runtimes:
            raise TargetError(f"target {t.label}: {why}: {t.platform}'s links are proxied on "
                              f"runtime {' or '.join(runtimes)} only, not {t.runtime} (see "
                              "docs/network-faults.md)")
        if t.runtime == "external" and not isinstance(asked, str):
            raise TargetError(f"target {t.label}: {why}: an existing cluster's links are not "
                              "proxied by streambench; run a Toxiproxy in front of it, give the "
                              "target its proxy's address and --network-faults=http://HOST:PORT "
                              "its API")
        t.options[PROXIED_OPTION] = asked if t.runtime == "external" else True


def connect_cluster(args: argparse.Namespace, targets: Sequence[Target]) -> Cluster | None:
    """--cluster: the Ray cluster the load goes to, reached and its nodes placed (one load
    actor per node and target: args.processes becomes their number); None without it. Raises
    ClusterError (one line, exit 2) for a cluster that cannot be used."""
    if not getattr(args, "cluster", None):
        if (getattr(args, "nodes", None) is not None or getattr(args, "placement", None)
                or getattr(args, "node_resource", None) or getattr(args, "split_roles", False)
                or getattr(args, "tick_group", None) is not None):
            raise WorkloadError("--nodes, --placement, --node-resource, --split-roles and "
                                "--tick-group choose nodes of a --cluster")
        if getattr(args, "same_node_latency", False):
            raise WorkloadError("--same-node-latency times the messages of a --cluster's "
                                "nodes: it needs --cluster")
        return None
    from loadgen.cluster import Cluster

    cluster = Cluster(args.cluster, args.nodes, args.placement or "spread", len(targets),
                      dict(getattr(args, "node_resource", None) or []),
                      bool(getattr(args, "split_roles", False)),
                      bool(getattr(args, "same_node_latency", False)),
                      tuple(sorted({t.platform for t in targets})),
                      getattr(args, "tick_group", None))
    cluster.connect()
    args.processes = cluster.workers
    return cluster


def build_run(args: argparse.Namespace,
              argv: Sequence[str]) -> tuple[Run, dict[str, Baseline] | None]:
    """The Run `streambench run` would start for these arguments (nothing started yet), and
    the baselines its dashboard draws; raises the error the command line prints."""
    from analysis.hdrlog import with_interval_logs
    from analysis.sink import ParquetSink
    from loadgen.core.target import unique_labels
    from loadgen.placement import auto_processes
    from loadgen.run import Run
    from tui.bench.parser import MAX_PROCESSES

    if args.processes != "auto" and args.processes > MAX_PROCESSES:
        raise WorkloadError(f"--processes {args.processes}: at most {MAX_PROCESSES} load processes "
                            "per target")
    workload = workload_from(args)
    if args.processes == "auto":
        clients = workload.topics * (workload.producers + workload.subscriptions * workload.consumers)
        args.processes = min(MAX_PROCESSES, auto_processes(clients, len(args.targets)))
    targets = unique_labels([check_target(spec, args, workload) for spec in args.targets])
    with_network_faults(targets, workload, getattr(args, "network_faults", False))
    check_backlog_room(workload, targets)
    check_memory_room(workload, targets, args.min_free_memory)
    cluster = connect_cluster(args, targets)
    run_args = dict(workload=workload, targets=targets, out_dir=args.out,
                    record_raw=args.record_raw_samples, audit=args.audit,
                    processes=args.processes, argv=["streambench", *argv],
                    min_free_memory=args.min_free_memory)
    run = Run(**run_args, cluster=cluster,
              recorder=with_interval_logs(ParquetSink) if args.hdr_log else ParquetSink)
    if args.baseline and args.headless:
        raise StreambenchError("--baseline draws in the dashboard: not with --headless")
    drawn = baselines(args.baseline, run.labels)
    if getattr(args, "metrics", None):
        from loadgen.exporter import serve

        sys.stderr.write(f"streambench: metrics at {serve(run, *args.metrics).url}\n")
    return run, drawn


def baselines(spec: str | None, labels: list[str]) -> dict[str, Baseline] | None:
    """--baseline RUN_DIR[:TARGET]: the recorded series drawn under the charts."""
    if not spec:
        return None
    from tui.bench.recording import load_baselines

    return load_baselines(spec, labels)


def describe_workload(w: Workload) -> str:
    """A workload in one line: topics, partitions, size, rate, clients, durations."""
    rate = (f"{w.rate:,.0f} msg/s" if w.rate else
            "rate search" if w.rate_search else "as fast as acknowledged")
    return (f"{w.topics} topic × {w.partitions} partitions, {w.message_size} B, {rate}, "
            f"{w.producers} producer(s), {w.subscriptions} × {w.consumers} consumer(s), "
            f"{w.warmup_s:.0f} s warm-up + {w.duration_s:.0f} s")
