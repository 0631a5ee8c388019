"""The launcher: the start screen of `streambench` alone and of `streambench run` without a
target. Targets, workload and the usual overrides are typed as on the command line and checked
by the same parser and functions `streambench run` uses, each error beside its field; the
equivalent command line is always shown, so an interactive session can be scripted."""

from __future__ import annotations

import argparse
import asyncio
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar, NoReturn

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from loadgen.core.errors import StreambenchError
from tui.keys import LAUNCHER_KEY_TABLE, Key
from tui.widgets import HelpScreen, KeyLine

# the overrides the launcher has a field for: (name, flag, caption, placeholder)
OVERRIDES: tuple[tuple[str, str, str, str], ...] = (
    ("rate", "--rate", "rate msg/s", "1000|max"),
    ("size", "--size", "size B", "1024"),
    ("duration", "--duration", "duration s", "60"),
    ("partitions", "--partitions", "partitions", "1"),
    ("producers", "--producers", "producers", "1"),
    ("consumers", "--consumers", "consumers", "1"),
)
# the destinations of `streambench run`'s options the fields stand for
_FIELD_DESTS = {"targets", "workload", "rate", "max_rate", "size", "duration", "partitions",
                "producers", "consumers", "help"}
TARGET_PLACEHOLDER = "PLATFORM[:OPTION=VALUE,...][@ADDRESS]"


class UsageError(StreambenchError):
    """What `streambench run` would refuse on its command line, with the same words."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        # --help asked for among the options: not the launcher's to print
        raise UsageError("--help: every option is in `streambench run --help`")

    def print_help(self, file: Any = None) -> None:
        pass


def _run_parser() -> argparse.ArgumentParser:
    from tui.bench.parser import build_parser

    parser = build_parser(_RaisingParser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["run"]
    raise AssertionError("streambench has no run command")


def parse_run(argv: list[str]) -> argparse.Namespace:
    """`streambench run` ARGV as its command line reads it; UsageError with its message."""
    from tui.bench.parser import build_parser

    return build_parser(_RaisingParser).parse_args(argv)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass
class LaunchSettings:
    """What the launcher's fields hold, as typed, and the other options of `streambench run`
    given with it (kept as they are and passed to every run)."""

    targets: list[str] = field(default_factory=list)
    workload: str = ""
    overrides: dict[str, str] = field(default_factory=dict)  # by OVERRIDES name
    extra: list[str] = field(default_factory=list)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LaunchSettings:
        """The fields filled from `streambench run`'s options (its targets, if any)."""
        overrides = {name: _text(getattr(args, name)) for name, *_ in OVERRIDES
                     if getattr(args, name, None) is not None}
        if getattr(args, "max_rate", None):
            overrides["rate"] = "max" if args.max_rate == "fast" else args.max_rate
        extra: list[str] = []
        for action in _run_parser()._actions:
            if action.dest in _FIELD_DESTS or not action.option_strings:
                continue
            value = getattr(args, action.dest, action.default)
            if value == action.default or value is None:
                continue
            flag = action.option_strings[-1]
            if action.nargs == 0:
                extra.append(flag)
            elif isinstance(value, list):
                for item in value:
                    extra += [flag, _text(item)]
            else:
                extra += [flag, _text(value)]
        return cls(list(getattr(args, "targets", None) or []), getattr(args, "workload", None) or "",
                   overrides, extra)

    def argv(self) -> list[str]:
        """`streambench run`'s arguments for these settings (empty fields left out)."""
        out = ["run", *(t.strip() for t in self.targets if t.strip())]
        if self.workload.strip():
            out += ["--workload", self.workload.strip()]
        for name, flag, *_ in OVERRIDES:
            value = self.overrides.get(name, "").strip()
            if not value:
                continue
            if name == "rate" and value.lower() in ("max", "fast"):
                out.append("--max-rate")
            elif name == "rate" and value.lower() == "search":
                out.append("--max-rate=search")
            else:
                out += [flag, value]
        return out + self.extra

    def command_line(self) -> str:
        return "streambench " + shlex.join(self.argv())

    # ---- checks, with the command line's own words ---------------------------------------

    def base_args(self) -> argparse.Namespace:
        """The options outside the fields (--runtime, --driver, …) as the run reads them."""
        return parse_run(["run", *self.extra])

    def extra_error(self) -> str | None:
        """The other options: as `streambench run` takes them, none of them a field's."""
        try:
            args = parse_run(["run", *self.extra])
        except UsageError as exc:
            return str(exc)
        if args.targets:
            return f"{args.targets[0]}: targets go in the target fields"
        given = [f"--{name.replace('_', '-')}" for name in sorted(_FIELD_DESTS - {"targets", "help"})
                 if getattr(args, name, None) is not None]
        if given:
            return f"{given[0]} has a field of its own above"
        if args.out is not None:
            return "--out names one run's directory: each run of the launcher gets its own"
        if args.headless:
            return "--headless: the launcher's runs are shown in the dashboard"
        return None

    def override_error(self, name: str) -> str | None:
        value = self.overrides.get(name, "").strip()
        if not value:
            return None
        try:
            parse_run(LaunchSettings(overrides={name: value}).argv())
        except UsageError as exc:
            return str(exc)
        return None

    def workload_error(self) -> str | None:
        from loadgen.core.workload import load_workload

        if not self.workload.strip():
            return None
        try:
            load_workload(self.workload.strip())
        except StreambenchError as exc:
            return str(exc)
        return None

    def target_error(self, spec: str) -> str | None:
        from tui.bench.runbuild import check_target

        if not spec.strip():
            return None
        args = self.base_args()  # UsageError: the other options' field says why
        try:
            check_target(spec.strip(), args)
        except StreambenchError as exc:
            return str(exc)
        return None

    def build(self) -> tuple[Any, Any]:
        """The Run and its baselines, as `streambench run` builds them; raises its error."""
        from tui.bench.runbuild import build_run

        argv = self.argv()
        args = parse_run(argv)
        if not args.targets:
            raise UsageError("no target: add one (^t picks a platform)")
        return build_run(args, argv)


def describe_platform(name: str) -> str:
    """A platform's summary and its TARGET options, for the hint under a target field."""
    from loadgen.platforms import PLATFORMS

    platform = PLATFORMS.get(name)
    if platform is None:
        return f"platforms: {', '.join(PLATFORMS)}"
    # (an option that is only ever refused, password= for one, is not offered)
    options = [name + ("=" + "|".join(opt.choices) if opt.choices else "")
               for name, opt in platform.options.items() if not opt.refuse]
    return f"{platform.name}: {platform.summary}\noptions: {', '.join(options)}"


def _extra_error(text: str, settings: LaunchSettings) -> str | None:
    try:
        shlex.split(text)
    except ValueError as exc:
        return f"cannot split the options: {exc}"
    return settings.extra_error()


class PickScreen(ModalScreen[str | None]):
    """One item out of a list (a platform, a bundled workload); Enter picks, Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [("escape", "cancel", "cancel")]

    def __init__(self, title: str, items: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.items = items

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(f"{self.title_text} (Enter picks, Esc cancels)")
            yield OptionList(*(Option(Text.assemble((name, "bold"), "  ", about), id=name)
                               for name, about in self.items), id="items")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


def target_input(spec: str) -> Input:
    """A target's field. The launcher's fields keep their text on focus (not selected, so the
    next key adds to a picked platform instead of replacing it)."""
    from loadgen.platforms import PLATFORMS

    return Input(spec, placeholder=TARGET_PLACEHOLDER, classes="target",
                 suggester=SuggestFromList(list(PLATFORMS)), select_on_focus=False)


class Form(VerticalScroll, can_focus=False):
    """The fields, scrolled to the focused one; Tab goes from field to field only."""


class Problem(Static):
    """The error of the field above it, or nothing (then it takes no room)."""

    def show_error(self, message: str | None) -> None:
        self.update(Text("✗ " + message, style="bold") if message else "")
        self.set_class(bool(message), "-shown")


@dataclass
class Started:
    """The launcher's answer: the settings, the Run built from them and its baselines."""

    settings: LaunchSettings
    run: Any
    baselines: Any


class LauncherScreen(Screen[None]):
    """The start screen. `on_start` receives what Start built (nothing is started here)."""

    BINDINGS: ClassVar[list[BindingType]] = [key.binding() for key in LAUNCHER_KEY_TABLE]
    KEYS: ClassVar[tuple[Key, ...]] = LAUNCHER_KEY_TABLE  # for the command palette

    def __init__(self, settings: LaunchSettings, on_start: Callable[[Started], Awaitable[None]],
                 on_back: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.settings = replace(settings, targets=list(settings.targets) or [""],
                                overrides=dict(settings.overrides), extra=list(settings.extra))
        self.on_start = on_start
        self.on_back = on_back  # back to the runs of the session, when there are some
        self.starting = False

    # ---- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        from loadgen.core.workload import bundled_workloads

        yield Static(Text(" NEW RUN ", style="bold reverse") + Text(
            "  type targets and settings as on the command line · f1 help"), id="title")
        with Form(id="form"):
            yield Label("targets  (^t picks a platform; an empty field is left out)",
                        classes="caption")
            with Vertical(id="targets"):
                for spec in self.settings.targets:
                    yield from self._target_row(spec)
            yield Static(describe_platform(""), id="target-hint", classes="hint")
            yield Label("workload  (a bundled name, ^o lists them, or a YAML file)",
                        classes="caption")
            yield Input(self.settings.workload, placeholder="none: 1 topic, 1 partition, 1 kB",
                        suggester=SuggestFromList(bundled_workloads()), id="workload",
                        select_on_focus=False)
            yield Problem(id="workload-problem", classes="problem")
            yield Static("", id="workload-hint", classes="hint")
            with Horizontal(id="overrides"):
                for name, _flag, caption, placeholder in OVERRIDES:
                    with Vertical(classes="override"):
                        yield Label(caption, classes="caption")
                        yield Input(self.settings.overrides.get(name, ""), placeholder=placeholder,
                                    id=f"opt-{name}", select_on_focus=False)
            for name, *_ in OVERRIDES:  # under the row of fields, where a sentence fits
                yield Problem(id=f"opt-{name}-problem", classes="problem")
            yield Label("other options of streambench run  (e.g. --warmup 5 --runtime local)",
                        classes="caption")
            yield Input(shlex.join(self.settings.extra), placeholder="none", id="extra",
                        select_on_focus=False)
            yield Problem(id="extra-problem", classes="problem")
            yield Problem(id="problem", classes="problem")
        yield Static(id="command")
        yield KeyLine(LAUNCHER_KEY_TABLE)

    def _target_row(self, spec: str) -> ComposeResult:
        yield target_input(spec)
        yield Problem(classes="problem target-problem")

    def on_mount(self) -> None:
        self._show_command()  # (the first field takes the focus: AUTO_FOCUS)

    # ---- what the fields hold -----------------------------------------------------------

    def _target_inputs(self) -> list[Input]:
        return list(self.query("#targets > Input.target").results(Input))

    def _read(self) -> LaunchSettings:
        s = self.settings
        s.targets = [i.value for i in self._target_inputs()]
        s.workload = self.query_one("#workload", Input).value
        s.overrides = {name: self.query_one(f"#opt-{name}", Input).value for name, *_ in OVERRIDES}
        text = self.query_one("#extra", Input).value
        try:
            s.extra = shlex.split(text)
        except ValueError:  # an open quote, while it is typed
            s.extra = text.split()
        return s

    def _show_command(self) -> None:
        line = self._read().command_line()
        self.query_one("#command", Static).update(Text("$ " + line, style="bold"))

    def _problem_of(self, field_input: Input) -> Problem:
        if field_input.has_class("target"):
            parent = field_input.parent
            assert parent is not None
            siblings = list(parent.children)
            problem = siblings[siblings.index(field_input) + 1]
            assert isinstance(problem, Problem)
            return problem
        return self.query_one(f"#{field_input.id}-problem", Problem)

    async def _check_shown(self, field_input: Input) -> bool:
        """Check one field and show its error beside it; True when it is fine. The check runs
        in a thread: placing a target may ask the Docker engine."""
        s = self._read()
        s = replace(s, targets=list(s.targets), overrides=dict(s.overrides), extra=list(s.extra))
        value = field_input.value
        if field_input.has_class("target"):
            check: Callable[[], str | None] = partial(s.target_error, value)
        elif field_input.id == "workload":
            check = s.workload_error
        elif field_input.id == "extra":
            check = partial(_extra_error, field_input.value, s)
        else:
            check = partial(s.override_error, (field_input.id or "").removeprefix("opt-"))
        try:
            problem = await asyncio.to_thread(check)
        except UsageError:  # the other options do not parse: their field says why
            return False
        if field_input.is_attached and field_input.value == value:  # still what was checked
            self._problem_of(field_input).show_error(problem)
            if field_input.id == "workload":
                self._show_workload_hint()
        return problem is None

    def _check_later(self, field_input: Input) -> None:
        self.run_worker(self._check_shown(field_input), group=f"check-{id(field_input)}",
                        exclusive=True)

    def _show_workload_hint(self) -> None:
        from loadgen.core.workload import load_workload
        from tui.bench.runbuild import describe_workload

        hint = self.query_one("#workload-hint", Static)
        text = self.settings.workload.strip()
        if not text:
            hint.update("")
            return
        try:
            w = load_workload(text)
        except StreambenchError:
            hint.update("")
            return
        hint.update("\n".join([describe_workload(w), *w.warnings]))

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        self._show_command()
        if event.input.has_class("target"):
            self._show_target_hint(event.input)
        if self.starting or not self.is_attached:
            return
        # an error shown is checked again as the field changes: it goes once the field is
        # right, not at the next blur; the other options change how targets are checked
        self.query_one("#problem", Problem).show_error(None)
        fields = [event.input]
        if event.input.id == "extra":
            fields += self._target_inputs()
        for field_input in fields:
            if self._problem_of(field_input).has_class("-shown"):
                self._check_later(field_input)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self._check_later(event.input)
        self.focus_next()

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        if isinstance(event.widget, Input) and not self.starting and self.is_attached:
            self._check_later(event.widget)
            # the platform's options, only while a target is typed
            self.query_one("#target-hint", Static).display = False

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, Input) and event.widget.has_class("target"):
            self._show_target_hint(event.widget)

    def _show_target_hint(self, target: Input) -> None:
        platform = target.value.strip().partition("@")[0].partition(":")[0]
        hint = self.query_one("#target-hint", Static)
        hint.update(describe_platform(platform))
        hint.display = True

    # ---- actions ------------------------------------------------------------------------

    def action_add_target(self) -> None:
        from loadgen.platforms import PLATFORMS

        def picked(name: str | None) -> None:
            if name is None:
                return
            empty = [i for i in self._target_inputs() if not i.value.strip()]
            if empty:
                target = empty[0]
                target.value = name
            else:
                target = target_input(name)
                self.query_one("#targets", Vertical).mount(
                    target, Problem(classes="problem target-problem"))

            def to_the_end() -> None:
                target.focus()
                target.cursor_position = len(target.value)
                self._show_command()

            self.call_after_refresh(to_the_end)

        self.app.push_screen(PickScreen("platform", [(p.name, p.summary)
                                                     for p in PLATFORMS.values()]), picked)

    def action_pick_workload(self) -> None:
        from loadgen.core.workload import bundled_workloads, load_workload
        from tui.bench.runbuild import describe_workload

        def picked(name: str | None) -> None:
            if name is None:
                return
            box = self.query_one("#workload", Input)
            box.value = name
            box.focus()
            self._check_later(box)

        items = [(name, describe_workload(load_workload(name))) for name in bundled_workloads()]
        self.app.push_screen(PickScreen("bundled workload", items), picked)

    def action_copy_command(self) -> None:
        line = self._read().command_line()
        self.app.copy_to_clipboard(line)
        self.notify(f"copied: {line}", timeout=3)

    def action_help(self) -> None:
        self.app.push_screen(HelpScreen(LAUNCHER_KEY_TABLE))

    def action_back(self) -> None:
        if self.on_back is not None:
            self.on_back()

    def action_quit_session(self) -> None:
        self.app.exit()

    async def action_start(self) -> None:
        if self.starting:  # checking or building already (or started: this screen closes)
            return
        self.starting = True
        settings = self._read()
        general = self.query_one("#problem", Problem)
        general.show_error(None)
        fine = [await self._check_shown(i) for i in self.query(Input).results(Input)]
        if not all(fine):
            self.starting = False
            self._scroll_to_first_problem()
            return
        self.query_one("#command", Static).update(Text("starting: " + settings.command_line()))
        try:
            run, baselines = await asyncio.to_thread(settings.build)
        except Exception as exc:  # shown in place, in the words the command line would use
            self.starting = False
            general.show_error(str(exc) if isinstance(exc, StreambenchError)
                               else f"internal error: {type(exc).__name__}: {exc}")
            general.scroll_visible(animate=False)
            self._show_command()
            return
        chosen = replace(settings, targets=[t for t in settings.targets if t.strip()],
                         overrides=dict(settings.overrides), extra=list(settings.extra))
        # on the app's loop: starting the run closes this screen
        self.app.call_later(self.on_start, Started(chosen, run, baselines))

    def _scroll_to_first_problem(self) -> None:
        problems = self.query(".problem.-shown")
        if problems:
            problems.first().scroll_visible(animate=False)
