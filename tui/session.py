"""An interactive session: the launcher, then runs one after another in the same dashboard, and
after each the runs so far side by side with what to do next (run again, change the settings,
the report of one run or of all of them, quit).

The session is the dashboard app whose run changes: each Start builds a Run exactly as
`streambench run` does (tui.bench.runbuild.build_run) and hands it to the same columns, keys and bus
handling; what a run adds up to comes from the same EndSummary the terminal table uses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Markdown, Static

from analysis.warmup import WarmUp
from loadgen.core.errors import StreambenchError
from loadgen.core.workload import Workload
from loadgen.run import RunSummary
from tui.app import DashboardApp
from tui.bench.endsummary import EndSummary, rows
from tui.keys import END_KEY_TABLE, REPORT_KEY_TABLE, Key
from tui.launcher import LauncherScreen, LaunchSettings, PickScreen, Started, parse_run
from tui.widgets import HelpScreen, KeyLine, StatusBar, TargetColumns

# Writes the report over these run directories, telling its progress; returns its main document.
Reporter = Callable[[Sequence[Path], Callable[[str], None]], Path]

# the headline figures of each run and target: (row of tui.bench.endsummary.rows, heading, width)
HEADLINE: tuple[tuple[str, str, int], ...] = (
    ("consumed msg/s", "msg/s", 9),
    ("e2e p50 ms", "p50 ms", 8),
    ("e2e p99 ms", "p99 ms", 8),
    ("e2e p99.9 ms", "p99.9 ms", 9),
    ("max lag msgs", "max lag", 9),
    ("broker CPU % mean/max", "CPU %", 9),
    ("broker memory max", "memory", 10),
)
RUN_WIDTH = 4  # "#12 "
TARGET_WIDTH = 12


@dataclass
class SessionRun:
    """One run of the session: how it was asked for and what it came to."""

    number: int
    settings: LaunchSettings
    run_dir: Path
    labels: list[str]
    end: EndSummary
    summary: RunSummary | None = None
    error: str | None = None
    report_path: str | None = None

    @property
    def reportable(self) -> bool:
        return self.summary is not None and self.summary.measured_ticks > 0

    def outcome(self) -> str:
        if self.error is not None:
            return f"failed: {self.error}"
        if self.summary is None:
            return "running"
        s = self.summary
        words = [f"{s.measured_ticks} s measured"]
        if s.stopped_early:
            words.append("stopped early")
        if s.broker_failures:
            words.append(f"{len(s.broker_failures)} broker(s) failed")
        if not all(t.drained for t in s.targets):
            words.append("NOT drained")
        return " · ".join(words)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def runs_table(runs: Sequence[SessionRun]) -> Group:
    """Every run of the session, one line per target, the headline figures side by side;
    then each run's outcome, run directory and command line (wrapped: errors are long)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    head = "run".ljust(RUN_WIDTH) + "target".ljust(TARGET_WIDTH) + "".join(
        heading.rjust(width) for _, heading, width in HEADLINE)
    text.append(head + "\n", style="bold")
    for r in runs:
        number = f"#{r.number}".ljust(RUN_WIDTH)
        if r.summary is None:
            text.append(number + r.outcome() + "\n")
            continue
        totals = {t.label: t for t in r.summary.targets}
        for label in r.labels:
            if label not in totals:
                continue
            figures = dict(rows(r.end.figures[label], totals[label]))
            text.append(number + _fit(label, TARGET_WIDTH - 1).ljust(TARGET_WIDTH) + "".join(
                _fit(figures.get(name, "—"), width - 1).rjust(width)
                for name, _, width in HEADLINE) + "\n")
            number = " " * RUN_WIDTH
    notes = Text()
    for r in runs:
        notes.append(f"#{r.number} ", style="bold")
        notes.append(f"{r.outcome()} · {r.run_dir}\n")
        notes.append(f"   $ {r.settings.command_line()}\n")
        if r.report_path:
            notes.append(f"   report: {r.report_path}\n")
    return Group(text, notes)


class EndScreen(Screen[None]):
    """After a run: what it came to, every run of the session side by side, the next step."""

    BINDINGS: ClassVar[list[BindingType]] = [key.binding() for key in END_KEY_TABLE]
    KEYS: ClassVar[tuple[Key, ...]] = END_KEY_TABLE
    AUTO_FOCUS = "#runs"  # the runs scroll with the arrow keys

    def __init__(self, session: SessionApp) -> None:
        super().__init__()
        self.session = session

    def compose(self) -> ComposeResult:
        yield Static(id="end-title")
        with VerticalScroll(id="runs"):
            yield Static(id="runs-table")
        yield Static(id="report-status")
        yield KeyLine(END_KEY_TABLE)

    def on_mount(self) -> None:
        self.show()

    def show(self) -> None:
        last = self.session.runs[-1]
        failed = last.error is not None or last.summary is None
        tag = (f" RUN {last.number} FAILED " if failed else
               f" RUN {last.number} STOPPED EARLY " if last.summary and last.summary.stopped_early
               else f" RUN {last.number} DONE ")
        title = Text(tag, style="bold reverse")
        title.append("  " + last.outcome(), style="bold" if failed else "")
        self.query_one("#end-title", Static).update(title)
        self.query_one("#runs-table", Static).update(runs_table(self.session.runs))
        self.query_one("#report-status", Static).update(self.session.report_status)

    def action_again(self) -> None:
        self.session.run_again()

    def action_change(self) -> None:
        self.session.open_launcher()

    def action_report(self) -> None:
        # a worker: the keys of this screen stay live while Spark works
        self.session.run_worker(self.session.show_report([self.session.runs[-1]]), group="report")

    def action_report_all(self) -> None:
        self.session.run_worker(self.session.show_report(self.session.runs), group="report")

    def action_dashboard(self) -> None:
        if self.session.labels:
            self.app.pop_screen()

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(END_KEY_TABLE))

    def action_quit_session(self) -> None:
        self.app.exit()


class ReportScreen(Screen[None]):
    """A written report's main document, readable in the terminal; Esc goes back."""

    BINDINGS: ClassVar[list[BindingType]] = [key.binding() for key in REPORT_KEY_TABLE]
    KEYS: ClassVar[tuple[Key, ...]] = REPORT_KEY_TABLE
    AUTO_FOCUS = "#report"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def compose(self) -> ComposeResult:
        yield Static(Text(" REPORT ", style="bold reverse") + Text(f"  {self.path}"), id="end-title")
        with VerticalScroll(id="report"):
            try:
                document = self.path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                document = f"cannot read {self.path}: {exc}"
            if self.path.suffix == ".md":
                yield Markdown(document)
            else:
                yield Static(Text(document))
        yield KeyLine(REPORT_KEY_TABLE)

    def action_back(self) -> None:
        self.app.pop_screen()


class SessionStatusBar(StatusBar):
    """The dashboard's status bar, saying which run of the session it shows."""

    def __init__(self, session: SessionApp, clock: Callable[[], int]) -> None:
        super().__init__(session.status, clock, id="status")
        self.session = session

    def _progress(self) -> str:
        shown = super()._progress()
        runs = getattr(self.session, "runs", None)  # (none yet while the app is built)
        return f"run {len(runs)} · {shown}" if runs else shown


class SessionApp(DashboardApp):
    """The launcher, then the dashboard of each run started from it, then the session's runs."""

    def __init__(self, settings: LaunchSettings, reporter: Reporter | None = None,
                 warm_reports: Callable[[Path, WarmUp], None] | None = None) -> None:
        """`warm_reports(log, warm)` starts what the reporter needs (Spark) ahead of time and
        warms it up until `warm` is stopped: it runs in the reports' thread once the measuring
        phase of the session's first run with --report has ended (stopped when a report is
        due), so that the JVM is up when the report is, and never runs while a run measures."""
        super().__init__(None, [], Workload())
        self.settings = settings
        self.reporter = reporter
        self._warm_reports = warm_reports
        self._warm_log: Path | None = None
        self._warm: WarmUp | None = None
        self.runs: list[SessionRun] = []
        self.running = False
        self.hung_up = False  # the terminal is gone: quit once the run has ended
        self.signalled = False  # INT, TERM or HUP: quit once the run has ended
        self.report_status = Text("o: the report of the last run · a: one over every run",
                                  style="dim")
        self._reports: dict[tuple[Path, ...], Path] = {}
        self._launcher_settings: LaunchSettings | None = None
        self._reporting = False
        # Spark keeps its session in the thread that started it: every report runs in this one
        self._report_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="report")

    def _make_status_bar(self, clock: Callable[[], int]) -> StatusBar:
        return SessionStatusBar(self, clock)

    def on_mount(self) -> None:
        super().on_mount()
        self.open_launcher()

    # ---- launcher and runs --------------------------------------------------------------

    def _session_screens(self) -> tuple[type[Screen[Any]], ...]:
        return (LauncherScreen, EndScreen, ReportScreen, PickScreen)

    def open_launcher(self, start: bool = False) -> LauncherScreen:
        """The launcher with the settings of the last run (and `start`: starting it at once)."""
        while isinstance(self.screen, EndScreen | ReportScreen | HelpScreen):
            self.pop_screen()
        launcher = LauncherScreen(self.settings, self.start,
                                  on_back=self.show_end if self.runs else None)
        self._launcher_settings = launcher.settings  # what its fields hold, as they change
        self.push_screen(launcher)
        if start:
            launcher.call_after_refresh(launcher.action_start)
        return launcher

    def run_again(self) -> None:
        self.open_launcher(start=True)

    async def start(self, started: Started) -> None:
        """Show and drive the run the launcher built."""
        run = started.run
        self.settings = started.settings
        record = SessionRun(len(self.runs) + 1, started.settings, run.run_dir, run.labels,
                            EndSummary(run.labels))
        self.runs.append(record)
        run.subscribe(record.end)
        while isinstance(self.screen, LauncherScreen | EndScreen | ReportScreen | HelpScreen):
            self.pop_screen()
        after_run = self._report_after_run if parse_run(started.settings.argv()).report else None
        self._set_run(run, run.labels, run.workload, after_run, started.baselines)
        self._status_bar.status = self.status
        self._status_clock()
        columns = self.query_one("#columns", TargetColumns)
        await columns.remove_children()
        await columns.mount_all(self._columns.values())
        columns.on_resize()
        self._mark_selected()
        self._status_bar.refresh()
        self.running = True
        run.subscribe(self._forward)
        self.run_worker(self._execute(), name="run", group="run")
        if (self._warm_reports is not None and self.reporter is not None
                and after_run is not None and self._warm is None):
            # (the run makes its directory later: the log of Spark's start is a file of its own)
            fd, name = tempfile.mkstemp(prefix="streambench-spark-start-", suffix=".log")
            os.close(fd)
            log, warm_reports, thread = Path(name), self._warm_reports, self._report_thread
            self._warm_log = log

            def start() -> None:  # once the run has measured: nothing of Spark runs before
                thread.submit(warm_reports, log, warm)

            warm = self._warm = WarmUp(start)
            run.subscribe(warm.follow)

    def run_ended(self, result: RunSummary | StreambenchError) -> None:
        self.running = False
        record = self.runs[-1]
        if isinstance(result, StreambenchError):
            record.error = str(result)
        else:
            record.summary = result
            record.report_path = self.report_path
        if self.hung_up or self.signalled:
            self.exit()
            return
        self.show_end()

    def show_end(self) -> None:
        if isinstance(self.screen, EndScreen):
            self.screen.show()
            return
        while isinstance(self.screen, LauncherScreen | HelpScreen):
            self.pop_screen()
        self.push_screen(EndScreen(self))

    def interrupt(self) -> None:
        """A signal: end the session, once the run going on has stopped and written its
        files."""
        self.signalled = True
        if self.running and self.bench is not None:
            self.bench.request_stop()
        else:
            self.exit()

    # ---- reports ------------------------------------------------------------------------

    async def _report_after_run(self, summary: RunSummary) -> str | None:
        if not summary.measured_ticks:
            return None
        return str(await self._write_report([summary.run_dir.absolute()]))

    async def _write_report(self, run_dirs: Sequence[Path]) -> Path:
        if self.reporter is None:
            raise StreambenchError("reports are not available here")
        reporter = self.reporter
        if self._warm is not None:
            self._warm.stop()  # a report is due: what is left of the warm-up is skipped
        loop = asyncio.get_running_loop()

        def progress(message: str) -> None:
            loop.call_soon_threadsafe(self._report_progress, f"report: {message}")

        path = await asyncio.wrap_future(self._report_thread.submit(reporter, list(run_dirs), progress))
        self._reports[tuple(run_dirs)] = path
        return path

    def _report_progress(self, message: str) -> None:
        self.report_status = Text(message)
        if isinstance(self.screen, EndScreen):
            self.screen.show()

    async def show_report(self, records: Sequence[SessionRun]) -> None:
        """Write the report over these runs (once) and show it."""
        if self._reporting:
            self.notify("a report is being written", severity="warning")
            return
        dirs = tuple(r.run_dir.absolute() for r in records if r.reportable)
        if not dirs:
            self.notify("no run with a measuring phase to report on", severity="warning")
            return
        path = self._reports.get(dirs)
        if path is None and len(records) == 1 and records[0].report_path:
            path = Path(records[0].report_path)
        if path is None:
            self._reporting = True
            what = "the last run" if len(dirs) == 1 else f"{len(dirs)} runs"
            self._report_progress(f"writing the report over {what} (Spark) …")
            try:
                path = await self._write_report(dirs)
            except StreambenchError as exc:
                self._report_progress(f"no report: {exc}")
                return
            finally:
                self._reporting = False
            if len(records) == 1:
                records[0].report_path = str(path)
            self._report_progress(f"report: {path}")
        if isinstance(self.screen, EndScreen):  # not over a run started meanwhile
            self.push_screen(ReportScreen(path))
        else:
            self.notify(f"report: {path}", timeout=8)

    # ---- keys ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # the dashboard's keys act on the dashboard only: the session's screens have their own
        # (and the launcher's fields take letters)
        dashboard = {key.action.partition("(")[0] for key in self.KEYS} | {"quit"}
        if action in dashboard and any(isinstance(s, self._session_screens())
                                       for s in self.screen_stack):
            return action in ("help", "close") and isinstance(self.screen, HelpScreen)
        return super().check_action(action, parameters)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """On the launcher and the end screen, the palette offers their keys, not the
        dashboard's."""
        table: tuple[Key, ...] | None = getattr(screen, "KEYS", None)
        dashboard = {key.label for key in self.KEYS}
        for command in super().get_system_commands(screen):
            if table is None or command.title not in dashboard:
                yield command
        for key in table or ():
            yield SystemCommand(key.label, key.help, partial(screen.run_action, key.action))

    def action_stop(self) -> None:
        if self.running:
            super().action_stop()
        else:  # the run is over: back to the runs of the session
            self.show_end()

    def launcher_line(self) -> str | None:
        """The launcher's command line as last typed, unless it is the last run's."""
        if self._launcher_settings is None:
            return None
        line = self._launcher_settings.command_line()
        return None if self.runs and self.runs[-1].settings.command_line() == line else line

    def reports_written(self) -> list[Path]:
        """The reports over several runs (a run's own is listed with the run)."""
        return [path for dirs, path in self._reports.items() if len(dirs) > 1]

    def close_reports(self, stop_spark: Callable[[], None]) -> None:
        """After the app: `stop_spark` in the reports' thread if Spark was started there."""
        if self._warm_log is not None or self._reports or any(r.report_path for r in self.runs):
            self._report_thread.submit(stop_spark)
        self._report_thread.shutdown(wait=True, cancel_futures=True)
        if self._warm_log is not None:
            with contextlib.suppress(OSError):
                self._warm_log.unlink()

