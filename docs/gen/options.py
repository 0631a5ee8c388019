"""The option reference, generated from the command line's parser and the platform registry so
that it cannot drift from the code: docs/reference/cli.md and docs/reference/platforms.md.

The docs build makes these pages in memory (docs/gen/hooks.py); `python docs/gen/options.py
[DIR]` writes them to DIR (default docs/reference) to read them without building the site."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# where the parser's builder lives: the command line's module, or the module it was split into
PARSER_MODULES = ("tui.bench.parser", "tui.cli", "tui.parser")


def build_parser() -> argparse.ArgumentParser:
    for name in PARSER_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        if hasattr(module, "build_parser"):
            parser: argparse.ArgumentParser = module.build_parser()
            return parser
    raise ImportError(f"no build_parser in any of {', '.join(PARSER_MODULES)}")


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """(full name, parser, one-line help) of every subcommand, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")
                for inner, subsub, help_ in subcommands(sub):
                    yield f"{name} {inner}", subsub, help_


def option_names(parser: argparse.ArgumentParser | None = None) -> set[str]:
    """Every `--option` of every subcommand (and of the top level)."""
    parser = parser or build_parser()
    names: set[str] = set()
    for p in [parser, *(sub for _, sub, _ in subcommands(parser))]:
        for action in p._actions:
            names.update(s for s in action.option_strings if s.startswith("--"))
    return names


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, [], argparse.SUPPRESS) or isinstance(
            action, (argparse._StoreTrueAction, argparse._HelpAction)):
        return ""
    return f"`{action.default}`"


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            if action.nargs == "?":
                metavar = f"[={action.metavar}]"
            name = ", ".join(f"`{s}{metavar}`" for s in action.option_strings)
        else:
            name = f"`{action.metavar or action.dest}`"
        help_ = (action.help or "").replace("%%", "%")
        if action.choices and action.option_strings:
            help_ += f" (one of {', '.join(str(c) for c in action.choices)})"
        rows.append(f"| {name} | {_default(action)} | {_cell(help_)} |")
    return rows


def cli_reference() -> str:
    parser = build_parser()
    out = ["# Command-line reference", "",
           "Generated from the parser of `streambench` (`build_parser`) when the docs are built; "
           "`streambench COMMAND --help` prints the same.", "",
           "```", parser.format_usage().strip(), "```", ""]
    for name, sub, help_ in subcommands(parser):
        out += [f"## streambench {name}", "", _cell(help_) + ".", "",
                "```", sub.format_usage().strip(), "```", ""]
        if sub.description:
            out += ["```text", sub.description.strip("\n"), "```", ""]
        out += [*_options_table(sub), ""]
    return "\n".join(out)


def platforms_reference() -> str:
    from loadgen.platforms import PLATFORMS

    out = ["# Platform reference", "",
           "Generated from the platform registry (the `streambench.platforms` entry points) when the "
           "docs are built; `streambench platforms` prints the same. A TARGET is "
           "`PLATFORM[:OPTION[=VALUE],...][@ADDRESS]` ([Usage](../usage.md#targets)).", "",
           "| platform | what it is | runtimes | `@ADDRESS` |", "|---|---|---|---|"]
    for name, platform in PLATFORMS.items():
        out.append(f"| [`{name}`](#{name}) | {_cell(platform.summary)} | "
                   f"{', '.join(platform.runtimes)} | `{platform.address_example}` |")
    out.append("")
    for name, platform in PLATFORMS.items():
        out += [f"## {name}", "", _cell(platform.summary), "",
                f"Runtimes: {', '.join(platform.runtimes)}. "
                f"Address: `{name}@{platform.address_example}`.", ""]
        if platform.optional_client is not None:
            out += [f"Client: {platform.optional_client.what}, from the "
                    f"`{platform.optional_client.extra}` extra.", ""]
        faults = {r: platform.fault_actions(r) for r in platform.runtimes}
        if any(faults.values()):
            out += ["Faults: " + "; ".join(f"{r}: {', '.join(f) or 'none'}" for r, f in faults.items())
                    + ".", ""]
        out += ["| option | default | meaning |", "|---|---|---|"]
        for option, spec in platform.options.items():
            shown = option + (".NAME=VALUE" if spec.setting is not None else "")
            default = "" if spec.default in (None, "") else f"`{spec.default}`"
            help_ = spec.help + (f" (one of {', '.join(spec.choices)})" if spec.choices else "")
            out.append(f"| `{shown}` | {default} | {_cell(help_)} |")
        out.append("")
    return "\n".join(out)


def sibling(name: str) -> ModuleType:
    """A module of docs/gen by its file name (docs/gen is no package, and `keys` is a common name)."""
    spec = importlib.util.spec_from_file_location(f"streambench_docs_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pages() -> dict[str, str]:
    """Path under docs/ -> page text."""
    keys_reference: str = sibling("keys").keys_reference()
    return {"reference/cli.md": cli_reference(), "reference/platforms.md": platforms_reference(),
            "reference/keys.md": keys_reference}


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else ROOT / "docs"
    for rel, text in pages().items():
        path = out / rel if not argv else out / Path(rel).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
