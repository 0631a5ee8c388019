"""The README and the docs name only what exists: every `--option` is one of the command line's
(or of another tool named in FOREIGN_OPTIONS), every TARGET's platform is registered and its
options are the platform's, every `streambench …` command line in them parses, the README's key
table is the dashboard's key table (every key, no other), and every repository path named is
there. Each check is also run on made-up text, to show that it fails."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest

from loadgen.core.interventions import NETWORK_ACTIONS

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_LIMIT = 12_288
DOCS = [README, ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
# options of other tools that the docs name beside their tool
FOREIGN_OPTIONS = {
    "--bridge": "dockerd", "--iptables": "dockerd", "--network": "docker build",
    "--no-stream": "docker stats", "--smp": "Redpanda", "--variant": "debootstrap",
    "--conf": "spark-submit", "--deploy-mode": "spark-submit", "--tls-port": "redis-server",
    "--pairs": "tests/bench/redis_consume.py", "--pc-processes": "tests/bench/kafka_produce.py",
    "--profile": "tests/bench/ray_coordinator_cost.py",
    "--total-rate": "tests/bench/ray_coordinator_cost.py",
    "--skip-two": "tests/bench/ray_coordinator_cost.py",
    "--without-before": "tests/bench/ray_coordinator_cost.py",
    "--snapshot-update": "pytest-textual-snapshot", "--strict": "mkdocs",
    "--head": "ray start", "--address": "ray start", "--port": "ray start",
    "--ray-client-server-port": "ray start", "--node-ip-address": "ray start",
    "--net": "unshare, nsenter",
}
# `word:thing` spans that are not TARGETs (Erlang functions named in the RabbitMQ notes)
# `file`, and interventions written like targets (partition@kafka-2: the broker it cuts)
NOT_TARGETS = {"file", *NETWORK_ACTIONS}
# spans that begin with the command's name but are values (run.json's settings sources)
NOT_COMMANDS = {"streambench default"}
# pages the docs build generates (docs/gen/hooks.py): linked from the docs, not in the checkout
GENERATED = ("reference/", "contributing.md")
PACKAGES = ("tui", "loadgen", "collectors", "analysis", "compose")
TOP = (*PACKAGES, "tests", "docs", ".ci")
ROOT_FILES = {"Makefile", "pyproject.toml", "LICENSE", "README.md", "CONTRIBUTING.md", "mkdocs.yml"}
TARGET = re.compile(r"^([a-z][a-z0-9-]*)(?::([^@\s`]*))?(?:@(\S+))?$")
PALETTE_KEY = "^p"


def _gen(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"streambench_docs_{name}",
                                                  ROOT / "docs" / "gen" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


OPTIONS = _gen("options")
KEYS = _gen("keys")


def code_spans(text: str) -> list[str]:
    """Inline code and the lines of fenced code blocks."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
    return inline + [line for block in blocks for line in block.splitlines()]


def unknown_options(text: str, known: set[str]) -> set[str]:
    found = set(re.findall(r"(?<![\w/-])--[a-z][a-z0-9-]*", text))
    return found - known - set(FOREIGN_OPTIONS)


def bad_targets(text: str, platforms: dict[str, set[str]]) -> set[str]:
    """TARGET-looking spans (`name:option…`, `name@address`) whose platform is not registered,
    or that give an option the platform does not have."""
    bad = set()
    for span in code_spans(text):
        for token in span.split():
            match = TARGET.match(token.strip(",;()"))
            if not match or (match.group(2) is None and match.group(3) is None):
                continue
            name, opts, _ = match.groups()
            if name in NOT_TARGETS:
                continue
            if opts is not None and (opts == "" or opts[0].isdigit() or opts.startswith("//")
                                     or opts == "…"):
                continue  # an image tag (redis:7.2.7), a URL, an elision
            if name not in platforms:
                bad.add(token)
                continue
            for item in (opts or "").split(","):
                option = item.split("=", 1)[0].split(".", 1)[0]
                if option and option.isidentifier() and option not in platforms[name]:
                    bad.add(token)
    return bad


def bad_commands(text: str, parser_factory: type[argparse.ArgumentParser],
                 platforms: Iterable[str]) -> set[str]:
    """`streambench …` lines that the real parser refuses, or whose TARGETs name no platform."""
    bad = set()
    names = set(platforms)
    for span in code_spans(text):
        line = span.split(" #", 1)[0].strip()
        placeholder = re.search(r"[\[…]|\.\.\.|RUN_DIR|\bNAME\b", line)
        if line in NOT_COMMANDS or not line.startswith("streambench ") or placeholder:
            continue
        argv = shlex.split(line)[1:]
        parser = OPTIONS.build_parser()
        if len(argv) == 1:  # a subcommand named in prose (`streambench report` turns …)
            if argv[0] not in {name.split()[0] for name, _, _ in OPTIONS.subcommands(parser)}:
                bad.add(line)
            continue
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            try:
                args = parser.parse_args(argv)
            except SystemExit:
                bad.add(line)
                continue
        for target in getattr(args, "targets", None) or []:
            if re.split(r"[:@]", target, maxsplit=1)[0] not in names:
                bad.add(line)
    return bad


def missing_paths(text: str, page: Path) -> set[str]:
    """Repository paths named in code spans or links that do not exist."""
    candidates = set()
    for span in code_spans(text):
        candidates.update(span.split())
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    missing = set()
    for link in links:
        if "://" in link or link.startswith("mailto:"):
            continue
        target = (page.parent / link).resolve()
        generated = page.is_relative_to(ROOT / "docs") and link.startswith(GENERATED)
        if not target.exists() and not generated:
            missing.add(link)
    for token in candidates:
        token = token.strip("`'\",;:()")
        if re.search(r"[<>*{}$|…]|NNN|\.\.\.", token) or "=" in token:
            continue
        first = token.split("/", 1)[0]
        path_like = (first in TOP and "/" in token) or token in ROOT_FILES
        if path_like and not (ROOT / token).exists():
            missing.add(token)
        dotted = re.fullmatch(r"(?:{})(?:\.\w+)+".format("|".join(PACKAGES)), token)
        if dotted and not _module_part_exists(token):
            missing.add(token)
    return missing


def _module_part_exists(dotted: str) -> bool:
    """`loadgen.core.stack.Stack`: some leading part names a module or package of the checkout,
    and the part after the package names a module in it or an attribute."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            return cut >= len(parts) - 1 or cut >= 2
    return False


def key_table_keys(text: str) -> set[str]:
    """The keys of the README's table under "Keys of the dashboard"."""
    section = text.split("## Keys of the dashboard", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            keys.update(re.findall(r"`([^`]+)`", row.split("|")[1]))
    return keys


def dashboard_keys() -> set[str]:
    from tui.keys import KEY_TABLE

    return {shown for key in KEY_TABLE for shown in key.shown} | {PALETTE_KEY}


@pytest.fixture(scope="module")
def platforms() -> dict[str, set[str]]:
    from loadgen.platforms import PLATFORMS

    return {name: set(platform.options) for name, platform in PLATFORMS.items()}


@pytest.fixture(scope="module")
def known_options() -> set[str]:
    return OPTIONS.option_names()


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_options_platforms_commands_and_paths_exist(page: Path, known_options: set[str],
                                                    platforms: dict[str, set[str]]) -> None:
    text = page.read_text(encoding="utf-8")
    assert unknown_options(text, known_options) == set()
    assert bad_targets(text, platforms) == set()
    assert bad_commands(text, argparse.ArgumentParser, platforms) == set()
    assert missing_paths(text, page) == set()


def test_readme_key_table_is_the_dashboards() -> None:
    assert key_table_keys(README.read_text(encoding="utf-8")) == dashboard_keys()


def test_key_reference_lists_every_table_and_the_palette() -> None:
    from tui import keys

    reference = KEYS.keys_reference()
    for _, name, _ in KEYS.TABLES:
        for key in getattr(keys, name):
            assert f"`{key.shown[0]}`" in reference
    assert f"`{PALETTE_KEY}`" in reference


def test_readme_is_short_and_names_every_platform(platforms: dict[str, set[str]]) -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= README_LIMIT
    for name in platforms:
        assert f"| `{name}` |" in text, f"{name} missing from the README's platforms table"


def test_dashboard_picture_is_the_snapshots() -> None:
    pictures = _gen("screenshot").PICTURES
    for name, source in pictures.items():
        copy = ROOT / "docs" / "images" / name
        assert copy.read_bytes() == source.read_bytes(), (
            f"docs/images/{name} differs from {source.relative_to(ROOT)}: "
            "run python docs/gen/screenshot.py")


def test_made_up_names_are_caught(known_options: set[str], platforms: dict[str, set[str]]) -> None:
    made_up = ("Run `streambench run redis --raet 5000` against `kafka-kraft:brokers=3`, "
               "`redis:nosuchoption=1` or `mqtt@HOST:1883`; see `tests/unit/test_no_such_file.py`, "
               "`loadgen.nosuchmodule.Thing` and [the guide](docs/no-such-page.md).")
    assert unknown_options(made_up, known_options) == {"--raet"}
    assert bad_targets(made_up, platforms) == {"kafka-kraft:brokers=3", "redis:nosuchoption=1",
                                                "mqtt@HOST:1883"}
    assert bad_commands(made_up, argparse.ArgumentParser, platforms) == {
        "streambench run redis --raet 5000"}
    assert bad_commands("`streambench run mqtt --rate 5`", argparse.ArgumentParser, platforms) == {
        "streambench run mqtt --rate 5"}
    assert missing_paths(made_up, README) == {"tests/unit/test_no_such_file.py",
                                              "loadgen.nosuchmodule.Thing", "docs/no-such-page.md"}
    table = "## Keys of the dashboard\n\n| key | does |\n|---|---|\n| `q` | stop |\n| `z` | nothing |\n"
    assert key_table_keys(table) != dashboard_keys()
    assert "z" in key_table_keys(table) - dashboard_keys()
