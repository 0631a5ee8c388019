"""`streambench suite` in a terminal: the suite's matrix (workloads down, targets across) filling
in as its cells end, the running cell's live status line, cell k of n, the time spent and an
estimate of the time left, and at the end the summary and the report.

The cells are run by the same loop as headless (tui.bench.suite.SuiteRun), in a thread of its own;
this app is only the other consumer of its events. The thread hands each event over as a
message (a finished cell with its headline figures, read from its run files there, as the end
table of `streambench run` gives them); the handler keeps them in a SuiteBoard, and the screen
is repainted from it on a fixed frame, at most four times a second."""

from __future__ import annotations

import contextlib
import signal
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import ScrollableContainer
from textual.driver import Driver
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static

from loadgen.core.errors import StreambenchError
from tui import formatting as fmt
from tui.bench.exits import SIGNAL_EXIT
from tui.bench.suite import (
    CellChanged,
    CellOutput,
    ReportStep,
    ReportWritten,
    SuiteEnded,
    SuiteEvent,
    SuiteRun,
    SuiteStarted,
    cell_name,
)
from tui.driver import quiet_driver_class
from tui.keys import SUITE_KEY_TABLE, Key
from tui.widgets import HelpScreen, KeyLine

FRAME_S = 0.25  # the screen is repainted at most this often
WORKLOAD_WIDTH = 20  # the matrix's first column, at most
CELL_WIDTH = (14, 24)  # a target's column: at least, at most
CELL_LINES = 3
# a done cell's figures: (row of tui.bench.endsummary.rows, how the cell writes it)
FIGURES = (("consumed msg/s", "{} msg/s"), ("e2e p50 ms", "p50 {} ms"))
MARKS = {"pending": "·", "running": "▶", "done": "✓", "failed": "✗", "stopped": "■"}


@dataclass
class SuiteProgress(Message):
    """An event of the suite, from its thread; a cell done comes with its headline rows."""

    event: SuiteEvent
    figures: dict[str, str] | None = None


@dataclass
class SuiteOver(Message):
    """The suite's thread has ended: its cells and its report (or the error that ended it)."""

    error: BaseException | None = None


@dataclass
class StopAsked(Message):
    """A signal or `q`: stop the suite after the running cell (or quit once it is over)."""

    sig: int


def cell_figures(run_dir: Path) -> dict[str, str]:
    """The headline rows of a cell's run (its only target), from its files."""
    from tui.bench.endsummary import recorded_rows

    try:
        by_target = recorded_rows(run_dir)
    except (StreambenchError, OSError) as exc:
        return {"error": f"figures unreadable: {exc}"}
    return next(iter(by_target.values()), {})


@dataclass
class BoardCell:
    target: str
    workload: str
    state: str = "pending"
    seconds: float | None = None
    error: str = ""
    figures: dict[str, str] = field(default_factory=dict)
    before: bool = False  # done in an earlier go at the suite
    started: float | None = None  # monotonic, when it started running here
    phase: str = ""  # the running cell's phase and load time, from its latest status line


class SuiteBoard:
    """What the screen shows, kept from the suite's events (no Textual in here)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.name = ""
        self.scale = 1.0
        self.root: Path | None = None
        self.cells: list[BoardCell] = []
        self._by_place: dict[tuple[str, str], BoardCell] = {}
        self.planned: list[float] = []
        self.running: int | None = None
        self.status_line = ""  # the running cell's latest status line (its stdout)
        self.message = ""  # … and its latest progress message (its stderr)
        self.ended: SuiteEnded | None = None
        self.ended_at: float | None = None
        self.report = ""  # the report's progress, then its path
        self.report_written: ReportWritten | None = None
        self.stopping = 0  # stop requests so far

    @property
    def targets(self) -> list[str]:
        return list(dict.fromkeys(c.target for c in self.cells))

    @property
    def workloads(self) -> list[str]:
        return list(dict.fromkeys(c.workload for c in self.cells))

    def cell(self, workload: str, target: str) -> BoardCell | None:
        return self._by_place.get((workload, target))

    def apply(self, event: SuiteEvent, figures: dict[str, str] | None = None) -> None:
        if isinstance(event, SuiteStarted):
            self.name, self.scale, self.root = event.name, event.scale, event.root
            self.cells = [BoardCell(c["target"], c["workload"]) for c in event.cells]
            self._by_place = {(c.workload, c.target): c for c in self.cells}
            self.planned = list(event.planned_s)
        elif isinstance(event, CellChanged):
            cell = self.cells[event.index]
            cell.state, cell.before = event.cell["state"], event.before
            if cell.state == "running":
                self.running, cell.started = event.index, self.clock()
                self.status_line = self.message = ""
                return
            if self.running == event.index:
                self.running = None
            cell.seconds = event.cell.get("seconds")
            # the cell's last error line; the command line's own prefix says nothing here
            cell.error = event.cell.get("error", "").removeprefix("streambench: error: ")
            cell.figures = figures or {}
        elif isinstance(event, CellOutput) and event.index == self.running:
            if event.stderr:
                self.message = event.line
            else:
                self.status_line = event.line
                self.cells[event.index].phase = " ".join(event.line.split()[:2])
        elif isinstance(event, SuiteEnded):
            self.ended, self.ended_at, self.running = event, self.clock(), None
        elif isinstance(event, ReportStep):
            self.report = f"writing the report: {event.text}"
        elif isinstance(event, ReportWritten):
            self.report_written = event
            self.report = f"report: {event.path}"

    # ---- time ---------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        return (self.ended_at if self.ended_at is not None else self.clock()) - self.started

    def left_s(self) -> tuple[float, bool]:
        """Seconds left, and whether that is an estimate from the cells run here (their time
        beyond the planned warm-up and measuring: brokers starting, the drain, the files) or
        only the planned time still to go (before any cell has ended)."""
        ran = [c.seconds - self.planned[i] for i, c in enumerate(self.cells)
               if c.state == "done" and not c.before and c.seconds is not None]
        overhead = sum(ran) / len(ran) if ran else 0.0
        left = 0.0
        for i, c in enumerate(self.cells):
            if c.state == "pending":
                left += self.planned[i] + overhead
            elif c.state == "running" and c.started is not None:
                left += max(0.0, self.planned[i] + overhead - (self.clock() - c.started))
        return max(0.0, left), bool(ran)

    def position(self) -> str:
        """cell k of n: the one running, else how many have been gone through."""
        n = len(self.cells)
        if self.running is not None:
            return f"cell {self.running + 1} of {n}"
        through = sum(c.state != "pending" for c in self.cells)
        return f"{through} of {n} cells"


# ---- widgets ------------------------------------------------------------------------------

def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


class SuiteMatrix(Widget):
    """Workloads down, targets across; each cell's state in words and a mark (no colour
    needed), a done cell's throughput and e2e p50, a failed cell's error."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "matrix--head", "matrix--pending", "matrix--running", "matrix--done", "matrix--failed",
        "matrix--stopped"}

    def __init__(self, board: SuiteBoard) -> None:
        super().__init__()
        self.board = board

    def widths(self, available: int) -> tuple[int, int]:
        """(workload column, target column) for this many cells of width."""
        board = self.board
        first = min(WORKLOAD_WIDTH, max((len(w) for w in board.workloads), default=8) + 2)
        targets = max(1, len(board.targets))
        each = (available - first) // targets
        return first, max(CELL_WIDTH[0], min(CELL_WIDTH[1], each))

    def needed_width(self, available: int) -> int:
        first, each = self.widths(available)
        return first + each * len(self.board.targets)

    def cell_lines(self, cell: BoardCell, width: int) -> list[str]:
        now = self.board.clock()
        mark = MARKS.get(cell.state, "?")
        if cell.state == "running":
            spent = now - cell.started if cell.started is not None else 0.0
            return [f"{mark} running {fmt.duration(spent)}", cell.phase or "starting", ""]
        if cell.state == "pending":
            return [f"{mark} pending", "", ""]
        took = "" if cell.seconds is None else f" {fmt.duration(cell.seconds)}"
        if cell.state == "done":
            head = f"{mark} done before" if cell.before else f"{mark} done{took}"
            if "error" in cell.figures:
                return [head, *textwrap.wrap(cell.figures["error"], width)[:2]]
            return [head, *(shape.format(cell.figures.get(row, fmt.MISSING))
                            for row, shape in FIGURES)]
        if cell.state == "failed":
            lines = textwrap.wrap(cell.error, width) or [""]
            if len(lines) > 2:
                lines = [lines[0], _fit(" ".join(lines[1:]), width)]
            return [f"{mark} FAILED{took}", *lines]
        return [f"{mark} stopped{took}", "runs again on", "--resume"]

    def render(self) -> Text:
        board = self.board
        first, each = self.widths(self.content_size.width)
        style = self.get_component_rich_style
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("".ljust(first) + "".join(_fit(t, each - 2).ljust(each) for t in board.targets),
                    style("matrix--head"))
        for workload in board.workloads:
            text.append("\n")
            rows: list[list[tuple[str, str]]] = [[(_fit(workload, first - 2).ljust(first),
                                                   "matrix--head")]]
            rows += [[("".ljust(first), "matrix--head")] for _ in range(CELL_LINES - 1)]
            for target in board.targets:
                cell = board.cell(workload, target)
                lines = self.cell_lines(cell, each - 2) if cell is not None else []
                lines = (lines + [""] * CELL_LINES)[:CELL_LINES]
                state = cell.state if cell is not None else "pending"
                for row, line in zip(rows, lines, strict=True):
                    row.append((_fit(line, each - 2).ljust(each), f"matrix--{state}"))
            for i, row in enumerate(rows):
                for part, component in row:
                    text.append(part, style(component))
                if i < len(rows) - 1:
                    text.append("\n")
        return text


class SuiteApp(App[int]):
    """The dashboard of a suite. Returns the exit code of the headless path: 0, 4 when a cell
    failed, 130/143/129 when stopped (`q` counts as Ctrl-C)."""

    CSS_PATH = Path(__file__).with_name("streambench.tcss")
    TITLE = "streambench suite"
    BINDINGS: ClassVar[list[BindingType]] = [key.binding() for key in SUITE_KEY_TABLE]
    KEYS: ClassVar[tuple[Key, ...]] = SUITE_KEY_TABLE
    AUTO_FOCUS = "#matrix-box"
    ENABLE_COMMAND_PALETTE = False  # every key the suite has is on its bottom line and in ?

    def __init__(self, suite: SuiteRun, report: bool, *,
                 clock: Callable[[], float] = time.monotonic, run_cells: bool = True) -> None:
        """`run_cells=False`: the app runs nothing and shows only the SuiteProgress messages
        posted to it (recorded events, for a fixed picture)."""
        super().__init__()
        self.suite = suite
        self.report = report
        self.run_cells = run_cells
        self.board = SuiteBoard(clock)
        self.error: BaseException | None = None  # what ended the suite's thread, if anything
        self.over = False  # the thread has ended
        self._cells_thread: threading.Thread | None = None
        self._dirty = True
        self._shown_second = -1
        self._last_repaint = -FRAME_S

    def get_driver_class(self) -> type[Driver]:
        return quiet_driver_class(super().get_driver_class())

    def compose(self) -> ComposeResult:
        yield Static(id="suite-title")
        with ScrollableContainer(id="matrix-box"):
            yield SuiteMatrix(self.board)
        yield Static(id="cell-status")
        yield Static(id="suite-notes")
        yield KeyLine(SUITE_KEY_TABLE)

    def on_mount(self) -> None:
        if self.console.color_system in ("standard", "windows"):
            self.theme = "ansi-dark"  # 8/16-colour terminal: the theme of native ANSI colours
        self.set_interval(FRAME_S, self._frame)
        if self.run_cells:
            self._cells_thread = threading.Thread(target=self._drive, name="suite", daemon=True)
            self._cells_thread.start()

    # ---- the suite's thread -------------------------------------------------------------

    def _drive(self) -> None:
        error: BaseException | None = None
        try:
            self.suite.run_cells(self._hand_over)
            if self.report:
                self.suite.write_report(self._hand_over)
        except BaseException as exc:  # shown, and raised again by the command line after
            error = exc
        self._post(SuiteOver(error))

    def _hand_over(self, event: SuiteEvent) -> None:
        figures = None
        if isinstance(event, CellChanged) and event.cell["state"] == "done":
            figures = cell_figures(Path(event.cell["run_dir"]))  # here, off the screen's loop
        self._post(SuiteProgress(event, figures))

    def _post(self, message: Message) -> None:
        with contextlib.suppress(RuntimeError):  # the app's loop has closed
            self.post_message(message)

    def wait_cells(self) -> None:
        """After the app: if it ended while a cell ran, stop the suite as Ctrl-C does and wait
        for the cell to finish its files (suite.json is then saved, resumable)."""
        if self._cells_thread is None or self.suite.finished.is_set():
            return
        if not self.suite.stop:
            self.suite.request_stop(signal.SIGINT)
        self.suite.finished.wait()

    # ---- messages -----------------------------------------------------------------------

    def on_suite_progress(self, message: SuiteProgress) -> None:
        self.board.apply(message.event, message.figures)
        if isinstance(message.event, SuiteStarted):  # the matrix's size is known now
            matrix = self.query_one(SuiteMatrix)
            matrix.styles.min_width = matrix.needed_width(0)
            matrix.styles.height = 1 + CELL_LINES * len(self.board.workloads)
        self._dirty = True

    def on_suite_over(self, message: SuiteOver) -> None:
        self.over = True
        self.error = message.error
        if self.error is not None:
            what = str(self.error) if isinstance(self.error, StreambenchError) else (
                f"{type(self.error).__name__}: {self.error}")
            self.board.report = f"no report: {what}" if self.board.ended else f"error: {what}"
            if not isinstance(self.error, StreambenchError):
                self.exit(None)  # not the user's to act on: the command line reports it
                return
        if self.suite.stop:  # stopped by a signal or q: nothing more to wait for
            self.exit(self.suite.exit_code)
            return
        self._dirty = True

    def interrupt(self, sig: int) -> None:
        """From a signal handler: handled on the app's loop like `q`."""
        self._post(StopAsked(sig))

    def on_stop_asked(self, message: StopAsked) -> None:
        if self.over:
            self.exit(self.suite.exit_code)
        elif self.board.ended is not None:  # only the report is left: quit without it
            self.exit(SIGNAL_EXIT.get(signal.Signals(message.sig), 130))
        else:
            self.board.stopping += 1
            self.suite.request_stop(message.sig)
            self._dirty = True

    # ---- keys ---------------------------------------------------------------------------

    def action_stop(self) -> None:
        self.post_message(StopAsked(signal.SIGINT))

    async def action_quit(self) -> None:
        """Textual's own quit (its palette entry) stops like `q`."""
        self.action_stop()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()
        else:
            self.push_screen(HelpScreen(self.KEYS))

    def action_close(self) -> None:
        if isinstance(self.screen, HelpScreen):
            self.pop_screen()

    def action_scroll(self, x: int, y: int) -> None:
        box = self.query_one("#matrix-box", ScrollableContainer)
        box.scroll_relative(x, y, animate=False)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "close":  # escape is a priority key: let it through elsewhere
            return isinstance(self.screen, HelpScreen)
        if action == "scroll":  # on the help screen the arrows scroll the help
            return not isinstance(self.screen, HelpScreen)
        return True

    # ---- repaint ------------------------------------------------------------------------

    def _frame(self) -> None:
        now = time.monotonic()
        if now - self._last_repaint < FRAME_S:  # a late frame and the next one close together
            return
        second = int(self.board.elapsed_s())
        if self._dirty or (second != self._shown_second and self.board.ended is None):
            self._shown_second = second
            self._dirty = False
            self._last_repaint = now
            self.repaint()

    def repaint(self) -> None:
        with self.batch_update():
            self.query_one(SuiteMatrix).refresh()
            self.query_one("#suite-title", Static).update(self.title_text())
            self.query_one("#cell-status", Static).update(self.status_text())
            notes = self.notes_text()
            shown = self.query_one("#suite-notes", Static)
            shown.display = bool(notes.plain)
            shown.update(notes)

    def title_text(self) -> Text:
        b = self.board
        if b.ended is None:
            tag = " SUITE STOPPING " if b.stopping else " SUITE "
        elif b.ended.stopped:
            tag = " SUITE STOPPED "
        else:
            tag = f" SUITE DONE · {b.ended.failed} FAILED " if b.ended.failed else " SUITE DONE "
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(tag, style="bold reverse")
        text.append(f" {_fit(b.name, 24)}", style="bold")
        parts = [f"×{b.scale:g}"] if b.scale != 1.0 else []
        parts += [b.position(), f"{fmt.duration(b.elapsed_s())} elapsed"]
        if b.ended is None and b.cells:
            # ~ an estimate from the cells run so far, ≥ only the planned time still to go
            left, estimated = b.left_s()
            parts.append(f"{'~' if estimated else '≥ '}{fmt.duration(left)} left")
        text.append(" · " + " · ".join(parts))
        return text

    def status_text(self) -> Text:
        """The running cell: its name, its latest progress message (or that the suite is
        stopping), its latest status line over two lines; at the end, the summary."""
        b = self.board
        width = max(20, self.query_one("#cell-status", Static).content_size.width)
        text = Text(overflow="fold")
        if b.ended is not None:
            e = b.ended
            text.append(f"{e.done} of {e.n} cells done, {e.failed} failed", style="bold")
            text.append(" · q quits" if self.over else " · q quits without the report")
            if e.stopped:
                text.append(f"\nstopped: resume with --resume {e.root}")
            if b.report:
                report = b.report
            elif not self.report:
                report = "no report (--no-report)"
            elif e.stopped or not e.done:
                report = "no report: " + ("the suite was stopped" if e.stopped else "no cell done")
            else:
                report = "writing the report …"
            text.append("\n" + report)
            return text
        if b.running is None:
            text.append("between cells" if b.cells else "starting the suite", style="dim")
            return text
        cell = b.cells[b.running]
        head = f"▶ cell {b.running + 1}/{len(b.cells)} {cell.target} × {cell.workload}"
        text.append(_fit(head, width) + "\n", style="bold")
        if b.stopping:
            note = ("stopping: the cell finishes its files (q again: it skips its drain)"
                    if b.stopping == 1 else "stopping: the cell skips its drain")
        else:
            note = b.message
        text.append(_fit(note, width) + "\n")
        text.append(_fit(b.status_line or "starting", 2 * width))
        return text

    def notes_text(self) -> Text:
        """The failed cells' errors in full, then the published-figure verdicts."""
        b = self.board
        text = Text()
        lines: list[tuple[str, str]] = []
        for i, c in enumerate(b.cells):
            if c.state == "failed":
                event = CellChanged(i, len(b.cells), {"target": c.target, "workload": c.workload})
                lines.append((f"✗ {cell_name(event)}: {c.error}", "bold"))
        if b.report_written is not None:
            lines += [(line, "") for line in b.report_written.verdicts]
            if b.report_written.published is not None:
                lines.append((f"published figures: {b.report_written.published}", ""))
        for i, (line, style) in enumerate(lines):
            text.append(line, style=style)
            if i < len(lines) - 1:
                text.append("\n")
        return text
