"""The key reference, generated from the key tables of tui/keys.py (the one source of the
dashboard's bindings, footer, help screen and command palette): docs/reference/keys.md."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# (title, name of the table in tui.keys, where it applies)
TABLES = (
    ("The dashboard", "KEY_TABLE", "a live run (`streambench run` in a terminal)"),
    ("Replay", "REPLAY_KEY_TABLE", "`streambench replay RUN_DIR`"),
    ("The launcher", "LAUNCHER_KEY_TABLE", "`streambench` alone, or `streambench run` without a TARGET"),
    ("The end of a run in a session", "END_KEY_TABLE", "the runs of a session side by side"),
    ("A report shown in the terminal", "REPORT_KEY_TABLE", "a session's report"),
    ("A suite", "SUITE_KEY_TABLE", "`streambench suite` in a terminal"),
)
# Textual's command palette, which lists every command of a screen's key table with its help
PALETTE = ("^p", "palette", "The command palette: every command of the key table, searchable.")


def tables() -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(title, where, [(keys as shown, label, help)]) per key table, the palette's key added to
    the screens that have a palette."""
    from tui import keys

    out = []
    for title, name, where in TABLES:
        rows = [(" ".join(key.shown), key.label, key.help) for key in getattr(keys, name)]
        if name != "SUITE_KEY_TABLE" and name != "REPORT_KEY_TABLE":
            rows.append(PALETTE)
        out.append((title, where, rows))
    return out


def shown_keys() -> set[str]:
    """Every key as the screens write it, over every table, and the palette's."""
    found = {PALETTE[0]}
    for _, _, rows in tables():
        for shown, _, _ in rows:
            found.update(shown.split())
    return found


def keys_reference() -> str:
    out = ["# Key reference", "",
           "Generated from the key tables of `tui/keys.py` when the docs are built: the same "
           "tables give each screen its bindings, its footer, its `?` help and its command "
           "palette entries.", ""]
    for title, where, rows in tables():
        out += [f"## {title}", "", f"In {where}.", "", "| key | command | what it does |", "|---|---|---|"]
        for shown, label, help_ in rows:
            keys_ = " ".join(f"`{k}`" for k in shown.split())
            out.append(f"| {keys_} | {label} | {help_.replace('|', chr(92) + '|')} |")
        out.append("")
    return "\n".join(out)
