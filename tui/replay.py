"""`streambench replay RUN_DIR`: a recorded run shown again in the dashboard, from its files.

No broker is started: the items of the run (tui.bench.recording) are fed to the same histories,
columns and event strip the live dashboard uses, by a replay clock that can play at 1×, 10×
or 60×, pause, seek and jump to the next event. The columns are repainted on a fixed frame
(at most four times a second), whatever the speed; going back in time rebuilds the histories
from the start of the run (a few thousand ticks take well under a second).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import ClassVar

from textual.binding import BindingType

from analysis.schema import SCHEMA_VERSION
from loadgen.core.events import PhaseChange, RunEvent
from loadgen.core.ticks import Phase, Tick
from loadgen.exporter import RunCollector
from tui import formatting as fmt
from tui.app import DashboardApp
from tui.bench.recording import Recording
from tui.history import Baseline, metric_values
from tui.keys import REPLAY_BINDINGS, REPLAY_KEY_TABLE, Key
from tui.metadata import RunDescription
from tui.widgets import StatusBar

FRAME_S = 0.25  # the replay clock's step and the repaint period: at most 4 repaints a second
SPEEDS = (1.0, 10.0, 60.0)
SEEK_S = 10.0


class ReplayStatusBar(StatusBar):
    """The status bar of a replay: where in the run, playing or paused, how fast, and what
    marks the recording (killed mid-way, older files)."""

    def __init__(self, app: ReplayApp, clock: Callable[[], int], id: str | None = None) -> None:
        super().__init__(app.status, clock, id=id)
        self.replay = app

    def _progress(self) -> str:
        r = self.replay
        where = (f"replay {fmt.duration(r.offset_s)} / {fmt.duration(r.recording.length_s)}"
                 f" · {'playing' if r.playing else 'paused'} {r.speed:g}×")
        parts = [where, *r.tags]
        if self.status.message:
            parts.append(self.status.message)
        return " · ".join(parts)


class ReplayApp(DashboardApp, inherit_bindings=False):
    """The dashboard over a Recording instead of a Run."""

    BINDINGS: ClassVar[list[BindingType]] = list(REPLAY_BINDINGS)
    KEYS: ClassVar[tuple[Key, ...]] = REPLAY_KEY_TABLE

    def __init__(self, recording: Recording, *, speed: float = 1.0, playing: bool = True,
                 monotonic: Callable[[], float] = time.monotonic,
                 baselines: dict[str, Baseline] | None = None,
                 metrics: RunCollector | None = None) -> None:
        """`metrics`: the collector of `replay --metrics`, fed the items as they are shown
        (cleared when the replay goes back in time)."""
        self.recording = recording
        self.metrics = metrics
        self.position_ns = recording.start_ns
        self.cursor = 0  # recording.items[:cursor] are shown
        self.speed = speed
        self.playing = playing
        self.monotonic = monotonic
        self._last_frame = monotonic()
        self._values: dict[int, tuple[float, ...]] = {}  # metric_values() by item index
        super().__init__(None, recording.labels, recording.workload,
                         clock=lambda: self.position_ns, baselines=baselines)
        self.run_dir = recording.run_dir

    def _make_status_bar(self, clock: Callable[[], int]) -> StatusBar:
        return ReplayStatusBar(self, clock, id="status")

    @property
    def offset_s(self) -> float:
        return (self.position_ns - self.recording.start_ns) / 1e9

    @property
    def tags(self) -> list[str]:
        """Short marks of the recording for the status line (the words stand without colour)."""
        r = self.recording
        tags = []
        if not r.complete:
            tags.append("KILLED: no end recorded")
        if r.schema_version < SCHEMA_VERSION:
            tags.append(f"files v{r.schema_version}")
        return tags

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(FRAME_S, self._frame)
        self.seek_to(self.position_ns)
        for note in self.recording.notes:
            self.notify(note, timeout=6)

    def keys_hint(self) -> str:
        return "esc back · o/O sort · space play/pause · w window · x screenshot · ? help"

    def run_description(self) -> RunDescription:
        return {**self.recording.meta, "run_dir": str(self.recording.run_dir)}

    # ---- the replay clock ---------------------------------------------------------------

    def _frame(self) -> None:
        now = self.monotonic()
        step_s = min(now - self._last_frame, 1.0)  # a stalled loop does not leap ahead
        self._last_frame = now
        if not self.playing:
            return
        target = self.position_ns + int(step_s * self.speed * 1e9)
        if target >= self.recording.end_ns:
            target = self.recording.end_ns
            self.playing = False
        self.seek_to(target)

    def seek_to(self, position_ns: int) -> None:
        """Show the run as it was at `position_ns` (clamped to the recording)."""
        r = self.recording
        position_ns = max(r.start_ns, min(r.end_ns, position_ns))
        if position_ns < self.position_ns or (self.cursor == 0 and position_ns == r.start_ns):
            self._restart()
        stop = bisect.bisect_right(r.times, position_ns)
        touched: set[str] = set()
        with self.batch_update():
            for i in range(self.cursor, stop):
                item = r.items[i]
                if self.metrics is not None:
                    self.metrics(item)
                if isinstance(item, Tick):
                    # a tick's chart values (an e2e percentile among them) are worked out once:
                    # going back in time replays the ticks again from the start
                    values = self._values.get(i)
                    if values is None:
                        values = self._values[i] = metric_values(item)
                    if self._take_tick(item, summarise=False, values=values):
                        touched.add(item.target)
                elif isinstance(item, PhaseChange):
                    self._take_phase(item)
                elif isinstance(item, RunEvent):
                    self._take_event(item)
            self.cursor = max(self.cursor, stop)
            self.position_ns = position_ns
            for label in touched:
                self.histories[label].summarise()
            self._events.refresh()
            self._repaint_columns()
            self._show_status()

    def _restart(self) -> None:
        if self.metrics is not None:
            self.metrics.clear()
        for history in self.histories.values():
            history.clear()
        self._events.clear()
        self.status.phase = Phase.STARTING
        self.status.phase_since_ns = None
        self.status.message = ""
        self.status.elapsed_s = 0.0
        self.status.rates.clear()
        self._mark_final(False)
        self.cursor = 0
        self.position_ns = self.recording.start_ns

    # ---- keys ---------------------------------------------------------------------------

    def action_stop(self) -> None:
        self.exit(None)

    def action_toggle_play(self) -> None:
        if not self.playing and self.position_ns >= self.recording.end_ns:
            self.seek_to(self.recording.start_ns)  # at the end, play starts again
        self.playing = not self.playing
        self._last_frame = self.monotonic()
        self._show_status()

    def action_speed(self, speed: float) -> None:
        self.speed = float(speed)
        self._show_status()

    def action_seek(self, seconds: float) -> None:
        self.seek_to(self.position_ns + int(float(seconds) * 1e9))

    def action_seek_start(self) -> None:
        self.seek_to(self.recording.start_ns)

    def action_seek_end(self) -> None:
        self.seek_to(self.recording.end_ns)

    def action_next_event(self) -> None:
        """To the next event of the run after the current position (phase changes included)."""
        r = self.recording
        start = bisect.bisect_right(r.times, self.position_ns)
        for item in r.items[start:]:
            if isinstance(item, RunEvent | PhaseChange):
                self.seek_to(item.time_ns)
                what = (f"{item.kind}: {item.detail}" if isinstance(item, RunEvent)
                        else f"phase {item.phase.value}")
                self.notify(f"event at {fmt.duration((item.time_ns - r.start_ns) / 1e9)}: {what}",
                            timeout=3)
                return
        self.notify("no event after this point", timeout=2)
