"""The dashboard's key table: the single source of its bindings, footer, help screen and
command palette entries."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key:
    """One command and the keys that run it. `keys` are Textual key names; `shown` is how
    each is written on screen (same order)."""

    keys: tuple[str, ...]
    shown: tuple[str, ...]
    action: str  # an action of the App, as in a Textual binding: "name" or "name(args)"
    label: str  # short, for the footer and the palette
    help: str  # one sentence, for the help screen
    footer: bool = True
    same_line: bool = False  # the help screen lists it on the line of the key before it
    steers: bool = False  # it changes the run: offered only while the run goes on

    def binding(self) -> Binding:
        # priority: the keys work on every screen, including the help screen
        return Binding(",".join(self.keys), self.action, self.label, show=self.footer,
                       key_display=self.shown[0], priority=True)


# keys of the live dashboard and of a replay alike: how the charts and the detail show
VIEW_KEYS: tuple[Key, ...] = (
    Key(("enter",), ("enter",), "detail", "detail",
        "Detail: partitions, consumers, brokers, events.", footer=False),
    Key(("w",), ("w",), "cycle_window", "window", "Chart window: run length, 1 min, 5 min, whole run.",
        footer=False),
    Key(("g",), ("g",), "next_charts", "charts",
        "Next charts, where a column has no room for all four.", footer=False),
    Key(("y",), ("y",), "toggle_scale", "y scale",
        "Selected column: shared y scale ↔ its own.", footer=False),
    Key(("o",), ("o",), "sort", "sort", "Detail: next sort of partitions.", footer=False),
    Key(("O",), ("O",), "sort_consumers", "sort consumers", "of consumers.", footer=False,
        same_line=True),
    Key(("x",), ("x",), "save_screen", "screenshot",
        "Save the screen as SVG in the run directory.", footer=False),
    Key(("v",), ("v",), "compare", "compare",
        "Every target on one chart per metric (v again closes).", footer=False),
    Key(("i",), ("i",), "metadata", "metadata", "Targets' metadata.", footer=False),
)

# One line of help each (or a share of one): the help screen lists them all inside its border
# at 80×24 (the README has the details).
KEY_TABLE: tuple[Key, ...] = (
    Key(("q", "ctrl+c", "ctrl+q"), ("q", "ctrl+c", "ctrl+q"), "stop", "stop",
        "End the run; again skips the drain; then quit."),
    Key(("p",), ("p",), "toggle_pause", "pause", "Freeze the columns (collection goes on)."),
    Key(("question_mark",), ("?",), "help", "help", "Show or close this help."),
    Key(("escape",), ("esc",), "close", "back", "Close this help or the view shown.",
        footer=False),
    Key(("left", "shift+tab"), ("←", "shift+tab"), "select(-1)", "previous target",
        "Select the target to the left.", footer=False),
    Key(("right", "tab"), ("→", "tab"), "select(1)", "next target",
        "Select the target to the right.", footer=False),
    *VIEW_KEYS,
    Key(("l",), ("l",), "logs", "broker log", "Broker log, live (/ filters).", footer=False,
        same_line=True),
    Key(("a",), ("a",), "toggle_scope", "all/one",
        "Keys act on the selected target, or on all.", footer=False, steers=True),
    Key(("plus",), ("+",), "scale_rate(1.25)", "rate ×1.25",
        "Rate ×1.25 (no slot dropped).", footer=False, steers=True),
    Key(("minus",), ("-",), "scale_rate(0.8)", "rate ÷1.25", "Rate ÷1.25.", footer=False,
        same_line=True, steers=True),
    Key(("asterisk",), ("*",), "scale_rate(2)", "rate ×2", "Rate ×2.", footer=False,
        steers=True),
    Key(("slash",), ("/",), "scale_rate(0.5)", "rate ÷2", "Rate ÷2.", footer=False,
        same_line=True, steers=True),
    Key(("r",), ("r",), "ask_rate", "rate", "Type a rate in msg/s, or max.", steers=True),
    Key(("m",), ("m",), "toggle_max_rate", "max rate", "Fixed rate ↔ maximum rate.",
        footer=False, steers=True),
    Key(("s",), ("s",), "toggle_producers", "producers", "Stop or start the producers.",
        steers=True),
    Key(("c",), ("c",), "toggle_consumers", "consumers",
        "Stop or start the consumers (backlog, drain).", steers=True),
    Key(("f",), ("f",), "fault", "fault",
        "Fault a broker: pause, resume, kill, start, restart.", steers=True),
)

BINDINGS: list[Binding] = [key.binding() for key in KEY_TABLE]
# the actions that change the run: none of them once it has ended
STEERING: frozenset[str] = frozenset(key.action.partition("(")[0] for key in KEY_TABLE
                                     if key.steers)

# A recorded run shown again (`streambench replay`): the same view keys, the time keys of a
# player instead of the run's controls.
REPLAY_KEY_TABLE: tuple[Key, ...] = (
    Key(("q", "ctrl+c", "ctrl+q"), ("q", "ctrl+c", "ctrl+q"), "stop", "quit", "Quit the replay."),
    Key(("space", "p"), ("space", "p"), "toggle_play", "play/pause", "Play or pause."),
    Key(("left", "left_square_bracket"), ("←", "["), "seek(-10)", "-10 s", "Back 10 seconds.",
        footer=False),
    Key(("right", "right_square_bracket"), ("→", "]"), "seek(10)", "+10 s",
        "Forward 10 seconds.", footer=False),
    Key(("home",), ("home",), "seek_start", "start", "To the start of the run.", footer=False),
    Key(("end",), ("end",), "seek_end", "end", "To the end of the run.", footer=False,
        same_line=True),
    Key(("n",), ("n",), "next_event", "next event", "Jump to the next event of the run."),
    Key(("1",), ("1",), "speed(1)", "1×", "Play at real time.", footer=False),
    Key(("2",), ("2",), "speed(10)", "10×", "Play 10 times faster.", footer=False,
        same_line=True),
    Key(("3",), ("3",), "speed(60)", "60×", "Play 60 times faster (a minute a second)."),
    Key(("shift+tab",), ("shift+tab",), "select(-1)", "previous target",
        "Select the target to the left.", footer=False),
    Key(("tab",), ("tab",), "select(1)", "next target", "Select the target to the right.",
        footer=False),
    Key(("question_mark",), ("?",), "help", "help", "Show or close this help."),
    Key(("escape",), ("esc",), "close", "back", "Close this help or the view shown.",
        footer=False),
    *VIEW_KEYS,
    Key(("l",), ("l",), "logs", "broker log",
        "Selected target's broker log as the run kept it (/ filters).", footer=False),
)

REPLAY_BINDINGS: list[Binding] = [key.binding() for key in REPLAY_KEY_TABLE]

# The launcher (`streambench` alone, `streambench run` without a target): its fields take
# letters, so its keys are control keys.
LAUNCHER_KEY_TABLE: tuple[Key, ...] = (
    Key(("ctrl+r",), ("^r",), "start", "start", "Start the run with these settings."),
    Key(("ctrl+t",), ("^t",), "add_target", "add target",
        "Add a target picked from the platforms; type its options after it."),
    Key(("ctrl+o",), ("^o",), "pick_workload", "workload", "Pick a bundled workload."),
    Key(("ctrl+y",), ("^y",), "copy_command", "copy",
        "Copy the command line to the clipboard."),
    Key(("f1",), ("f1",), "help", "help", "Show these keys (esc closes them)."),
    Key(("escape",), ("esc",), "back", "back",
        "Back to the runs of this session (when there are some).", footer=False),
    Key(("ctrl+q",), ("^q",), "quit_session", "quit",
        "Quit; the command line is left in the terminal."),
)

# The end of a run in a session: the runs so far side by side, and what to do next.
END_KEY_TABLE: tuple[Key, ...] = (
    Key(("r",), ("r",), "again", "run again", "Run again with the same settings."),
    Key(("e",), ("e",), "change", "change", "Change the settings and run (the launcher)."),
    Key(("o",), ("o",), "report", "report", "Write and show the report of the last run."),
    Key(("a",), ("a",), "report_all", "report all",
        "Write and show one report over every run of the session."),
    Key(("d",), ("d",), "dashboard", "dashboard",
        "Back to the last run's dashboard (q returns here).", footer=False),
    Key(("question_mark",), ("?",), "help", "help", "Show or close this help."),
    Key(("q", "ctrl+q", "ctrl+c"), ("q", "ctrl+q", "ctrl+c"), "quit_session", "quit",
        "Quit; every run's summary and command line are left in the terminal."),
)

# A report shown in the terminal.
REPORT_KEY_TABLE: tuple[Key, ...] = (
    Key(("escape", "q"), ("esc", "q"), "back", "back", "Back to the runs of the session."),
)

# A suite (`streambench suite`): its cells run by themselves; the keys stop it or look around.
SUITE_KEY_TABLE: tuple[Key, ...] = (
    Key(("q", "ctrl+c", "ctrl+q"), ("q", "ctrl+c", "ctrl+q"), "stop", "stop/quit",
        "Stop as Ctrl-C does: the cell finishes its files, resumable (again: no drain). "
        "At the end: quit."),
    Key(("question_mark",), ("?",), "help", "help", "Show or close this help."),
    Key(("escape",), ("esc",), "close", "back", "Close this help.", footer=False),
    Key(("up",), ("↑",), "scroll(0,-1)", "up", "Scroll the matrix up", footer=False),
    Key(("down",), ("↓",), "scroll(0,1)", "down", "down", footer=False, same_line=True),
    Key(("left",), ("←",), "scroll(-8,0)", "left", "left", footer=False, same_line=True),
    Key(("right",), ("→",), "scroll(8,0)", "right", "right", footer=False, same_line=True),
)
