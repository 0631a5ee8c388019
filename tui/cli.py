"""The `streambench` command: `main` reads the command line and hands each command to its
handler in COMMANDS; each handler is a few lines over the bench (tui.bench): building a run,
the headless loop, the report and its Spark, the listings, the doctor, the exit codes.

Every error a user can cause ends here as one line on stderr and its exit code
(tui.bench.exits). Textual is only imported when a dashboard is wanted, so `--headless` runs
without it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from loadgen.core.errors import StreambenchError
from tui.bench import exits
from tui.bench.doctor import doctor, quick_shadows
from tui.bench.endsummary import EndSummary, print_summary
from tui.bench.parser import build_parser
from tui.bench.reporting import (
    require_report_extra,
    start_spark,
    stop_spark,
    stop_spark_session,
    write_report,
)
from tui.bench.runbuild import baselines, build_run, warn
from tui.bench.terminal import HANGUP, detach_terminal, exit_after_hangup, is_terminal

if TYPE_CHECKING:
    from loadgen.run import RunSummary

Handler = Callable[[argparse.Namespace, Sequence[str]], int]


def _run_exit(summary: RunSummary) -> int:
    """A run that ended by itself: low memory, a broker that died, or done."""
    if summary.stopped_for and summary.stopped_for != HANGUP:
        return exits.LOW_MEMORY
    return exits.PLATFORM if summary.broker_failures else exits.OK


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from loadgen.pacing import run_precise
    from tui.bench.headless import headless

    run, baselines = build_run(args, argv)
    if not args.headless and not is_terminal():
        raise StreambenchError("the dashboard needs a terminal; use --headless for scripts and CI")
    run.prepare()
    end = EndSummary(run.labels)
    run.subscribe(end)

    if args.headless:
        summary, sig = run_precise(headless(run))
        print_summary(summary, end)
        if args.report and summary.measured_ticks:
            print(f"report: {write_report([summary.run_dir], None, None)}")
        if sig:
            return exits.SIGNAL_EXIT[signal.Signals(sig)]
        return _run_exit(summary)

    from tui.app import DashboardApp, ReportProgress

    # With --report, Spark starts in the background as the run's measuring phase ends (in the
    # one thread the report will run in, where the session stays active): its JVM is up while
    # the run drains, writes its files and stops its brokers, and nothing of it runs while the
    # run measures.
    reporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report") if args.report else None
    warm = None
    if reporter is not None:
        from analysis.warmup import WarmUp

        executor = reporter

        def start() -> None:
            executor.submit(start_spark, run.run_dir / ".spark-start.log", warm)

        warm = WarmUp(start)
        run.subscribe(warm.follow)

    async def after_run(summary: RunSummary) -> str | None:
        if reporter is None or not summary.measured_ticks:
            return None
        if warm is not None:
            warm.stop()  # the report is due: what is left of the warm-up is skipped
        def progress(message: str) -> None:  # in the report's thread: shown by the dashboard
            with contextlib.suppress(RuntimeError):  # the app's loop has closed
                app.post_message(ReportProgress(message))

        return str(await asyncio.wrap_future(
            reporter.submit(write_report, [summary.run_dir], None, None, None, None, progress)))

    app = DashboardApp(run, run.labels, run.workload, after_run=after_run, baselines=baselines)
    terminated: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        terminated.append(sig)
        if sig == signal.SIGHUP:
            detach_terminal()  # the dashboard goes on drawing into /dev/null until the end
            run.stop_for(HANGUP)
            threading.Thread(target=exit_after_hangup, args=(run,), daemon=True).start()
        run.request_stop()

    # Ctrl-C reaches the dashboard as a key in raw mode; SIGINT from elsewhere stops like it
    for sig in exits.SIGNAL_EXIT:
        signal.signal(sig, on_signal)
    try:
        result = app.run()
    finally:
        if reporter is not None:
            reporter.submit(stop_spark, run.run_dir / ".spark-start.log")
            reporter.shutdown(wait=True)
    if isinstance(result, BaseException):
        raise result
    if result is None:
        raise StreambenchError("the dashboard ended before the run finished")
    print_summary(result, end)
    report_path = getattr(app, "report_path", None)
    if report_path:
        print(f"report: {report_path}")
    if terminated:
        return exits.SIGNAL_EXIT[signal.Signals(terminated[0])]
    return exits.USER_STOP if result.stopped_early and not result.stopped_for else _run_exit(result)


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
        return write_report(run_dirs, None, None, progress=progress)

    app = SessionApp(settings, reporter=reporter, warm_reports=start_spark)
    terminated: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        terminated.append(sig)
        if sig == signal.SIGHUP:
            detach_terminal()  # the dashboard goes on drawing into /dev/null until the end
            app.hung_up = True
            if app.running and app.bench is not None:
                app.bench.stop_for(HANGUP)
                threading.Thread(target=exit_after_hangup, args=(app.bench,), daemon=True).start()
        app.interrupt()

    for sig in exits.SIGNAL_EXIT:
        signal.signal(sig, on_signal)
    try:
        app.run()
    finally:
        app.close_reports(stop_spark_session)
    for record in app.runs:
        print(f"run {record.number}: {record.settings.command_line()}")
        if record.summary is not None:
            print_summary(record.summary, record.end)
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
        return exits.SIGNAL_EXIT[signal.Signals(terminated[0])]
    failed = any(r.summary is not None and r.summary.broker_failures for r in app.runs)
    return exits.PLATFORM if failed else exits.OK


def _cmd_suite(args: argparse.Namespace) -> int:
    """A suite: in a terminal its dashboard, else (or with --headless) one line per cell. The
    same loop runs the cells either way; a signal stops it after the running cell."""
    from tui.bench.suite import prepare_suite, print_event, run_suite

    cell_options = []
    if args.metrics:
        from loadgen.exporter import check_listen

        cell_options = ["--metrics", check_listen(*args.metrics)]
    if args.headless or not is_terminal():
        return run_suite(args.suite, list(args.targets), args.out, args.scale, args.resume,
                         not args.no_report, cell_options)
    suite = prepare_suite(args.suite, list(args.targets), args.out, args.scale, args.resume)
    suite.cell_options = cell_options
    from tui.suiteview import SuiteApp

    app = SuiteApp(suite, report=not args.no_report)

    def on_signal(sig: int, _frame: object) -> None:
        if sig == signal.SIGHUP:
            detach_terminal()  # the dashboard goes on drawing into /dev/null until the end
            threading.Thread(target=exit_after_hangup, args=(suite,), daemon=True).start()
        app.interrupt(sig)

    for sig in exits.SIGNAL_EXIT:
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


def _cmd_replay(args: argparse.Namespace) -> int:
    from tui.bench.recording import load_recording

    recording = load_recording(args.run_dir)
    shown_under = baselines(args.baseline, recording.labels)
    if not is_terminal():
        raise StreambenchError("the dashboard needs a terminal")
    from loadgen.exporter import replay_endpoint
    from tui.replay import ReplayApp

    endpoint = replay_endpoint(recording.meta, args.metrics) if args.metrics else None
    try:
        ReplayApp(recording, speed=args.speed, playing=not args.paused, baselines=shown_under,
                  metrics=endpoint.collector if endpoint else None).run()
    finally:
        if endpoint is not None:
            endpoint.close()
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    started = time.monotonic()
    path = write_report(list(args.runs), args.out, args.master, args.baseline, args.format)
    sys.stderr.write(f"report written in {time.monotonic() - started:.1f} s\n")
    print(path)
    return 0


def _cmd_stacks(args: argparse.Namespace) -> int:
    from compose.housekeeping import list_stacks, prune_stacks

    if args.stacks_command in ("up", "down"):
        return _cmd_monitoring(args)
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


def _cmd_monitoring(args: argparse.Namespace) -> int:
    from compose import monitoring

    if args.stacks_command == "down":
        removed = asyncio.run(monitoring.down())
        print("\n".join(f"removed {line}" for line in removed) if removed
              else "no monitoring stack is up")
        return exits.OK
    ports = monitoring.MonitoringPorts(args.prometheus_port, args.grafana_port, args.cadvisor_port)
    lines = asyncio.run(monitoring.up(args.scrape or [monitoring.DEFAULT_SCRAPE], ports,
                                      lambda line: print(line, file=sys.stderr, flush=True)))
    print("\n".join(lines))
    return exits.OK


def _cmd_run_or_session(args: argparse.Namespace, argv: Sequence[str]) -> int:
    if args.report:
        require_report_extra()
    if args.targets:
        return _cmd_run(args, argv)
    if args.headless or not is_terminal():
        raise StreambenchError("run: no TARGET given (see streambench run --help); without "
                               "targets it opens the launcher, which needs a terminal and no "
                               "--headless")
    return _cmd_session(args)


def _cmd_platforms(args: argparse.Namespace, _argv: Sequence[str]) -> int:
    from loadgen.platforms import LOAD_WARNINGS, PLATFORMS
    from tui.bench import listing

    PLATFORMS.load_all()  # every plugin tried: its warnings known
    for w in LOAD_WARNINGS:
        sys.stderr.write(f"warning: {w}\n")
    if args.name is not None:
        platform = listing.find_platform(dict(PLATFORMS.items()), args.name)
        print(listing.platforms_json([platform]) if args.json else listing.platform_text(platform))
    else:
        every = list(PLATFORMS.values())
        print(listing.platforms_json(every) if args.json else listing.platforms_table(every))
    return exits.OK


def _cmd_suites(args: argparse.Namespace, _argv: Sequence[str]) -> int:
    from tui.bench import listing
    from tui.bench.suite import bundled_suites, load_suite

    suites = [load_suite(name) for name in bundled_suites()]
    print(listing.suites_json(suites) if args.json else listing.suites_text(suites))
    return exits.OK


def _cmd_workloads(_args: argparse.Namespace, _argv: Sequence[str]) -> int:
    from loadgen.core.workload import bundled_workloads, load_workload
    from tui.bench.runbuild import describe_workload

    for name in bundled_workloads():
        print(f"{name}: {describe_workload(load_workload(name))}")
    return exits.OK


def _cmd_doctor(_args: argparse.Namespace, _argv: Sequence[str]) -> int:
    return doctor()


def _cmd_completion(args: argparse.Namespace, _argv: Sequence[str]) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return exits.OK


def _cmd_suite_checked(args: argparse.Namespace, _argv: Sequence[str]) -> int:
    if not args.no_report:
        require_report_extra()
    return _cmd_suite(args)


def _cmd_report_checked(args: argparse.Namespace, _argv: Sequence[str]) -> int:
    if args.hdr_log:
        from tui.bench.hdrlogs import write_logs

        for path in write_logs([Path(r) for r in args.runs], args.out):
            print(path)
        return exits.OK
    require_report_extra()
    return _cmd_report(args)


COMMANDS: dict[str, Handler] = {
    "run": _cmd_run_or_session,
    "report": _cmd_report_checked,
    "replay": lambda args, _argv: _cmd_replay(args),
    "stacks": lambda args, _argv: _cmd_stacks(args),
    "suite": _cmd_suite_checked,
    "suites": _cmd_suites,
    "platforms": _cmd_platforms,
    "workloads": _cmd_workloads,
    "doctor": _cmd_doctor,
    "completion": _cmd_completion,
}
QUIET_COMMANDS = ("doctor", "completion")  # no start-up warning of shadowed packages


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        if not is_terminal():
            sys.stderr.write("streambench: error: no command given (see streambench --help); "
                             "alone it opens the launcher, which needs a terminal\n")
            return exits.USAGE
        args = parser.parse_args(["run"])  # `streambench` alone: the launcher
    if args.command not in QUIET_COMMANDS:
        for line in quick_shadows():
            warn(f"{line} (see streambench doctor)")
    try:
        return COMMANDS[args.command](args, argv)
    except StreambenchError as exc:
        sys.stderr.write(f"streambench: error: {exc}\n")
        return exits.for_error(exc)
    except KeyboardInterrupt:
        sys.stderr.write("streambench: interrupted\n")
        return exits.SIGNAL_EXIT[signal.SIGINT]
    except BrokenPipeError:
        # the reader of our output went away (`streambench platforms | head`): stop quietly, as
        # the shell's own tools do, and keep the interpreter from complaining at exit
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exits.BROKEN_PIPE
    except Exception as exc:
        if os.environ.get("STREAMBENCH_DEBUG"):
            raise
        sys.stderr.write(f"streambench: internal error: {type(exc).__name__}: {exc} "
                         "(set STREAMBENCH_DEBUG=1 for the traceback)\n")
        return exits.INTERNAL


if __name__ == "__main__":
    sys.exit(main())
