"""The `streambench` command line: run, report, platforms, workloads.

Every error a user can cause ends here as one line on stderr and exit code 2. Textual is only
imported when the live dashboard is wanted, so `--headless` runs without it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from loadgen.core.errors import StreambenchError, WorkloadError
from loadgen.core.fdwatch import watch_readable
from tui.doctor import REPORT_INSTALL, REPORT_MODULES, doctor, missing_report_modules, quick_shadows
from tui.endsummary import EndSummary, render

if TYPE_CHECKING:
    from analysis.warmup import WarmUp

EXIT_USAGE = 2
EXIT_INTERNAL = 1
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
EXIT_BROKER_FAILED = 3  # a broker died during the run without a fault asking for it
EXIT_LOW_MEMORY = 4  # the run stopped itself: the machine's available memory fell under the floor
MAX_PROCESSES = 64
HANGUP_GRACE_S = 5.0  # after a hang-up and the run's end, how long the dashboard may take to exit
EXIT_USER_STOP = SIGNAL_EXIT[signal.SIGINT]  # a run the user ended early, e.g. `q` in the dashboard

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


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"streambench: error: {message} (see {self.prog} --help)\n")
        raise SystemExit(EXIT_USAGE)


def _number(kind: type[int] | type[float], minimum: float, exclusive: bool) -> Callable[[str], Any]:
    """An argparse type: a finite int or float of at least (or above) `minimum`."""
    noun = "a whole number" if kind is int else "a number"
    bound = f"greater than {minimum:g}" if exclusive else f"{minimum:g} or more"

    def parse(text: str) -> Any:
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
_non_negative_float = _number(float, 0, exclusive=False)
_positive_int = _number(int, 1, exclusive=False)


REPLAY_SPEEDS = (1.0, 10.0, 60.0)


def _replay_speed(text: str) -> float:
    """An argparse type: one of the replay's speeds, as the keys 1, 2, 3 choose them."""
    try:
        value = float(text.removesuffix("x"))
    except ValueError:
        value = math.nan
    if value not in REPLAY_SPEEDS:
        raise argparse.ArgumentTypeError(
            f"expected 1, 10 or 60 (times real time), got {text!r}")
    return value


def _memory_floor(text: str) -> int:
    from loadgen.memguard import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None


def _processes(text: str) -> int | str:
    return "auto" if text.strip().lower() == "auto" else _positive_int(text)
_non_negative_int = _number(int, 0, exclusive=False)


def build_parser(parser_class: type[argparse.ArgumentParser] = OneLineParser) -> argparse.ArgumentParser:
    """The command line; `parser_class` decides what a usage error does (the launcher's raises
    it, to show the same message beside the field)."""
    parser = parser_class(prog="streambench", description=MAIN_HELP,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
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
    run.add_argument("--size", type=_positive_int, metavar="BYTES", help="message payload size")
    run.add_argument("--duration", type=_positive_float, metavar="S",
                     help="measuring phase in seconds (after the warm-up)")
    run.add_argument("--warmup", type=_non_negative_float, metavar="S", help="warm-up in seconds")
    run.add_argument("--pacing-window", type=_non_negative_float, metavar="MS",
                     help="a producer's paced slots due within MS after its next one go out with "
                          "it, as one batch when the last is due (default 0.8: fewer wake-ups "
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
    run.add_argument("--at", action="append", default=[], metavar="TIME:ACTION=VALUE",
                     help="an intervention at a time of the measuring phase (repeatable): "
                          "30s:rate=5000, 45s:rate=max@redis, 60s:kill=kafka-2, 90s:start=kafka-2, "
                          "16s:pause=redis, 18s:resume=redis, 120s:consumers=stop, "
                          "150s:producers=start")
    run.add_argument("--headless", action="store_true",
                     help="no dashboard: one status line per target per second")
    run.add_argument("--out", type=Path, metavar="DIR",
                     help="run directory (default runs/<UTC time>-<workload>)")
    run.add_argument("--report", action="store_true", help="write the report when the run ends")
    run.add_argument("--baseline", metavar="RUN_DIR[:TARGET]",
                     help="a recorded run drawn under each chart as a ghost series, with the "
                          "difference in %% (default target: the same label, or its only one)")
    run.add_argument("--record-raw-samples", action="store_true",
                     help="also keep every latency sample (large; for verifying the report)")
    run.add_argument("--driver", metavar="FILE",
                     help="an OpenMessaging Benchmark driver file (producerConfig, consumerConfig, "
                          "topicConfig, commonConfig, replicationFactor; Pulsar's client/producer/"
                          "consumer; Redis's and RabbitMQ's connection fields are named, not "
                          "acted on) for every target: the target option driver=FILE")
    run.add_argument("--track-delivery", action="store_true",
                     help="check that every message is consumed exactly once (uses memory)")
    run.add_argument("--runtime", choices=("docker", "local"),
                     help="where targets without runtime= run (default: docker when a Docker "
                          "engine answers, else local)")
    run.add_argument("--cpus", type=_positive_float, metavar="N",
                     help="docker: CPU limit of each broker container (target option cpus=)")
    run.add_argument("--memory", metavar="SIZE",
                     help="docker: memory limit of each broker container, e.g. 2.67g "
                          "(target option memory=)")
    run.add_argument("--min-free-memory", metavar="SIZE", type=_memory_floor,
                     help="stop the run (load ended, consumers drained, files complete, exit 4) "
                          "when the machine's available memory falls under SIZE, e.g. 2g; "
                          "default 5%% of the machine's memory (at least 256m); 0: never")
    run.add_argument("--resources", choices=("docker", "cadvisor", "process"),
                     help="source of CPU and memory figures (default: docker stats for "
                          "containers, the process tree for local brokers)")
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
    rep.add_argument("--master", metavar="URL",
                     help="Spark master (default local[*]; spark-submit's when run under it)")

    stacks = sub.add_parser("stacks", help="containers streambench started: ls, prune")
    stacks_sub = stacks.add_subparsers(dest="stacks_command", metavar="ACTION",
                                       parser_class=OneLineParser)
    stacks_sub.add_parser("ls", help="list what streambench started in Docker that is still there")
    prune = stacks_sub.add_parser("prune", help="remove leftovers of runs that crashed or were killed")
    prune.add_argument("--all", action="store_true",
                       help="remove every streambench container, volume and network, also of "
                            "runs still going and volumes kept with --keep")

    replay = sub.add_parser("replay", help="show a recorded run again in the dashboard",
                            description=REPLAY_HELP,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    replay.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory")
    replay.add_argument("--speed", type=_replay_speed, default=1.0,
                        metavar="1|10|60", help="playback speed (keys 1, 2, 3 change it)")
    replay.add_argument("--paused", action="store_true", help="start paused at the beginning")
    replay.add_argument("--baseline", metavar="RUN_DIR[:TARGET]",
                        help="another recorded run drawn under each chart as a ghost series")

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
    suite.add_argument("--headless", action="store_true",
                       help="no dashboard: one line per cell (also when not in a terminal)")
    sub.add_parser("suites", help="list the bundled suites")
    sub.add_parser("platforms", help="list platforms and their TARGET options")
    sub.add_parser("workloads", help="list the bundled workloads")
    sub.add_parser("doctor", help="check the installation: packages shadowed by other "
                                  "distributions, the tools brokers and reports need")
    return parser


def _warn(message: str) -> None:
    sys.stderr.write(f"streambench: warning: {message}\n")


def _workload_from(args: argparse.Namespace) -> Any:
    from loadgen.core.interventions import parse_at
    from loadgen.core.workload import Workload, load_workload

    base = load_workload(args.workload) if args.workload else Workload(warmup_s=10.0)
    for w in base.warnings:
        _warn(w)
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


def _with_driver(specs: Sequence[str], driver: str | None) -> list[str]:
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


def _check_backlog_room(workload: Any, targets: Sequence[Any]) -> None:
    """A backlog phase (consumerBacklogSizeGB) must fit where the brokers streambench starts keep
    it: Redis in memory, the others on the disk of the temporary folder (their data folders)."""
    if not workload.backlog_bytes:
        return
    import shutil
    import tempfile

    import psutil

    need = workload.backlog_bytes * workload.topics
    started = [t for t in targets if t.runtime != "external"]
    if any(t.platform.startswith("redis") for t in started):
        free = psutil.virtual_memory().available
        if need > free:
            raise WorkloadError(f"consumerBacklogSizeGB: the backlog ({need / 2**30:.1f} GiB) does "
                                f"not fit in the {free / 2**30:.1f} GiB of free memory Redis keeps "
                                "its streams in")
    if any(not t.platform.startswith("redis") for t in started):
        folder = tempfile.gettempdir()
        free = shutil.disk_usage(folder).free
        if need > free:
            raise WorkloadError(f"consumerBacklogSizeGB: the backlog ({need / 2**30:.1f} GiB) does "
                                f"not fit in the {free / 2**30:.1f} GiB free on the disk of {folder}, "
                                "where the brokers keep their data")


# bytes of a Redis server's used_memory per stream entry beyond its payload (measured with
# 1 KiB payloads: 1.2 kB per entry): the entry's id, its field names and timestamp, the tree
REDIS_ENTRY_OVERHEAD = 180


def _check_memory_room(workload: Any, targets: Sequence[Any], floor: int | None) -> None:
    """A warning before the start when the Redis servers streambench starts on this machine
    will not hold the run's messages (streams without maxlen= keep them all): the memory guard
    would stop the run part-way."""
    import psutil

    from compose.docker import memory_bytes
    from loadgen.memguard import default_floor, size_text

    redis = [t for t in targets if t.platform.startswith("redis") and t.runtime != "external"
             and not int(t.options.get("maxlen") or 0)]
    if not redis or workload.rate <= 0:
        return
    seconds = workload.warmup_s + workload.duration_s
    # the rate is the target's, over all its topics and producers
    need = len(redis) * workload.rate * seconds * (workload.message_size + REDIS_ENTRY_OVERHEAD)
    available = psutil.virtual_memory().available
    floor = default_floor() if floor is None else floor
    each = need / len(redis)
    for t in redis:
        limit = t.options.get("memory") if t.runtime == "docker" else None
        if limit and each > memory_bytes(str(limit)):
            _warn(f"target {t.label or t.spec}: its Redis stream will take about "
                  f"{size_text(each)} of memory ({workload.rate:,.0f} msg/s for {seconds:g} s), "
                  f"more than its container's limit (memory={limit}): the kernel will kill "
                  "redis-server part-way and the run will report the broker as died; the target "
                  "option maxlen= trims the stream")
    if need > available - floor:
        _warn(f"the run's Redis streams will take about {size_text(need)} of memory "
              f"({workload.rate:,.0f} msg/s for {seconds:g} s, about "
              f"{workload.message_size + REDIS_ENTRY_OVERHEAD:,} B per message), and the machine "
              f"has {size_text(available)} available: the run will stop itself when it falls "
              f"under {size_text(floor)} (--min-free-memory); the target option maxlen= trims "
              "the streams")


def _report(run_dirs: Sequence[Path | str], out: Path | None, master: str | None,
            baseline: str | None = None, formats: str | None = None,
            progress: Callable[[str], None] | None = None) -> Path:
    _require_report_extra()
    try:
        from analysis.report import build_report
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] in REPORT_MODULES:
            raise StreambenchError(_report_extra_message([exc.name or ""])) from None
        raise

    def to_stderr(message: str) -> None:
        sys.stderr.write(f"report: {message}\n")
        sys.stderr.flush()

    progress = progress or to_stderr
    return build_report(run_dirs, out_dir=out, master=master, progress=progress,
                        baseline=baseline, formats=formats)


def _start_spark(log: Path, warm: WarmUp | None = None) -> None:
    """Start the report's Spark session ahead of time, and warm it up with a tiny report
    unless `warm` is stopped first (the run's measuring phase began); a failure here is
    reported by the report itself when it tries again."""
    with contextlib.suppress(Exception):
        from analysis.session import spark_session

        spark, _ = spark_session(None, log)
        if warm is not None:
            warm.run(spark)


def _stop_spark_session() -> None:
    with contextlib.suppress(Exception):
        from analysis.session import stop_active

        stop_active()


def _stop_spark(log: Path) -> None:
    _stop_spark_session()
    with contextlib.suppress(OSError):
        log.unlink()


def _report_extra_message(missing: Sequence[str]) -> str:
    names = ", ".join(dict.fromkeys(name.partition(".")[0] for name in missing))
    return f"reports need the report extra ({names} not installed): {REPORT_INSTALL}"


def _require_report_extra() -> None:
    """A StreambenchError naming the install command when PySpark or matplotlib is missing
    (before a run with --report starts, not after it)."""
    missing = missing_report_modules()
    if missing:
        raise StreambenchError(_report_extra_message(missing))


def _install_signals(loop: asyncio.AbstractEventLoop, on_signal: Callable[[int], None]) -> None:
    for sig in SIGNAL_EXIT:
        loop.add_signal_handler(sig, on_signal, sig)


_detached: list[int] = []  # the write end of the pipe that stands in for a lost terminal
_stdin_readers: list[Callable[[], None]] = []  # what stops the headless command reader


def _exit_after_hangup(run: Any) -> None:
    """After a hang-up the terminal library may wait forever on a terminal that is gone: once
    the run has closed its files and brought its brokers down, exit 129 if the dashboard has
    not ended by itself within a few seconds."""
    run.finished.wait()
    time.sleep(HANGUP_GRACE_S)
    os._exit(SIGNAL_EXIT[signal.SIGHUP])


def _detach_terminal() -> None:
    """The terminal is gone (SIGHUP): writes to it would fail and reads see end-of-file at once.
    Point standard output and error at /dev/null and standard input at a pipe nobody writes to,
    so the run can finish and write its files unattended."""
    if _detached:
        return
    for stop_reading in _stdin_readers:
        stop_reading()  # before fd 0 becomes the pipe (a read there would block)
    read_end, write_end = os.pipe()
    _detached.append(write_end)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(read_end, 0)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(read_end)
    os.close(devnull)


async def _headless(run: Any) -> tuple[Any, int | None]:
    from loadgen.core.events import PhaseChange, RunEvent
    from loadgen.core.ticks import Tick
    from loadgen.status import status_line

    received: list[int] = []

    def on_signal(sig: int) -> None:
        received.append(sig)
        if sig == signal.SIGHUP:
            _detach_terminal()
        sys.stderr.write("\nstopping: finishing the run and draining (signal again to skip the drain)\n"
                         if len(received) == 1 else "\nskipping the drain\n")
        run.request_stop()

    def show(item: Any) -> None:
        if isinstance(item, Tick):
            sys.stdout.write(status_line(item) + "\n")
            sys.stdout.flush()
        elif isinstance(item, PhaseChange) and item.message:
            sys.stderr.write(f"[{item.phase.value}] {item.message}\n")
        elif isinstance(item, RunEvent):
            sys.stderr.write(f"[event] {item.target} {item.kind}: {item.detail}\n")

    run.subscribe(show)
    _install_signals(asyncio.get_running_loop(), on_signal)
    commands = _read_commands(run)
    try:
        summary = await run.execute()
    finally:
        commands()
    return summary, (received[0] if received else None)


def _read_commands(run: Any) -> Callable[[], None]:
    """Headless runs take interventions on standard input, one per line, written as the
    ACTION=VALUE[@TARGET] part of --at (rate=5000, consumers=stop@redis, kill=kafka-2).
    Only from a terminal or a pipe; returns the function that stops reading."""
    import stat as stat_mod

    from loadgen.core.interventions import parse_action

    loop = asyncio.get_running_loop()
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return lambda: None
    if not (os.isatty(0) or stat_mod.S_ISFIFO(mode) or stat_mod.S_ISSOCK(mode)):
        return lambda: None
    pending = b""
    tasks: set[asyncio.Task[None]] = set()

    async def carry_out(text: str) -> None:
        try:
            await run.intervene(parse_action(text, "command"))
        except StreambenchError as exc:
            sys.stderr.write(f"[command] {exc}\n")

    def on_input() -> None:
        nonlocal pending
        try:
            chunk = os.read(0, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            loop.remove_reader(0)
            return
        *lines, pending = (pending + chunk).split(b"\n")
        for raw in lines:
            text = raw.decode("utf-8", "replace").strip()
            if text:
                task = loop.create_task(carry_out(text))
                tasks.add(task)
                task.add_done_callback(tasks.discard)

    try:
        watch_readable(loop, 0, on_input)
    except (OSError, ValueError, PermissionError):
        return lambda: None

    def stop() -> None:
        with contextlib.suppress(Exception):
            loop.remove_reader(0)

    _stdin_readers.append(stop)
    return stop


def _print_summary(summary: Any, end: EndSummary) -> None:
    table = render(summary, end)
    if table:
        print(table)
    if summary.stopped_early:
        sys.stderr.write(f"stopped early: {summary.measured_ticks} s measured\n")
    if summary.stopped_for:
        sys.stderr.write(f"stopped by streambench: {summary.stopped_for}\n")
    for failure in summary.broker_failures:
        sys.stderr.write(f"broker failed during the run: {failure}\n")
    for t in summary.targets:
        lost = t.expected - t.consumed if t.expected else 0
        parts = [f"{t.label}: produced {t.produced:,}, consumed {t.consumed:,}"]
        if t.send_errors:
            parts.append(f"send errors {t.send_errors:,}")
        if t.consumers_failed:
            parts.append(f"consumers failed {t.consumers_failed:,} (see the consumer-failed event)")
        if t.duplicates:
            parts.append(f"duplicates {t.duplicates:,}")
        if t.lost:
            parts.append(f"LOST {t.lost:,} (acknowledged, never delivered: the broker has "
                         "nothing more to read; see the messages-lost event)")
        if not t.drained:
            parts.append(f"NOT drained (unconsumed {max(lost, 0):,}, lag {t.final_lag})")
        sys.stderr.write(", ".join(parts) + "\n")
    print(f"run files: {summary.run_dir}")


def check_target(spec: str, args: argparse.Namespace, workload: Any = None) -> Any:
    """One TARGET of `streambench run` as the run takes it (its runtime, --driver, --cpus,
    --memory, --resources, --keep); raises the error the command line prints."""
    from loadgen.platforms import resolve_target
    from loadgen.platforms.runtime import with_run_settings

    cpus = args.cpus if args.cpus is not None or workload is None else workload.broker_cpus
    memory = args.memory if args.memory is not None or workload is None else workload.broker_memory
    (spec,) = _with_driver([spec], args.driver)
    return with_run_settings(resolve_target(spec, args.runtime), cpus, memory, args.resources,
                             args.keep)


def build_run(args: argparse.Namespace, argv: Sequence[str]) -> tuple[Any, Any]:
    """The Run `streambench run` would start for these arguments (nothing started yet), and
    the baselines its dashboard draws; raises the error the command line prints."""
    from analysis.sink import ParquetSink
    from loadgen.core.target import unique_labels
    from loadgen.placement import auto_processes
    from loadgen.run import Run

    if args.processes != "auto" and args.processes > MAX_PROCESSES:
        raise WorkloadError(f"--processes {args.processes}: at most {MAX_PROCESSES} load processes "
                            "per target")
    workload = _workload_from(args)
    if args.processes == "auto":
        clients = workload.topics * (workload.producers + workload.subscriptions * workload.consumers)
        args.processes = min(MAX_PROCESSES, auto_processes(clients, len(args.targets)))
    targets = unique_labels([check_target(spec, args, workload) for spec in args.targets])
    _check_backlog_room(workload, targets)
    _check_memory_room(workload, targets, args.min_free_memory)
    run_args = dict(workload=workload, targets=targets, out_dir=args.out,
                    record_raw=args.record_raw_samples, track_ids=args.track_delivery,
                    processes=args.processes, argv=["streambench", *argv],
                    min_free_memory=args.min_free_memory)
    run = Run(**run_args, recorder=ParquetSink)
    if args.baseline and args.headless:
        raise StreambenchError("--baseline draws in the dashboard: not with --headless")
    return run, _baselines(args.baseline, run.labels)


def _terminal() -> bool:
    return sys.stdout.isatty() and sys.stdin.isatty()


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from loadgen.pacing import run_precise

    run, baselines = build_run(args, argv)
    if not args.headless and not _terminal():
        raise StreambenchError("the dashboard needs a terminal; use --headless for scripts and CI")
    run.prepare()
    end = EndSummary(run.labels)
    run.subscribe(end)

    if args.headless:
        summary, sig = run_precise(_headless(run))
        _print_summary(summary, end)
        if args.report and summary.measured_ticks:
            print(f"report: {_report([summary.run_dir], None, None)}")
        if sig:
            return SIGNAL_EXIT[signal.Signals(sig)]
        if summary.stopped_for:
            return EXIT_LOW_MEMORY
        return EXIT_BROKER_FAILED if summary.broker_failures else 0

    from tui.app import DashboardApp, ReportProgress

    # With --report, Spark starts in the background while the run goes on (in the one thread
    # the report will run in, where the session stays active), so that the report is ready
    # seconds after the run ends instead of waiting for a JVM then.
    reporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report") if args.report else None
    if reporter is not None:
        from analysis.warmup import WarmUp

        warm = WarmUp(run.workload.warmup_s)
        run.subscribe(warm.follow)  # the warm-up never overlaps the measuring phase
        reporter.submit(_start_spark, run.run_dir / ".spark-start.log", warm)

    async def after_run(summary: Any) -> str | None:
        if reporter is None or not summary.measured_ticks:
            return None
        def progress(message: str) -> None:  # in the report's thread: shown by the dashboard
            with contextlib.suppress(RuntimeError):  # the app's loop has closed
                app.post_message(ReportProgress(message))

        return str(await asyncio.wrap_future(
            reporter.submit(_report, [summary.run_dir], None, None, None, None, progress)))

    app = DashboardApp(run, run.labels, run.workload, after_run=after_run, baselines=baselines)
    terminated: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        terminated.append(sig)
        if sig == signal.SIGHUP:
            _detach_terminal()  # the dashboard goes on drawing into /dev/null until the end
            threading.Thread(target=_exit_after_hangup, args=(run,), daemon=True).start()
        run.request_stop()

    # Ctrl-C reaches the dashboard as a key in raw mode; SIGINT from elsewhere stops like it
    for sig in SIGNAL_EXIT:
        signal.signal(sig, on_signal)
    try:
        result = app.run()
    finally:
        if reporter is not None:
            reporter.submit(_stop_spark, run.run_dir / ".spark-start.log")
            reporter.shutdown(wait=True)
    if isinstance(result, BaseException):
        raise result
    if result is None:
        raise StreambenchError("the dashboard ended before the run finished")
    _print_summary(result, end)
    report_path = getattr(app, "report_path", None)
    if report_path:
        print(f"report: {report_path}")
    if terminated:
        return SIGNAL_EXIT[signal.Signals(terminated[0])]
    if result.stopped_for:
        return EXIT_LOW_MEMORY
    if result.stopped_early:
        return EXIT_USER_STOP
    return EXIT_BROKER_FAILED if result.broker_failures else 0


def _cmd_session(args: argparse.Namespace) -> int:
    """The launcher, then the runs started from it in the same dashboard; every run's summary
    table and command line are left in the terminal at the end."""
    from tui.launcher import LaunchSettings
    from tui.session import SessionApp

    if args.out is not None:
        raise StreambenchError("--out names the directory of one run: the launcher's runs go to "
                               "runs/<time>-<workload>; leave --out out, or give the targets")
    settings = LaunchSettings.from_args(args)

    def reporter(run_dirs: Sequence[Path], progress: Callable[[str], None]) -> Path:
        return _report(run_dirs, None, None, progress=progress)

    app = SessionApp(settings, reporter=reporter, warm_reports=_start_spark)
    terminated: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        terminated.append(sig)
        if sig == signal.SIGHUP:
            _detach_terminal()  # the dashboard goes on drawing into /dev/null until the end
            app.hung_up = True
            if app.running and app.bench is not None:
                threading.Thread(target=_exit_after_hangup, args=(app.bench,), daemon=True).start()
        app.interrupt()

    for sig in SIGNAL_EXIT:
        signal.signal(sig, on_signal)
    try:
        app.run()
    finally:
        app.close_reports(_stop_spark_session)
    for record in app.runs:
        print(f"run {record.number}: {record.settings.command_line()}")
        if record.summary is not None:
            _print_summary(record.summary, record.end)
            if record.report_path:
                print(f"report: {record.report_path}")
        else:
            print(f"failed: {record.error}")
    for path in app.reports_written():
        print(f"report: {path}")
    line = app.launcher_line()
    if line:
        print(f"launcher: {line}" if app.runs else line)
    if terminated:
        return SIGNAL_EXIT[signal.Signals(terminated[0])]
    failed = any(r.summary is not None and r.summary.broker_failures for r in app.runs)
    return EXIT_BROKER_FAILED if failed else 0


def _cmd_suite(args: argparse.Namespace) -> int:
    """A suite: in a terminal its dashboard, else (or with --headless) one line per cell. The
    same loop runs the cells either way; a signal stops it after the running cell."""
    from tui.suite import prepare_suite, print_event, run_suite

    if args.headless or not _terminal():
        return run_suite(args.suite, list(args.targets), args.out, args.scale, args.resume,
                         not args.no_report)
    suite = prepare_suite(args.suite, list(args.targets), args.out, args.scale, args.resume)
    from tui.suiteview import SuiteApp

    app = SuiteApp(suite, report=not args.no_report)

    def on_signal(sig: int, _frame: object) -> None:
        if sig == signal.SIGHUP:
            _detach_terminal()  # the dashboard goes on drawing into /dev/null until the end
            threading.Thread(target=_exit_after_hangup, args=(suite,), daemon=True).start()
        app.interrupt(sig)

    for sig in SIGNAL_EXIT:
        signal.signal(sig, on_signal)
    try:
        code = app.run()
    finally:
        app.wait_cells()
    for event in (suite.ended, suite.report_written):  # the end, as headless prints it
        if event is not None:
            print_event(event)
    if app.error is not None:
        raise app.error
    return suite.exit_code if code is None else code


def _baselines(spec: str | None, labels: list[str]) -> Any:
    if not spec:
        return None
    from tui.recording import load_baselines

    return load_baselines(spec, labels)


def _cmd_replay(args: argparse.Namespace) -> int:
    from tui.recording import load_recording

    recording = load_recording(args.run_dir)
    baselines = _baselines(args.baseline, recording.labels)
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        raise StreambenchError("the dashboard needs a terminal")
    from tui.replay import ReplayApp

    ReplayApp(recording, speed=args.speed, playing=not args.paused, baselines=baselines).run()
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    started = time.monotonic()
    path = _report(list(args.runs), args.out, args.master, args.baseline, args.format)
    sys.stderr.write(f"report written in {time.monotonic() - started:.1f} s\n")
    print(path)
    return 0


def _cmd_stacks(args: argparse.Namespace) -> int:
    from compose.housekeeping import list_stacks, prune_stacks

    if args.stacks_command == "prune":
        removed, skipped = prune_stacks(everything=args.all)
        for line in removed:
            print(f"removed {line}")
        for line in skipped:
            print(f"kept {line}")
        if not removed:
            print("nothing to prune")
        return 0
    lines = list_stacks()
    print("\n".join(lines) if lines else "no streambench containers, volumes or networks")
    return 0


def _cmd_platforms() -> int:
    from loadgen.platforms import LOAD_WARNINGS, PLATFORMS

    PLATFORMS.load_all()  # every plugin tried: its warnings known
    for warning in LOAD_WARNINGS:
        sys.stderr.write(f"warning: {warning}\n")
    for p in PLATFORMS.values():
        print(f"{p.name}: {p.summary}")
        print(f"  from: {p.origin}")
        print(f"  runtimes: {', '.join(p.runtimes)} (external: {p.name}@{p.address_example})")
        faults = [f"{r}: {', '.join(p.fault_actions(r))}" for r in p.runtimes if p.fault_actions(r)]
        if faults:
            print(f"  faults: {'; '.join(faults)}")
        for name, opt in p.options.items():
            values = f" [{'|'.join(opt.choices)}]" if opt.choices else ""
            default = "" if opt.default is None else f" (default {opt.default!r})"
            print(f"  {name}{values}: {opt.help}{default}")
    return 0


def _cmd_workloads() -> int:
    from loadgen.core.workload import bundled_workloads, load_workload

    for name in bundled_workloads():
        print(f"{name}: {describe_workload(load_workload(name))}")
    return 0


def describe_workload(w: Any) -> str:
    """A workload in one line: topics, partitions, size, rate, clients, durations."""
    rate = (f"{w.rate:,.0f} msg/s" if w.rate else
            "rate search" if w.rate_search else "as fast as acknowledged")
    return (f"{w.topics} topic × {w.partitions} partitions, {w.message_size} B, {rate}, "
            f"{w.producers} producer(s), {w.subscriptions} × {w.consumers} consumer(s), "
            f"{w.warmup_s:.0f} s warm-up + {w.duration_s:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None and _terminal():
        args = parser.parse_args(["run"])  # `streambench` alone: the launcher
    if args.command != "doctor":
        for line in quick_shadows():
            _warn(f"{line} (see streambench doctor)")
    try:
        if args.command == "doctor":
            return doctor()
        if args.command == "report" or (args.command == "run" and args.report):
            _require_report_extra()
        if args.command == "run" and not args.targets:
            if args.headless or not _terminal():
                raise StreambenchError("run: no TARGET given (see streambench run --help); "
                                       "without targets it opens the launcher, which needs a "
                                       "terminal and no --headless")
            return _cmd_session(args)
        if args.command == "run":
            return _cmd_run(args, argv)
        if args.command == "report":
            return _cmd_report(args)
        if args.command == "replay":
            return _cmd_replay(args)
        if args.command == "stacks":
            return _cmd_stacks(args)
        if args.command == "suite":
            if not args.no_report:
                _require_report_extra()
            return _cmd_suite(args)
        if args.command == "suites":
            from tui.suite import bundled_suites, load_suite

            for name in bundled_suites():
                s = load_suite(name)
                print(f"{name}: {s.description}\n  targets: {', '.join(s.targets)}\n"
                      f"  workloads: {', '.join(label for label, _ in s.workloads)}")
            return 0
        if args.command == "platforms":
            return _cmd_platforms()
        if args.command == "workloads":
            return _cmd_workloads()
        parser.print_help()
        return EXIT_USAGE
    except StreambenchError as exc:
        sys.stderr.write(f"streambench: error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        sys.stderr.write("streambench: interrupted\n")
        return SIGNAL_EXIT[signal.SIGINT]
    except BrokenPipeError:
        # the reader of our output went away (`streambench platforms | head`): stop quietly, as
        # the shell's own tools do, and keep the interpreter from complaining at exit
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        if os.environ.get("STREAMBENCH_DEBUG"):
            raise
        sys.stderr.write(f"streambench: internal error: {type(exc).__name__}: {exc} "
                         "(set STREAMBENCH_DEBUG=1 for the traceback)\n")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
