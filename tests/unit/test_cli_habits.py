"""The command line's habits, through the installed console script: --version, completion,
the platform and suite listings, units on every duration and size, "did you mean", and one
line with the documented exit code for each kind of bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tui.bench import exits, units

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "streambench"


def sb(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout_s, stdin=subprocess.DEVNULL)


def test_version() -> None:
    from importlib import metadata

    res = sb("--version")
    assert res.returncode == 0 and res.stdout == f"streambench {metadata.version('streambench')}\n"


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_name_every_command_and_run_flag(shell: str) -> None:
    res = sb("completion", shell)
    assert res.returncode == 0, res.stderr
    for word in ("platforms", "suite", "--rate", "--duration", "--headless", "--min-free-memory"):
        assert word in res.stdout, word
    if shell == "bash":  # bash itself completes with it: a flag of run, a command
        probe = ('source /dev/stdin; COMP_WORDS=(streambench run --ra); COMP_CWORD=2; '
                 '_shtab_streambench; echo "${COMPREPLY[@]}"; '
                 'COMP_WORDS=(streambench pla); COMP_CWORD=1; _shtab_streambench; '
                 'echo "${COMPREPLY[@]}"')
        done = subprocess.run(["bash", "-c", probe], input=res.stdout, text=True,
                              capture_output=True, timeout=30)
        assert done.stdout.split("\n")[:2] == ["--rate", "platforms"], done.stderr
    else:
        assert res.stdout.startswith("#compdef streambench")


def test_platforms_is_a_short_table_and_json_has_every_platform() -> None:
    from loadgen.platforms import PLATFORMS

    PLATFORMS.load_all()
    res = sb("platforms")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["PLATFORM", "WHAT", "IT", "STARTS", "RUNTIMES", "CLIENT"]
    names = [ln.split()[0] for ln in lines[1:] if ln.strip() and not ln.startswith("`")]
    assert names == list(PLATFORMS)
    assert max(map(len, lines)) <= 120 and len(lines) < 20
    as_json = json.loads(sb("platforms", "--json").stdout)
    assert [p["name"] for p in as_json] == list(PLATFORMS)
    assert all(p["client"] for p in as_json)


def test_platforms_name_lists_each_option_once_with_defaults_as_written() -> None:
    res = sb("platforms", "redis")
    assert res.returncode == 0, res.stderr
    assert "(default False)" not in res.stdout and "(default 'everysec')" not in res.stdout
    assert "fsync=always|everysec|no: appendfsync policy with aof (default everysec)" in res.stdout
    options = [ln.strip().split(":")[0] for ln in res.stdout.splitlines() if ln.startswith("    ")]
    assert len(options) == len(set(options))
    assert "conf.NAME=VALUE" in options
    (record,) = json.loads(sb("platforms", "redis", "--json").stdout)
    aof = next(o for o in record["options"] if o["name"] == "aof")
    assert aof["default"] == "no"
    kafka = sb("platforms", "kafka").stdout
    assert kafka.count("\n    acks") <= 1


def test_suites_say_how_long_each_takes() -> None:
    from tui.bench.listing import planned_s
    from tui.bench.suite import bundled_suites, load_suite

    res = sb("suites", "--json")
    assert res.returncode == 0, res.stderr
    listed = {s["name"]: s["planned_s"] for s in json.loads(res.stdout)}
    for name in bundled_suites():
        s = load_suite(name)
        # cells × (warm-up + measuring), summed from the workloads themselves
        cells = [w.warmup_s + w.duration_s for _ in s.targets for _, w in s.workloads]
        assert listed[name] == pytest.approx(sum(cells)) == pytest.approx(planned_s(s))
    text = sb("suites").stdout
    assert len(re.findall(r"^  planned: ", text, re.M)) == len(listed)


@pytest.mark.parametrize("text, unit, seconds", [
    ("30s", "s", 30), ("5m", "s", 300), ("1m30s", "s", 90), ("90", "s", 90), ("500ms", "s", 0.5),
    ("1h", "s", 3600), ("0.8", "ms", 0.8), ("800us", "ms", 0.8)])
def test_durations(text: str, unit: str, seconds: float) -> None:
    assert units.parse_duration(text, unit) == pytest.approx(seconds)


@pytest.mark.parametrize("text, size", [
    ("1k", 1024), ("1KiB", 1024), ("1MiB", 1 << 20), ("2.5g", int(2.5 * (1 << 30))),
    ("1024", 1024), ("64kb", 65536), ("0", 0), ("512m", 512 << 20)])
def test_sizes(text: str, size: int) -> None:
    assert units.parse_size(text) == size
    assert units.parse_size(units.size_text(size)) == size


@pytest.mark.parametrize("text", ["", "x", "2x", "-1g", "nan", "inf", "1gb2"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="expected a size"):
        units.parse_size(text)


def _one_line(res: subprocess.CompletedProcess[str], code: int) -> str:
    assert res.returncode == code, res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("streambench: error: "), line
    assert "Traceback" not in res.stderr
    return line


@pytest.mark.parametrize("args, says", [
    (["run", "redis", "--raet", "5"], "unrecognized argument --raet (did you mean --rate?) "
                                      "(see streambench run --help)"),
    (["rnu"], "(did you mean run?)"),
    (["suite", "x", "--no-reprot"], "(did you mean --no-report?) (see streambench suite --help)"),
    (["run", "redis", "--duration", "30x"], "expected a duration"),
    (["run", "redis", "--size", "1q"], "expected a size"),
    (["run", "redis", "--min-free-memory", "lots"], "expected a size"),
    (["platforms", "rediss"], "did you mean redis?"),
    (["run", "redis:nosuch", "--headless"], "nosuch"),
    ([], "no command given"),
])
def test_bad_input_is_one_line_and_a_usage_error(args: list[str], says: str) -> None:
    assert says in _one_line(sb(*args), exits.USAGE)


def test_units_are_taken_by_run(tmp_path: Path) -> None:
    """--duration 2s --warmup 0s --size 1k --pacing-window 800us: a real run of that length
    with 1,024-byte messages (run.json's workload says so)."""
    out = tmp_path / "run"
    res = sb("run", "redis:runtime=local", "--headless", "--rate", "200", "--duration", "2s",
             "--warmup", "0s", "--size", "1k", "--pacing-window", "800us", "--out", str(out),
             timeout_s=120)
    assert res.returncode == 0, res.stderr[-2000:]
    meta = json.loads((out / "run.json").read_text())
    workload = meta["workload"]
    assert workload["messageSize"] == 1024 and workload["testDurationSeconds"] == 2
    assert workload["pacingWindowMs"] == pytest.approx(0.8)
    assert meta["totals"][0]["produced"] > 0


def test_an_address_nothing_answers_at_is_exit_3(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = sb("run", f"redis@127.0.0.1:{port}", "--headless", "--duration", "1",
             "--out", str(tmp_path / "run"))
    assert res.returncode == exits.PLATFORM, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("streambench: error: ")]
    assert "cannot reach" in line and "Traceback" not in res.stderr


def test_exit_codes_are_distinct_and_documented() -> None:
    codes = [exits.OK, exits.INTERNAL, exits.USAGE, exits.PLATFORM, exits.LOW_MEMORY,
             exits.CELL_FAILED, exits.INSTALL, exits.BROKEN_PIPE, *exits.SIGNAL_EXIT.values()]
    assert len(codes) == len(set(codes))
    page = (ROOT / "docs" / "exit-codes.md").read_text()
    assert exits.markdown() in page
