"""Reading what a dashboard shows: the lines of its screen as plain text, and a bounded wait."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.pilot import Pilot

# one run of text in Textual's SVG export: x and y in pixels, CHAR_WIDTH pixels per cell
_TEXT = re.compile(r'<text class="[^"]*-r\d+" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', re.S)
CHAR_WIDTH = 12.2


def screen_lines(app: App[Any]) -> list[str]:
    """The screen as lines of text, read back from the SVG screenshot."""
    rows: dict[float, dict[int, str]] = {}
    for x, y, content in _TEXT.findall(app.export_screenshot()):
        text = html.unescape(content).replace("\xa0", " ").rstrip("\n")
        rows.setdefault(float(y), {})[round(float(x) / CHAR_WIDTH)] = text
    lines = []
    for _, runs in sorted(rows.items()):
        line = ""
        for column, text in sorted(runs.items()):
            line = line.ljust(column) + text
        lines.append(line.rstrip())
    return lines


async def wait_until(pilot: Pilot[Any], predicate: Callable[[], bool], what: str,
                     timeout_s: float = 30.0) -> None:
    """Let the app run until `predicate()` holds; fail naming `what` after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await pilot.pause(0.05)
