"""The live log pane of one target (`l` on the dashboard): the last lines of the broker's own
log, read again at most twice a second, with a `/` filter.

Where the log is comes from the target's description (run.json `targets[]`): a local stack
lists its log files (`logs`, Stack.log_files), a docker stack its containers, whose output the
docker engine keeps; an existing cluster has no log streambench can read, which the pane says
in one line. Reading happens in a worker thread, which hands the lines to the screen as a
message; the screen only shows them."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.segment import Segment
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.strip import Strip
from textual.widgets import Input, Log, Static

from loadgen.core.errors import StackError
from tui.metadata import RunDescription, kept_logs, targets

LOG_LINES = 200  # the pane's last lines, shared out between the sources of a target
REFRESH_S = 0.5  # at most two reads a second
TAIL_BYTES = 256 * 1024  # read from the end of a file: 200 lines fit unless they are very long
HINT = "esc back · / filter · l close · ? help"


@dataclass(frozen=True)
class LogSource:
    """What to read for one target: files (local), containers (docker), or why nothing."""

    files: tuple[Path, ...] = ()
    containers: tuple[str, ...] = ()
    unavailable: str = ""  # the one line shown instead of a log
    kept: tuple[Path, ...] = ()  # the copies in the run directory, once the stack is down


def log_source(run: RunDescription, label: str) -> LogSource:
    index, target = targets(run).get(label, (0, {}))
    kept = tuple(kept_logs(run, index, label))
    runtime = target.get("runtime")
    if runtime == "external":
        return LogSource(unavailable="an existing cluster: no broker log is available here "
                                     "(streambench did not start its brokers)")
    if "endpoints" not in target:
        return LogSource(unavailable="the brokers are starting: no log yet")
    if runtime == "docker" and target.get("containers") and not kept:
        return LogSource(containers=tuple(str(c) for c in target["containers"]))
    if target.get("logs") or kept:
        return LogSource(files=tuple(Path(p) for p in target.get("logs") or []), kept=kept)
    return LogSource(unavailable=f"the {runtime} stack names no log file")


def tail_lines(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a file (its last TAIL_BYTES at most); [] when it is missing."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    found = data.decode(errors="replace").splitlines()
    if len(data) == TAIL_BYTES and size > TAIL_BYTES:
        found = found[1:]  # the first line read is cut
    return found[-lines:]


def _short_names(paths: tuple[Path, ...]) -> list[str]:
    """Each path under the directory the paths share (`broker-1/broker.log`)."""
    common = Path(os.path.commonpath([str(p) for p in paths])) if len(paths) > 1 else None
    return [str(p.relative_to(common)) if common is not None and common != p else p.name
            for p in paths]


def _merge(parts: list[tuple[str, list[str]]]) -> list[str]:
    """The sources' lines, each prefixed by its name when there are several non-empty ones."""
    found = [(name, lines) for name, lines in parts if lines]
    if len(found) == 1:
        return found[0][1]
    return [f"{name}: {line}" for name, lines in found for line in lines]


class DockerLogs:
    """The docker engine's log of a target's containers; the client is made on first use."""

    def __init__(self) -> None:
        self._client: Any = None

    def read(self, containers: tuple[str, ...], lines: int) -> list[tuple[str, list[str]]]:
        from compose.docker import engine

        if self._client is None:
            self._client = engine()
        parts = []
        for cid in containers:
            container = self._client.containers.get(cid)
            text = container.logs(tail=lines).decode(errors="replace")
            parts.append((container.name, text.splitlines()[-lines:]))
        return parts

    def close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None


def read_log(source: LogSource, docker: DockerLogs) -> tuple[list[str], str]:
    """(the last lines, where they come from) of a source with something to read."""
    if source.containers:
        share = max(1, LOG_LINES // len(source.containers))
        try:
            parts = docker.read(source.containers, share)
        except StackError as exc:
            return [], str(exc)
        except Exception as exc:  # the SDK raises DockerException and requests' errors alike
            return [], f"docker logs: {type(exc).__name__}: {exc}"
        return _merge(parts), "docker logs of " + ", ".join(name for name, _ in parts)
    files, where = source.files, ""
    if source.kept and not any(path.is_file() for path in files):
        files, where = source.kept, "kept: "  # the stack is down, its data dir removed
    share = max(1, LOG_LINES // len(files))
    parts = [(name, tail_lines(path, share))
             for name, path in zip(_short_names(files), files, strict=True)]
    shown = [name for name, lines in parts if lines]
    return _merge(parts), where + ", ".join(shown) if shown else "the log files are empty so far"


def appended(old: list[str], new: list[str]) -> list[str] | None:
    """The lines `new` adds after `old` when it continues it (the same log, its window moved
    on); None when it does not (another source, a log rotated or rewritten)."""
    if not old:
        return None
    for start in range(len(old)):
        kept = old[start:]
        if new[:len(kept)] == kept:
            return new[len(kept):]
    return None


def matching(lines: list[str], text: str) -> list[str]:
    """The lines holding `text`, case-insensitively; all of them for an empty filter."""
    if not text:
        return lines
    needle = text.lower()
    return [line for line in lines if needle in line.lower()]


class LogLines(Log):
    """The log's lines; a line cut at the pane's right edge ends in an ellipsis there (the
    pane scrolls sideways to the rest of it)."""

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        strip = super()._render_line(y, scroll_x, width)
        shown = min(width, self.scrollable_content_region.width)  # (not under the scrollbar)
        if y < len(self._lines) and shown > 1:
            whole = self._render_line_strip(y, self.rich_style)
            if whole.cell_length > scroll_x + shown:
                strip = Strip([*strip.crop(0, shown - 1), Segment("…", self.rich_style),
                               *strip.crop(shown, width)], width)
        return strip


class LogScreen(Screen[None]):
    """The tail of one target's broker log; `describe` gives the run's description as it is
    now (a live run's fills in once its brokers are up)."""

    DEFAULT_CSS = """
    LogScreen #log-title { height: 1; background: $panel; }
    LogScreen #log-lines { height: 1fr; border: round $primary; border-title-style: bold; }
    App:ansi LogScreen #log-lines { border: round ansi_blue; }
    LogScreen #log-filter { dock: bottom; display: none; }
    LogScreen #log-filter.-shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("slash", "filter", "filter", show=False),
                                             Binding("escape", "end_filter", "clear filter",
                                                     show=False)]

    @dataclass
    class Read(Message):
        lines: list[str]
        where: str
        unavailable: str

    def __init__(self, label: str, describe: Callable[[], RunDescription]) -> None:
        super().__init__()
        self.label = label
        self.describe = describe
        self.lines: list[str] = []
        self.where = ""
        self.unavailable = ""
        self.filter = ""
        self._reading = False
        self._docker = DockerLogs()

    def compose(self) -> ComposeResult:
        yield Static(id="log-title")
        yield LogLines(id="log-lines", highlight=False, max_lines=LOG_LINES)
        yield Input(placeholder="filter: lines holding this text (enter keeps it, esc clears it)",
                    id="log-filter")

    def on_mount(self) -> None:
        self.query_one("#log-lines", Log).border_title = f"{self.label} · broker log"
        self._show_title()
        self._poll()
        self.set_interval(REFRESH_S, self._poll)

    def on_unmount(self) -> None:
        self._docker.close()

    @property
    def filtering(self) -> bool:
        """The filter is being typed: every key goes to it."""
        return self.is_mounted and self.query_one("#log-filter", Input).has_focus

    def allows(self, action: str, parameters: tuple[object, ...]) -> bool:
        """Whether an app key acts here: none while the filter is typed; `/` (the app's rate
        ÷2) opens the filter instead."""
        return not self.filtering and (action, parameters) != ("scale_rate", (0.5,))

    # ---- reading (a worker thread; never two at once) -------------------------------------

    def _poll(self) -> None:
        if self._reading:
            return
        self._reading = True
        self._read(log_source(self.describe(), self.label))

    @work(thread=True, group="log-read")
    def _read(self, source: LogSource) -> None:
        try:
            if source.unavailable:
                self.post_message(self.Read([], "", source.unavailable))
            else:
                lines, where = read_log(source, self._docker)
                self.post_message(self.Read(lines, where, ""))
        finally:
            self._reading = False

    def on_log_screen_read(self, message: Read) -> None:
        changed = (message.lines, message.unavailable) != (self.lines, self.unavailable)
        added = None if message.unavailable or self.unavailable else appended(self.lines,
                                                                               message.lines)
        self.lines, self.where, self.unavailable = message.lines, message.where, message.unavailable
        if added is not None:
            # only the new lines: a user scrolled back up stays where they read
            self.query_one("#log-lines", Log).write_lines(matching(added, self.filter))
        elif changed:
            self._show_lines()
        self._show_title()

    # ---- showing -------------------------------------------------------------------------

    def _show_lines(self) -> None:
        log = self.query_one("#log-lines", Log)
        log.clear()
        if self.unavailable:
            log.write_line(self.unavailable)
            return
        log.write_lines(matching(self.lines, self.filter))

    def _show_title(self) -> None:
        self.query_one("#log-title", Static).update(Text.assemble(
            (" LOG ", "bold reverse"), f" {self.label} · ", (HINT, "dim"), no_wrap=True,
            overflow="ellipsis"))
        if self.filter:
            state = (f"filter {self.filter!r}: {len(matching(self.lines, self.filter))} of "
                     f"{len(self.lines)} lines")
        else:
            state = f"last {len(self.lines)} lines" if self.lines else ""
        self.query_one("#log-lines", Log).border_subtitle = " · ".join(
            part for part in (state, self.where) if part)

    # ---- the filter ----------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#log-filter", Input)
        box.add_class("-shown")
        box.focus()

    def action_end_filter(self) -> None:
        """Esc while typing the filter: clear it and close it."""
        box = self.query_one("#log-filter", Input)
        box.value = ""
        box.remove_class("-shown")
        self.query_one("#log-lines", Log).focus()

    @on(Input.Changed, "#log-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter = event.value
        self._show_lines()
        self._show_title()

    @on(Input.Submitted, "#log-filter")
    def _filter_kept(self, event: Input.Submitted) -> None:
        self.query_one("#log-lines", Log).focus()
        if not event.value:
            event.input.remove_class("-shown")
