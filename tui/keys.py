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

    def binding(self) -> Binding:
        # priority: the keys work on every screen, including the help screen
        return Binding(",".join(self.keys), self.action, self.label, show=self.footer,
                       key_display=self.shown[0], priority=True)


KEY_TABLE: tuple[Key, ...] = (
    Key(("q", "ctrl+c", "ctrl+q"), ("q", "ctrl+c", "ctrl+q"), "stop", "stop",
        "End the run: the load stops, consumers drain, files are written. "
        "Press again to skip the drain. Once the run is over (or with no run), quit."),
    Key(("p",), ("p",), "toggle_pause", "pause",
        "Freeze or unfreeze the target columns (the status line keeps going). Collection "
        "goes on while frozen; resuming shows everything that arrived meanwhile."),
    Key(("question_mark",), ("?",), "help", "help",
        "Show or close this help."),
    Key(("escape",), ("esc",), "close_help", "close help", "Close this help.", footer=False),
    Key(("left",), ("←",), "scroll_columns(-1)", "scroll left",
        "Scroll the targets sideways when more are running than fit the width.", footer=False),
    Key(("right",), ("→",), "scroll_columns(1)", "scroll right",
        "Scroll the other way.", footer=False),
)

BINDINGS: list[Binding] = [key.binding() for key in KEY_TABLE]
