"""The launcher and the session: targets checked beside their field with the command line's own
words, real short runs on a local redis-server started from the launcher, run again, and the
runs of the session side by side."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from textual.command import CommandPalette
from textual.widgets import Input, Static

from analysis.warmup import WarmUp
from loadgen.run import RunSummary
from tests.integration.test_dashboard_exit import PtyRun
from tests.tui.screen import screen_lines, wait_until
from tui.bench.endsummary import rows
from tui.bench.reporting import write_report as build_session_report
from tui.cli import main
from tui.keys import LAUNCHER_KEY_TABLE
from tui.launcher import LauncherScreen, LaunchSettings, PickScreen, Problem, parse_run
from tui.session import EndScreen, ReportScreen, SessionApp

SHORT = LaunchSettings(targets=["redis"], overrides={"rate": "300", "duration": "2"},
                       extra=["--warmup", "0"])


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `streambench ARGV` prints on stderr, and that it exits 2."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    return capsys.readouterr().err


def command_shown(app: SessionApp) -> str:
    return str(app.screen.query_one("#command", Static).render())


def shown_problems(app: SessionApp) -> list[str]:
    return [str(p.render()) for p in app.screen.query(Problem) if p.has_class("-shown")]


async def test_a_bad_target_is_refused_beside_its_field_and_nothing_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")  # the errors read without colour
    settings = LaunchSettings(targets=["redis", "redis:bogus=1"], overrides={"rate": "fast-ish"})
    app = SessionApp(settings)
    assert app.no_color
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: len(shown_problems(app)) == 2, "two errors shown")
        lines = screen_lines(app)
        assert isinstance(app.screen, LauncherScreen) and not app.runs and not app.running
        # each error right under its own field
        bad = next(i for i, line in enumerate(lines) if line.strip() == "redis:bogus=1")
        assert lines[bad + 1].strip().startswith("✗ unknown option 'bogus' for redis")
        assert command_shown(app) == "$ streambench run redis redis:bogus=1 --rate fast-ish"
        app.screen.query_one("#opt-rate").focus()
        await pilot.pause()
        lines = screen_lines(app)
        rate = next(i for i, line in enumerate(lines) if "rate msg/s" in line)
        assert "✗ argument --rate: expected a number, got 'fast-ish'" in lines[rate + 2]
        problems = [p.removeprefix("✗ ") for p in shown_problems(app)]
    assert not (tmp_path / "runs").exists()
    # the same words as the command line's
    assert problems[0] in cli_error(["run", "redis:bogus=1", "--headless"], capsys)
    assert problems[1] in cli_error(["run", "redis", "--rate", "fast-ish", "--headless"], capsys)


async def test_the_launcher_shows_the_command_line_as_it_is_typed() -> None:
    app = SessionApp(LaunchSettings())
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press(*"kafka:runtime=local,brokers=3", "tab")
        await pilot.press(*"1-topic-16-partitions-1kb", "tab", *"max", "tab", "tab", *"30")
        await pilot.pause()
        line = "streambench run kafka:runtime=local,brokers=3 --workload 1-topic-16-partitions-1kb " \
               "--max-rate --duration 30"
        assert command_shown(app) == "$ " + line
        await pilot.press("ctrl+y")
        assert app.clipboard == line
        assert not shown_problems(app)


def test_run_without_a_target_needs_the_launcher_and_so_a_terminal(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = cli_error(["run", "--headless"], capsys)
    assert err.count("\n") == 1 and "no TARGET given" in err


@pytest.mark.integration
async def test_a_session_of_two_real_runs_and_their_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any) -> None:
    monkeypatch.chdir(tmp_path)

    def write_report(run_dirs: Sequence[Path], progress: Callable[[str], None]) -> Path:
        # the session's reports run in a thread of their own: there, the tests' Spark session
        spark._jvm.SparkSession.setActiveSession(spark._jsparkSession)
        return build_session_report(run_dirs, None, None, formats="md", progress=progress)

    app = SessionApp(SHORT, reporter=write_report)

    def ended(n: int) -> bool:
        return isinstance(app.screen, EndScreen) and len(app.runs) == n and not app.running

    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: ended(1), "the first run's end", timeout_s=60)
        await wait_until(pilot, lambda: "RUN 1 DONE" in "".join(screen_lines(app)[:1]), "its title")
        await pilot.press("r")  # again, with the same settings
        await wait_until(pilot, lambda: ended(2), "the second run's end", timeout_s=60)
        await wait_until(pilot, lambda: "RUN 2 DONE" in "".join(screen_lines(app)[:1]), "its title")
        lines = screen_lines(app)
        await pilot.press("e")  # change settings: the launcher, holding the same values
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher again")
        assert command_shown(app) == "$ " + SHORT.command_line()
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen), "back to the runs")
        await pilot.press("a")  # one report over both runs, shown when written
        await wait_until(pilot, lambda: isinstance(app.screen, ReportScreen)
                         or str(app.report_status).startswith("no report"), "the report",
                         timeout_s=240)
        assert isinstance(app.screen, ReportScreen), str(app.report_status)
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen), "back from the report")
        await pilot.press("q")

    first, second = app.runs
    assert first.run_dir != second.run_dir
    for record in app.runs:
        assert isinstance(record.summary, RunSummary) and not record.summary.stopped_early
        assert record.summary.measured_ticks == 2
        assert (tmp_path / record.run_dir / "run.json").is_file()
        assert record.settings.command_line() == SHORT.command_line()
    assert lines[0].startswith(" RUN 2 DONE")
    # one row per run and target, with the figures of the terminal's end-of-run table
    shown = [line.split() for line in lines if line.lstrip().startswith(("#1  redis", "#2  redis"))]
    assert [row[:2] for row in shown] == [["#1", "redis"], ["#2", "redis"]]
    for row, record in zip(shown, app.runs, strict=True):
        assert record.summary is not None
        figures = dict(rows(record.end.figures["redis"], record.summary.targets[0]))
        assert row[2:6] == [figures["consumed msg/s"], figures["e2e p50 ms"],
                            figures["e2e p99 ms"], figures["e2e p99.9 ms"]]
        assert 250 <= int(figures["consumed msg/s"].replace(",", "")) <= 350
    assert sum(f"$ {SHORT.command_line()}" in line for line in lines) == 2
    (report,) = app.reports_written()
    document = report.read_text()
    assert all(record.summary is not None and record.summary.run_id in document
               for record in app.runs)


@pytest.mark.integration
def test_run_without_a_target_in_a_terminal_opens_the_launcher_and_leaves_its_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    term = PtyRun(["run", "--rate", "5000", "--warmup", "2"])
    try:
        deadline = time.monotonic() + 30
        while b"NEW RUN" not in term.screen and time.monotonic() < deadline:
            term.read_for(0.2)
        assert b"NEW RUN" in term.screen
        os.write(term.fd, b"\x11")  # ctrl+q
        code = term.wait_exit(30)
    finally:
        term.close()
    assert code == 0
    # the options given, in the launcher's command line, left in the terminal
    assert term.screen.rstrip().endswith(b"streambench run --rate 5000 --warmup 2")
    assert not (tmp_path / "runs").exists()


async def test_a_run_that_cannot_start_ends_on_the_end_screen_with_its_error() -> None:
    app = SessionApp(LaunchSettings(targets=["redis@127.0.0.1:1"], overrides={"duration": "2"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen) and not app.running,
                         "the end screen", timeout_s=30)
        await wait_until(pilot, lambda: "RUN 1 FAILED" in "".join(screen_lines(app)[:1]),
                         "its title")
        text = " ".join(line.strip() for line in screen_lines(app))
        (record,) = app.runs
        assert record.summary is None and record.error and "cannot reach redis" in record.error
        assert f"#1 failed: {record.error}" in text  # in full, wrapped
        await pilot.press("d")  # the run's dashboard, as it was left; q comes back
        await wait_until(pilot, lambda: not isinstance(app.screen, EndScreen), "the dashboard")
        assert app.labels == ["redis@127.0.0.1:1"]
        await wait_until(pilot, lambda: "run 1 · " in "".join(screen_lines(app)[:1]),
                         "the run's number in the status line")
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen), "the end screen again")
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        assert command_shown(app) == "$ streambench run redis@127.0.0.1:1 --duration 2"


async def test_the_palette_offers_the_keys_of_the_screen_shown() -> None:
    app = SessionApp(SHORT)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert [key.label for key in LAUNCHER_KEY_TABLE] == [t for t in titles
                                                             if t in {k.label for k in LAUNCHER_KEY_TABLE}]
        assert "pause" not in titles and "fault" not in titles
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), "the palette")
        await pilot.press(*"add target", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, PickScreen), "the platform list")
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")


@pytest.mark.parametrize("argv", [
    ["run", "--workload", "redis-latency-1kb", "--rate", "5000", "--runtime", "local",
     "--at", "30s:rate=100", "--at", "40s:rate=200", "--report", "--processes", "2", "--size", "512"],
    ["run", "--max-rate", "--duration", "2.5", "--partitions", "3", "--keep", "--cpus", "1.5"],
    ["run", "--max-rate=search", "--producers", "2", "--consumers", "4", "--baseline", "runs/x"],
])
def test_the_launcher_keeps_every_option_of_the_command_line(argv: list[str]) -> None:
    args = parse_run(argv)
    settings = LaunchSettings.from_args(args)
    assert parse_run(settings.argv()) == args
    assert settings.command_line() == "streambench " + " ".join(settings.argv())


@pytest.mark.parametrize(("typed", "problem"), [
    ("--warmup soon", "argument --warmup: expected a duration (e.g. 30s, 5m, 1m30s, 500ms), got 'soon'"),
    ("--rate 5", "--rate has a field of its own above"),
    ("redis --keep", "redis: targets go in the target fields"),
    ("--out here", "--out names one run's directory: each run of the launcher gets its own"),
    ("--hel", "--help: every option is in `streambench run --help`"),
])
async def test_other_options_are_checked_beside_their_field(typed: str, problem: str) -> None:
    app = SessionApp(LaunchSettings(targets=["redis"]))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        app.screen.query_one("#extra", Input).value = typed
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: bool(shown_problems(app)), "the error")
        assert shown_problems(app) == ["✗ " + problem]
        assert app.screen.query_one("#extra-problem", Problem).has_class("-shown")
        assert not app.runs


@pytest.mark.integration
async def test_with_report_each_run_is_reported_when_it_ends_and_o_shows_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's wiring of --report: the reporter (here one writing a small document, the
    Spark report has tests of its own) runs after the run, once, and `o` shows its document."""
    monkeypatch.chdir(tmp_path)
    asked: list[list[Path]] = []

    def reporter(run_dirs: Sequence[Path], progress: Callable[[str], None]) -> Path:
        asked.append(list(run_dirs))
        progress("writing report.md")
        document = run_dirs[0] / "report" / "report.md"
        document.parent.mkdir()
        document.write_text(f"# report of {run_dirs[0].name}\n")
        return document

    settings = LaunchSettings(targets=["redis"], overrides={"rate": "300", "duration": "2"},
                              extra=["--warmup", "0", "--report"])
    app = SessionApp(settings, reporter=reporter)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen) and not app.running,
                         "the end of the run", timeout_s=60)
        (record,) = app.runs
        assert asked == [[(tmp_path / record.run_dir).absolute()]]
        assert record.report_path == str(asked[0][0] / "report" / "report.md")
        await pilot.press("o")
        await wait_until(pilot, lambda: isinstance(app.screen, ReportScreen), "the report")
        await pilot.pause()
        assert any(f"report of {record.run_dir.name}" in line for line in screen_lines(app))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen), "back")
    assert len(asked) == 1  # o showed the report written after the run


@pytest.mark.integration
async def test_what_reports_need_starts_after_the_first_reported_run_has_measured(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session warms the reporter (the CLI passes Spark's start) once, in the thread its
    reports run in, and only once the measuring phase of its first run with --report is over
    (a run without --report starts nothing); the report due stops the warm-up, the next run
    does not start it again, and the end of the session removes its log."""
    monkeypatch.chdir(tmp_path)
    import threading

    import pyarrow.parquet as pq

    warmed: list[tuple[Path, str, int, float]] = []
    warm_ups: list[WarmUp] = []
    reported: list[str] = []

    def warm(log: Path, warm_up: WarmUp) -> None:
        log.write_text("started\n")
        warmed.append((log, threading.current_thread().name, len(app.runs), time.time()))
        warm_ups.append(warm_up)

    def reporter(run_dirs: Sequence[Path], progress: Callable[[str], None]) -> Path:
        reported.append(threading.current_thread().name)
        document = run_dirs[0] / "report.md"
        document.write_text("# report\n")
        return document

    app = SessionApp(SHORT, reporter=reporter, warm_reports=warm)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen) and not app.running,
                         "the first run's end", timeout_s=60)
        assert not warmed  # no --report
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, LauncherScreen), "the launcher")
        app.screen.query_one("#extra", Input).value = "--warmup 0 --report"
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen) and len(app.runs) == 2
                         and not app.running, "the second run's end", timeout_s=60)
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, EndScreen) and len(app.runs) == 3
                         and not app.running, "the third run's end", timeout_s=60)
    ((log, thread, runs, at),) = warmed
    assert runs == 2 and log.name.startswith("streambench-spark-start-")
    events = pq.read_table(app.runs[1].run_dir / "events").to_pylist()
    drained = next(e["time"].timestamp() for e in events
                   if e["kind"] == "phase" and e["detail"].startswith("draining"))
    assert at >= drained  # after the measuring phase
    assert warm_ups[0].stopped  # by the report due
    assert reported == [thread, thread]  # the second and third runs' reports, in its thread
    assert log.exists()
    app.close_reports(lambda: None)
    assert not log.exists()


@pytest.mark.integration
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_a_sessions_run_finishes_its_files(
        sig: signal.Signals, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TERM (or HUP: the SSH connection dropped) while a run started from the launcher is
    measuring: the run stops early with complete files, marked as cut short, and the process
    exits with the signal's documented code."""
    monkeypatch.chdir(tmp_path)
    term = PtyRun(["run", "--rate", "500", "--duration", "120", "--warmup", "0"])
    try:
        deadline = time.monotonic() + 30
        while b"NEW RUN" not in term.screen and time.monotonic() < deadline:
            term.read_for(0.2)
        assert b"NEW RUN" in term.screen
        os.write(term.fd, b"redis:runtime=local")
        term.read_for(0.5)
        os.write(term.fd, b"\x12")  # ctrl+r: start
        deadline = time.monotonic() + 60
        ticks: list[Path] = []
        while not ticks and time.monotonic() < deadline:
            term.read_for(0.5)
            ticks = list(tmp_path.glob("runs/*/ticks/part-*.parquet"))
        assert ticks, term.screen[-2000:]
        os.kill(term.pid, sig)
        exit_code = term.wait_exit(60, read=sig != signal.SIGHUP)
    finally:
        term.close()
    assert exit_code == code
    (run_dir,) = tmp_path.glob("runs/*")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["stopped_early"] is True
    (totals,) = meta["totals"]
    assert totals["produced"] > 0
    # every file is whole: readable, none left half-written
    assert not list(run_dir.rglob("*.inprogress"))
    table = ds.dataset(run_dir / "ticks", format="parquet").to_table()
    assert table.num_rows >= 1
