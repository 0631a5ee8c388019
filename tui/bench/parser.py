"""The `streambench` command line as argparse reads it: every command, flag and value type.

A usage error is one line naming the subcommand's help and exit code 2; a misspelled flag or
command gets the nearest one ("did you mean --rate?"). Values with units (`30s`, `1k`) are read
by tui.bench.units, the same way for every option."""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

from tui.bench import exits, units

MAX_PROCESSES = 64
REPLAY_SPEEDS = (1.0, 10.0, 60.0)
SHELLS = ("bash", "zsh")
N = TypeVar("N", int, float)

MAIN_HELP = """\
Live benchmark bench for streaming platforms. Starts the brokers, drives them with paced
producers and consumers, shows throughput, lag, latency, CPU and memory live, writes the run
as Parquet files, and turns runs into reports with PySpark.

examples:
  streambench                                       the launcher: pick targets and settings
  streambench run redis                             one local redis-server, 1,000 msg/s, 60 s
  streambench run redis redis:aof --rate 5000 --size 1024 --partitions 2 --consumers 2
  streambench run redis@127.0.0.1:6379 --headless   an existing server, status lines only
  streambench run redis --workload redis-latency-1kb --report
  streambench report runs/20261121T101500Z-adhoc
"""

RUN_HELP = """\
TARGET is PLATFORM[:OPTION[=VALUE],...][@ADDRESS]:
  redis                  a redis-server started for the run on a free loopback port
  redis:aof              the same with the append-only file, fsync every second
  redis:aof,fsync=always per-write fsync
  redis@HOST:PORT        an existing server: nothing is started or stopped
  kafka:runtime=docker,brokers=3,cpus=6,memory=2.67g
                         3 Kafka containers (compose/kafka-3.yml), 6 CPUs / 2.67 GB each
Targets run as containers where a Docker engine answers, else as local processes
(--runtime or runtime= decides); `streambench stacks ls|prune` lists or removes leftovers.
Several targets run side by side. `streambench platforms` lists every option.

The workload (--workload FILE or a bundled name, see `streambench workloads`) uses
OpenMessaging Benchmark field names; the flags below override it. Without a workload:
1 topic, 1 partition, 1 kB, 1,000 msg/s, 1 producer, 1 consumer, 10 s warm-up, 60 s measuring.

Without a TARGET (in a terminal, not --headless) it opens the launcher: pick targets,
workload and overrides, see the equivalent command line, run, run again, compare the runs.

Keys in the dashboard: q ends the run (drain, write files; q again skips the drain),
p pauses the display, Enter a target's detail, v every target on one chart per metric,
w chart window, y shared/own y scale, x screenshot, ? every key. Ctrl-C and SIGTERM end
the run like q.
"""


REPLAY_HELP = """\
Shows a recorded run in the dashboard from its files (no broker is started): space plays
and pauses, 1/2/3 set 1×/10×/60×, ←/→ or [/] seek 10 s, Home/End, n jumps to the next
event, ? lists every key. Runs killed mid-way and runs of older versions replay too.
"""



COMPLETION_HELP = """\
Prints a completion script for the shell (commands, flags, choices and file names):
  bash:  streambench completion bash > ~/.local/share/bash-completion/completions/streambench
  zsh:   streambench completion zsh > "${fpath[1]}/_streambench"   (then start a new shell)
"""


def version() -> str:
    from importlib import metadata

    try:
        return metadata.version("streambench")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2, pointed at the help of the
    command it is about, with the nearest name for a misspelled flag or command."""

    def error(self, message: str) -> NoReturn:
        m = re.fullmatch(r"argument (\S+): invalid choice: '(.*)' \(choose from (.*)\)", message)
        if m is not None:
            choices = re.findall(r"'([^']*)'", m.group(3))
            message = f"argument {m.group(1)}: invalid choice {m.group(2)!r}" + _nearest(
                m.group(2), choices) + f" (one of {', '.join(choices)})"
        sys.stderr.write(f"streambench: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(exits.USAGE)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self._chosen(parsed)
            flag = next((e for e in extras if e.startswith("-")), None)
            if flag is None:
                parser.error(f"unrecognized argument {extras[0]!r}")
            name = flag.partition("=")[0]
            flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
            parser.error(f"unrecognized argument {name}{_nearest(name, flags)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> argparse.ArgumentParser:
        """The (sub)parser of the command given, the deepest one (`stacks prune`)."""
        parser: argparse.ArgumentParser = self
        for dest in ("command", "stacks_command"):
            sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                       None)
            chosen = getattr(parsed, dest, None)
            if sub is None or chosen not in sub.choices:
                break
            parser = sub.choices[chosen]
        return parser


def _nearest(word: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _number(kind: type[N], minimum: float, exclusive: bool) -> Callable[[str], N]:
    """An argparse type: a finite int or float of at least (or above) `minimum`."""
    noun = "a whole number" if kind is int else "a number"
    bound = f"greater than {minimum:g}" if exclusive else f"{minimum:g} or more"

    def parse(text: str) -> N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text}")
        if value < minimum or (exclusive and value == minimum):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return parse


_positive_float = _number(float, 0, exclusive=True)
_positive_int = _number(int, 1, exclusive=False)
_non_negative_int = _number(int, 0, exclusive=False)


def _node_resource(text: str) -> tuple[str, float]:
    """NAME=N: a Ray resource a node must have N of for each of its load actors' shares."""
    name, eq, amount = text.partition("=")
    if not eq or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=N (a Ray resource), got {text!r}")
    return name.strip(), _positive_float(amount)


def _seconds(text: str) -> float:
    try:
        return units.parse_duration(text, "s")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_seconds(text: str) -> float:
    value = _seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be longer than 0, got {text!r}")
    return value


def _milliseconds(text: str) -> float:
    try:
        return units.parse_duration(text, "ms")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(text: str) -> int:
    try:
        return units.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _message_size(text: str) -> int:
    value = _size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 byte or more, got {text!r}")
    return value


_DOCKER_MEMORY = re.compile(r"\d+(\.\d+)?[bkmg]?", re.IGNORECASE)


def _container_memory(text: str) -> str:
    """A container memory limit: read as every size is, handed on in Docker's own form."""
    value = _size(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 byte or more, got {text!r}")
    return text.strip() if _DOCKER_MEMORY.fullmatch(text.strip()) else f"{value}b"


def toxiproxy_api(text: str) -> str:
    """An argparse type: the URL of the user's own Toxiproxy API (--network-faults=URL)."""
    from compose.toxiproxy import api_address

    try:
        api_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; write it --network-faults=URL, after the "
                                         "targets") from None
    return text


def cadvisor_address(text: str) -> str:
    """An argparse type: HOST:PORT of a running cAdvisor (--cadvisor)."""
    from loadgen.core.target import join_host_port, split_host_port

    try:
        host, port = split_host_port(text, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: {exc}") from None
    if not port:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    return join_host_port(host, port)


def replay_speed(text: str) -> float:
    """An argparse type: one of the replay's speeds, as the keys 1, 2, 3 choose them."""
    try:
        value = float(text.removesuffix("x"))
    except ValueError:
        value = math.nan
    if value not in REPLAY_SPEEDS:
        raise argparse.ArgumentTypeError(
            f"expected 1, 10 or 60 (times real time), got {text!r}")
    return value


def metrics_address(text: str) -> tuple[str, int]:
    """An argparse type: where --metrics serves (PORT on loopback, or ADDRESS:PORT)."""
    from loadgen.core.errors import WorkloadError
    from loadgen.exporter import parse_address

    try:
        return parse_address(text)
    except WorkloadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _port(text: str) -> int:
    from loadgen.core.platform import parse_port

    try:
        return parse_port(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None


def _processes(text: str) -> int | str:
    return "auto" if text.strip().lower() == "auto" else _positive_int(text)


def build_parser(parser_class: type[argparse.ArgumentParser] = OneLineParser) -> argparse.ArgumentParser:
    """The command line; `parser_class` decides what a usage error does (the launcher's raises
    it, to show the same message beside the field)."""
    parser = parser_class(prog="streambench", description=MAIN_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"streambench {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=parser_class)

    run = sub.add_parser("run", help="run a benchmark against one or more targets",
                         description=RUN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("targets", nargs="*", metavar="TARGET",
                     help="what to benchmark (see above); none: the launcher, to pick them")
    run.add_argument("--workload", metavar="FILE|NAME", help="workload YAML file or bundled name")
    run.add_argument("--rate", type=_positive_float, metavar="MSG_S",
                     help="aggregate produce rate in msg/s over all producers")
    run.add_argument("--max-rate", nargs="?", const="fast", choices=("fast", "search"),
                     metavar="fast|search",
                     help="fast (the default): produce as fast as the broker acknowledges; search: "
                          "find the highest sustainable rate, as OMB does for producerRate 0")
    run.add_argument("--size", type=_message_size, metavar="SIZE",
                     help="message payload size, e.g. 1k, 1024 or 64KiB")
    run.add_argument("--duration", type=_positive_seconds, metavar="TIME",
                     help="measuring phase after the warm-up, e.g. 60s, 5m, 1m30s (bare: seconds)")
    run.add_argument("--warmup", type=_seconds, metavar="TIME",
                     help="warm-up, e.g. 10s, 1m, 0 (bare: seconds)")
    run.add_argument("--pacing-window", type=_milliseconds, metavar="TIME",
                     help="a producer's paced slots due within MS after its next one go out with "
                          "it, as one batch when the last is due (default 800us; bare: ms; fewer wake-ups "
                          "and writes from 1,250 msg/s per producer on, each slot's wait counted "
                          "as publish delay); 0: every slot alone, for the lowest latency")
    run.add_argument("--partitions", type=_positive_int, metavar="N", help="partitions per topic")
    run.add_argument("--producers", type=_positive_int, metavar="N", help="producers per topic")
    run.add_argument("--consumers", type=_positive_int, metavar="N",
                     help="consumers per subscription (one consumer group)")
    run.add_argument("--subscriptions", type=_non_negative_int, metavar="N",
                     help="subscriptions (consumer groups) per topic; 0 = produce only")
    run.add_argument("--processes", type=_processes, metavar="N|auto", default="auto",
                     help="load processes per target, its producers and consumers dealt over "
                          "them (a Python process drives about one core); auto (the default): "
                          "one per producer and consumer while the host has cores to spare")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run each target's producers and consumers as Ray actors on a Ray "
                          "cluster's nodes (the cluster extra): ray://HOST:PORT, the head's "
                          "HOST:PORT, or auto (RAY_ADDRESS, else the head started here); the "
                          "brokers, the dashboard and the run files stay here (docs/cluster.md)")
    run.add_argument("--nodes", type=_positive_int, metavar="N",
                     help="--cluster: nodes the load takes, one load actor per node and target "
                          "(default: every node alive)")
    run.add_argument("--placement", choices=("spread", "pack"), metavar="spread|pack",
                     help="--cluster: spread (the default): every actor of a target on another "
                          "node; pack: on as few nodes as have the CPUs")
    run.add_argument("--split-roles", action="store_true",
                     help="--cluster: producers on the first half of the nodes, consumers on "
                          "the others (OMB's default; 2 nodes or more)")
    run.add_argument("--same-node-latency", action="store_true",
                     help="--cluster: time only the messages whose producer ran on the "
                          "consumer's node, on that node's own clock (the swarm topology; "
                          "stamps each message with its producer, as --audit does)")
    run.add_argument("--tick-group", type=_non_negative_int, metavar="N",
                     help="--cluster: a relay actor on every N-th node gathers the ticks of N "
                          "nodes, so that the coordinator makes one call a group and second, not "
                          "one a node; 0: none (default: groups of 8 on more than 8 nodes)")
    run.add_argument("--node-resource", type=_node_resource, action="append", default=[],
                     metavar="NAME=N",
                     help="--cluster: only nodes with N of the Ray resource NAME free take load "
                          "(ray start --resources; repeatable)")
    run.add_argument("--at", action="append", default=[], metavar="TIME:ACTION=VALUE",
                     help="an intervention at a time of the measuring phase (repeatable): "
                          "30s:rate=5000, 45s:rate=max@redis, 60s:kill=kafka-2, 90s:start=kafka-2, "
                          "16s:pause=redis, 18s:resume=redis, 120s:consumers=stop, "
                          "150s:producers=start, 20s:latency=50ms,jitter=10ms@redis, "
                          "25s:bandwidth=1MB/s@redis, 30s:partition@redis, 35s:heal, "
                          "40s:partition@kafka-2:peers, 45s:partition@kafka-leader:clients")
    run.add_argument("--headless", action="store_true",
                     help="no dashboard: one status line per target per second")
    run.add_argument("--out", type=Path, metavar="DIR",
                     help="run directory (default runs/<UTC time>-<workload>)")
    run.add_argument("--metrics", type=metrics_address, metavar="[ADDRESS:]PORT",
                     help="serve the live figures to Prometheus at http://ADDRESS:PORT/metrics "
                          "from before the load to the end of the run (a bare PORT: 127.0.0.1)")
    run.add_argument("--report", action="store_true", help="write the report when the run ends")
    run.add_argument("--baseline", metavar="RUN_DIR[:TARGET]",
                     help="a recorded run drawn under each chart as a ghost series, with the "
                          "difference in %% (default target: the same label, or its only one)")
    run.add_argument("--record-raw-samples", action="store_true",
                     help="also keep every latency sample (large; for verifying the report)")
    run.add_argument("--hdr-log", action="store_true",
                     help="also write each target's latency as an HdrHistogram interval log, "
                          "hdr/TARGET.hlog in the run directory (tags e2e, publish, "
                          "publish-delay; nanoseconds)")
    run.add_argument("--driver", metavar="FILE",
                     help="an OpenMessaging Benchmark driver file (producerConfig, consumerConfig, "
                          "topicConfig, commonConfig, replicationFactor; Pulsar's client/producer/"
                          "consumer; Redis's and RabbitMQ's connection fields are named, not "
                          "acted on) for every target: the target option driver=FILE")
    run.add_argument("--network-faults", nargs="?", const=True, default=False,
                     type=toxiproxy_api, metavar="TOXIPROXY_API",
                     help="clients reach each broker through a Toxiproxy on loopback (on a "
                          "local Kafka cluster its brokers reach each other so too), so that "
                          "latency=, bandwidth=, partition, reset and heal can act on the links "
                          "(implied by a network fault in --at or the schedule); for an existing "
                          "cluster (@ADDRESS, the listen address of one of your proxies): the "
                          "URL of your own Toxiproxy's API, http://HOST:PORT")
    run.add_argument("--audit", "--track-delivery", action="store_true", dest="audit",
                     help="delivery audit: every message carries its producer and a sequence "
                          "number; the run reports, per target and fault window, messages lost "
                          "(acknowledged, never consumed), unexpected (consumed, not "
                          "acknowledged), duplicated, reordered within a partition, and unseen "
                          "by a subscription (--track-delivery is the same)")
    run.add_argument("--runtime", choices=("docker", "local"),
                     help="where targets without runtime= run (default: docker when a Docker "
                          "engine answers, else local)")
    run.add_argument("--cpus", type=_positive_float, metavar="N",
                     help="docker: CPU limit of each broker container (target option cpus=)")
    run.add_argument("--memory", metavar="SIZE", type=_container_memory,
                     help="docker: memory limit of each broker container, e.g. 2.67g "
                          "(target option memory=)")
    run.add_argument("--min-free-memory", metavar="SIZE", type=_size,
                     help="stop the run (load ended, consumers drained, files complete, exit 4) "
                          "when the machine's available memory falls under SIZE, e.g. 2g; "
                          "default 5%% of the machine's memory (at least 256m); 0: never")
    run.add_argument("--resources", choices=("docker", "cadvisor", "process"),
                     help="source of CPU and memory figures (default: docker stats for "
                          "containers, the process tree for local brokers; cadvisor: a cAdvisor "
                          "streambench builds and starts for the run)")
    run.add_argument("--cadvisor", metavar="HOST:PORT", type=cadvisor_address,
                     help="read the containers' figures from the cAdvisor running at HOST:PORT "
                          "(stands for --resources cadvisor; none is started)")
    run.add_argument("--keep", action="store_true",
                     help="docker: keep the brokers' data volumes after the run")

    rep = sub.add_parser("report", help="turn one or more runs into a report (PySpark)")
    rep.add_argument("runs", nargs="+", metavar="RUN_DIR|GLOB",
                     help="run directories, or glob patterns such as 'runs/*' (expanded here)")
    rep.add_argument("--out", type=Path, metavar="DIR",
                     help="report directory (default: report/ inside the run; a new "
                          "report-<time> folder for several runs)")
    rep.add_argument("--baseline", metavar="TARGET",
                     help="target the comparison divides by (default: the first target)")
    rep.add_argument("--format", default="md,html,json", metavar="md,html,json",
                     help="documents to write (default: all three); charts and "
                          "summary.parquet/.csv are always written")
    rep.add_argument("--hdr-log", action="store_true",
                     help="instead of the report, write each run's HdrHistogram interval logs "
                          "from its run files (into its hdr/, or --out DIR); no PySpark needed")
    rep.add_argument("--master", metavar="URL",
                     help="Spark master (default local[*]; spark-submit's when run under it)")

    stacks = sub.add_parser("stacks", help="containers streambench started: ls, prune; the "
                                           "monitoring stack: up, down")
    stacks_sub = stacks.add_subparsers(dest="stacks_command", metavar="ACTION",
                                       parser_class=parser_class)
    stacks_sub.add_parser("ls", help="list what streambench started in Docker that is still there")
    prune = stacks_sub.add_parser("prune", help="remove leftovers of runs that crashed or were killed")
    prune.add_argument("--all", action="store_true",
                       help="remove every streambench container, volume and network, also of "
                            "runs still going, volumes kept with --keep and the monitoring stack")
    stacks_up = stacks_sub.add_parser("up", help="start Prometheus, Grafana (with the streambench "
                                                 "dashboard) and cAdvisor in Docker, on loopback")
    stacks_up.add_argument("stack", choices=["monitoring"], metavar="monitoring",
                           help="the stack to start: monitoring")
    stacks_up.add_argument("--scrape", type=metrics_address, action="append",
                           metavar="[ADDRESS:]PORT",
                           help="a --metrics endpoint Prometheus scrapes every second (again for "
                                "more; default 9464, on loopback)")
    for service, port in (("prometheus", 9090), ("grafana", 3000), ("cadvisor", 18080)):
        stacks_up.add_argument(f"--{service}-port", type=_port, default=port, metavar="N",
                               help=f"the port {service} listens on, on 127.0.0.1 (default {port})")
    stacks_down = stacks_sub.add_parser("down", help="stop the monitoring stack and remove its data")
    stacks_down.add_argument("stack", choices=["monitoring"], metavar="monitoring",
                             help="the stack to stop: monitoring")

    replay = sub.add_parser("replay", help="show a recorded run again in the dashboard",
                            description=REPLAY_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    replay.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory")
    replay.add_argument("--speed", type=replay_speed, default=1.0,
                        metavar="1|10|60", help="playback speed (keys 1, 2, 3 change it)")
    replay.add_argument("--paused", action="store_true", help="start paused at the beginning")
    replay.add_argument("--baseline", metavar="RUN_DIR[:TARGET]",
                        help="another recorded run drawn under each chart as a ghost series")
    replay.add_argument("--metrics", type=metrics_address, metavar="[ADDRESS:]PORT",
                        help="serve the replayed figures to Prometheus as run --metrics does, at "
                             "the replay's clock")

    suite = sub.add_parser("suite", help="run a matrix of targets x workloads back to back")
    suite.add_argument("suite", metavar="NAME|FILE", help="a bundled suite (streambench suites) "
                                                          "or a suite YAML file")
    suite.add_argument("targets", nargs="*", metavar="TARGET",
                       help="targets instead of the suite's own")
    suite.add_argument("--scale", type=_positive_float, default=1.0, metavar="F",
                       help="multiply durations and fixed rates by F (0 < F <= 1) for small "
                            "machines; the suite's record and report say so")
    suite.add_argument("--out", type=Path, metavar="DIR",
                       help="suite directory (default runs/suite-<time>-<name>)")
    suite.add_argument("--resume", type=Path, metavar="DIR",
                       help="go on with a suite that was stopped: cells done are kept, the "
                            "others run (again)")
    suite.add_argument("--no-report", action="store_true",
                       help="skip the comparison report at the end")
    suite.add_argument("--metrics", type=metrics_address, metavar="[ADDRESS:]PORT",
                       help="serve each cell's run to Prometheus as run --metrics does, all at "
                            "this address in turn")
    suite.add_argument("--headless", action="store_true",
                       help="no dashboard: one line per cell (also when not in a terminal)")
    suites = sub.add_parser("suites", help="list the bundled suites and how long each takes")
    suites.add_argument("--json", action="store_true", help="as JSON, one object per suite")
    platforms = sub.add_parser("platforms", help="list the platforms; NAME: its TARGET options")
    platforms.add_argument("name", nargs="?", metavar="NAME", help="one platform's options")
    platforms.add_argument("--json", action="store_true", help="as JSON")
    sub.add_parser("workloads", help="list the bundled workloads")
    sub.add_parser("doctor", help="check the installation and say which platforms can run here "
                                  "(exit 3 when `make demo` cannot, 6 when a package is shadowed)")
    completion = sub.add_parser("completion", help="print a shell completion script",
                                description=COMPLETION_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    completion.add_argument("shell", choices=SHELLS, metavar="|".join(SHELLS))
    return parser
