"""The key table is the only source of keys: the help screen lists every one of them, and the
app binds exactly them."""

from __future__ import annotations

import re

from textual.binding import Binding
from textual.command import CommandPalette

from tests.tui.recorded import LABELS, WORKLOAD
from tests.tui.screen import screen_lines, wait_until
from tui.app import DashboardApp
from tui.keys import KEY_TABLE
from tui.widgets import HelpScreen


async def test_help_lists_every_key_of_the_key_table() -> None:
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        text = "\n".join(screen_lines(app))
        for key in KEY_TABLE:
            first_words = " ".join(key.help.split()[:3])
            pattern = re.escape(", ".join(key.shown)) + r" +" + re.escape(first_words)
            assert re.search(pattern, text), f"help does not list {key.shown} ({key.action})"
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "help to close")


async def test_bindings_and_footer_come_from_the_key_table() -> None:
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        declared = {name: binding.action for binding in DashboardApp.BINDINGS
                    if isinstance(binding, Binding) for name in binding.key.split(",")}
        assert declared == {name: key.action for key in KEY_TABLE for name in key.keys}
        active = {name: binding.action for name, (_, binding, _, _) in app.active_bindings.items()}
        for key in KEY_TABLE:
            if key.action != "close":  # only active while the help or the detail is shown
                assert all(active.get(name) == key.action for name in key.keys), key
        footer = screen_lines(app)[-1]
        for key in KEY_TABLE:
            if key.footer:
                assert f"{key.shown[0]} {key.label}" in footer


async def test_q_quits_when_there_is_no_run() -> None:
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await wait_until(pilot, lambda: not app.is_running, "the app to quit")
    assert app.return_value is None


async def test_palette_offers_the_key_table_commands_instead_of_textual_quit() -> None:
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        titles = {command.title for command in app.get_system_commands(app.screen)}
    assert {key.label for key in KEY_TABLE if key.footer} <= titles
    assert "Quit" not in titles


async def test_escape_still_closes_the_command_palette() -> None:
    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), "the palette")
        await pilot.press("p", "a")  # typed into the palette, not taken as keys of the table
        await pilot.pause()
        assert not app.status.paused
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette),
                         "the palette to close")


async def test_replay_help_lists_its_own_keys_and_binds_no_run_controls(tmp_path) -> None:
    from tests.tui.recorded import write_recorded_run
    from tui.bench.recording import load_recording
    from tui.keys import REPLAY_KEY_TABLE
    from tui.replay import ReplayApp

    app = ReplayApp(load_recording(write_recorded_run(tmp_path / "run")), playing=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
        text = "\n".join(screen_lines(app))
        for key in REPLAY_KEY_TABLE:
            first_words = " ".join(key.help.split()[:3])
            pattern = re.escape(", ".join(key.shown)) + r" +" + re.escape(first_words)
            assert re.search(pattern, text), f"help does not list {key.shown} ({key.action})"
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), "help to close")
        bound = {name for name in app.active_bindings}
        assert {"r", "f", "plus", "s", "c"}.isdisjoint(bound)  # nothing to steer in a replay
        assert {"space", "left", "right", "n", "3", "enter"} <= bound


async def test_enter_in_the_palette_is_the_palette_s() -> None:
    from tui.detail import DetailScreen

    app = DashboardApp(None, LABELS, WORKLOAD)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), "the palette")
        await pilot.press(*"help", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help from the palette")
        assert not any(isinstance(s, DetailScreen) for s in app.screen_stack)
