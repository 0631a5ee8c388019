"""Hostile input is refused before anything starts: one line on stderr, exit code 2, no
traceback, no "internal error", no run directory, nothing left running.

The command-line cases run `streambench run` in a subprocess (with a time limit: some of these
inputs used to hang) in a scratch working directory, so a run directory created by mistake would
show. Their target is an existing server on a port nothing listens on: should a check let a run
through, no broker is started."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loadgen.core.errors import OutputError, ReportError, TargetError, WorkloadError
from loadgen.core.workload import Workload, load_workload, parse_workload
from loadgen.platforms import resolve_target
from loadgen.run import Run, check_run_dir, default_run_dir
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
NOWHERE = "redis@127.0.0.1:1"  # resolves without a broker; nothing listens there

LAUGHS = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)),
    ]
)


def refused(cwd: Path, *args: str, timeout_s: float = 60) -> str:
    """Run `streambench run …` in `cwd`; assert it is refused cleanly; return the error line."""
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "run", *args, "--headless"],
        cwd=cwd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("streambench: error: ")
    assert "internal error" not in lines[0] and "Traceback" not in proc.stderr
    assert len(lines[0]) < 400, lines[0]
    assert not (cwd / "runs").exists(), "a run directory was created"
    return lines[0]


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = tmp_path / "cwd"
    d.mkdir()
    return d


# -- 1. the workload name in the run directory's path ----------------------------------------

@pytest.mark.parametrize("name", [
    "../../../../x", "/etc/cron.d/x", "a/b", "..", ".hidden", "x" * 300, "ünï cödé", "a\nb",
])
def test_workload_name_cannot_leave_runs(name):
    root = Path("runs")
    workload = Workload(name=name).validate()
    path = default_run_dir(workload, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), root)
    assert path.parent == root
    stem = path.name.removeprefix("20260102T030405Z-")
    assert stem and not stem.startswith(".") and len(stem) <= 100
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in stem), stem
    run = Run(workload, [])
    assert run.run_dir.parent == Path("runs") and ".." not in run.run_dir.parts
    assert run._meta()["workload"]["name"] == name  # run.json keeps the name as written


def test_workload_name_from_file_stays_inside_runs(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("name: '../../../../x'\n")
    w = load_workload(str(f))
    assert w.name == "../../../../x"
    assert default_run_dir(w, datetime.now(UTC)).parent == Path("runs")


# -- 2. a workload that is not a small regular file ------------------------------------------

def test_workload_device_is_refused(scratch):
    line = refused(scratch, NOWHERE, "--workload", "/dev/zero", timeout_s=30)
    assert "/dev/zero" in line and "device" in line


def test_workload_fifo_is_refused(scratch):
    fifo = scratch / "w.fifo"
    os.mkfifo(fifo)
    line = refused(scratch, NOWHERE, "--workload", str(fifo), timeout_s=30)
    assert "w.fifo" in line and "FIFO" in line


def test_workload_over_the_size_limit_is_refused(scratch):
    big = scratch / "big.yaml"
    big.write_text("# " + "x" * 1024 * 1024 + "\nname: big\n")
    line = refused(scratch, NOWHERE, "--workload", str(big))
    assert "big.yaml" in line and "1 MiB" in line


# -- 3. undecodable or too deeply nested files, --out names the system refuses ----------------

def test_workload_not_utf8_is_refused(scratch):
    f = scratch / "latin1.yaml"
    f.write_bytes("name: caf\xe9\n".encode("latin-1"))
    line = refused(scratch, NOWHERE, "--workload", str(f))
    assert "latin1.yaml" in line and "UTF-8" in line


@pytest.mark.parametrize("text", [
    "[" * 50_000 + "]" * 50_000 + "\n",
    "name: " + "{a: " * 20_000 + "1" + "}" * 20_000 + "\n",
])
def test_workload_nested_too_deeply_is_refused(scratch, text):
    f = scratch / "deep.yaml"
    f.write_text(text)
    assert "nested" in refused(scratch, NOWHERE, "--workload", str(f))


@pytest.mark.parametrize("text, fragment", [
    ("name: 2024-13-45\n", "month"),  # a date yaml cannot build
    ("partitionsPerTopic: " + "9" * 5000 + "\n", "cannot be read"),  # over int()'s digit limit
    ("name: &a [*a]\n", "alias"),
])
def test_workload_unbuildable_values_are_refused(scratch, text, fragment):
    f = scratch / "w.yaml"
    f.write_text(text)
    assert fragment in refused(scratch, NOWHERE, "--workload", str(f))


def test_out_name_too_long_is_refused(scratch):
    line = refused(scratch, NOWHERE, "--out", "r" * 300)
    assert "too long" in line
    assert list(scratch.iterdir()) == []


def test_out_path_too_deep_is_refused(scratch):
    line = refused(scratch, NOWHERE, "--out", "a/" * 2000)
    assert "too long" in line
    assert list(scratch.iterdir()) == []


def test_run_json_nested_too_deeply_is_a_report_error(tmp_path):
    from analysis.runs import load_runs

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ReportError, match="nested too deeply"):
        load_runs([run])
    (run / "run.json").write_text('{"schema_version": ' + "9" * 5000 + "}")
    with pytest.raises(ReportError, match="cannot be read"):
        load_runs([run])


# -- 4. alias bombs and numbers that overflow ---------------------------------------------------

@pytest.mark.parametrize("field", ["name", "topics"])
def test_alias_bomb_is_refused_quickly(scratch, field):
    f = scratch / "laughs.yaml"
    f.write_text(LAUGHS + f"{field}: *i\n")
    assert len(f.read_bytes()) < 1024
    line = refused(scratch, NOWHERE, "--workload", str(f), timeout_s=30)
    assert "laughs.yaml" in line and "aliases expanded" in line


@pytest.mark.parametrize("text, fragment", [
    ("partitionsPerTopic: .inf\n", "finite"),
    ("partitionsPerTopic: .nan\n", "finite"),
    ("producerRate: -.inf\n", "finite"),
    ("testDurationMinutes: 1.0e+308\n", "out of range"),
    ("partitionsPerTopic: 1" + "0" * 400 + "\n", "out of range"),
    ("partitionsPerTopic: 1000000000\n", "at most"),
    ("brokerCpus: .inf\n", "finite"),
    ("drainTimeoutSeconds: .nan\n", "finite"),
])
def test_numbers_out_of_bounds_are_refused(scratch, text, fragment):
    f = scratch / "w.yaml"
    f.write_text(text)
    assert fragment in refused(scratch, NOWHERE, "--workload", str(f))


def test_error_messages_stay_short():
    long_text = "x" * 100_000
    for doc in ({"keyDistributor": long_text}, {"brokerMemory": long_text},
                {"partitionsPerTopic": long_text}, {"topics": [long_text] * 100}):
        with pytest.raises(WorkloadError) as err:
            parse_workload(doc, "w.yaml")
        assert len(str(err.value)) < 300
    w = parse_workload({long_text: 1, **{f"k{i}": i for i in range(1000)}}, "w.yaml")
    assert len(w.warnings) <= 11 and all(len(x) < 300 for x in w.warnings)


def test_flag_over_the_bounds_is_refused(scratch):
    assert "partitionsPerTopic" in refused(scratch, NOWHERE, "--partitions", "10000000")
    assert "duration" in refused(scratch, NOWHERE, "--duration", "1e300")


def test_non_finite_flag_says_so(scratch):
    line = refused(scratch, NOWHERE, "--rate", "inf")
    assert "--rate: expected a finite number, got inf" in line


@pytest.mark.parametrize("spec, message", [
    ("redis:maxlen=abc", "option maxlen='abc' of redis: expected a whole number"),
    ("redis:maxlen=1.5", "option maxlen='1.5' of redis: expected a whole number"),
    ("redis:port=http", "option port='http' of redis: expected a whole number"),
    ("redis:port=70000", "must be a port number between 1 and 65535"),
    ("pulsar:batch_max_messages=many", "expected a whole number"),
    ("redis:runtime=docker,cpus=abc", "must be a number of CPUs greater than 0"),
    ("redis:runtime=docker,cpus=inf", "must be a number of CPUs greater than 0"),
    ("redis:runtime=docker,cpus=nan", "must be a number of CPUs greater than 0"),
])
def test_target_option_of_the_wrong_kind_says_what_it_expects(spec, message):
    """In the user's words, not int()'s or float()'s ("invalid literal for int() ...")."""
    with pytest.raises(TargetError) as err:
        resolve_target(spec)
    assert message in str(err.value)
    assert "literal" not in str(err.value) and "could not convert" not in str(err.value)


# -- 5. a target option given twice -----------------------------------------------------------

@pytest.mark.parametrize("spec", ["redis:aof=1,aof=0", "redis:aof,aof", "redis:maxlen=5,aof,maxlen=5"])
def test_target_option_given_twice(spec):
    with pytest.raises(TargetError, match="given twice"):
        resolve_target(spec)


def test_target_option_given_twice_on_the_command_line(scratch):
    line = refused(scratch, "redis:aof=1,aof=0@127.0.0.1:1")
    assert "option aof given twice" in line


# -- 6. run files where another user could tamper with them ------------------------------------

def test_out_under_world_writable_directory_without_sticky_bit(scratch):
    shared = scratch / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    line = refused(scratch, NOWHERE, "--out", str(shared / "run"))
    assert "sticky" in line and "shared" in line
    assert list(shared.iterdir()) == []
    with pytest.raises(OutputError, match="sticky"):
        check_run_dir(shared / "a" / "b")
    with pytest.raises(OutputError, match="sticky"):
        check_run_dir(shared)  # the run directory itself, empty and open to everyone
    assert list(shared.iterdir()) == []


def test_out_under_world_writable_sticky_directory_is_fine(tmp_path):
    shared = tmp_path / "tmp-like"
    shared.mkdir()
    os.chmod(shared, 0o777 | stat.S_ISVTX)
    check_run_dir(shared / "run")
    assert (shared / "run").is_dir() and list((shared / "run").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_out_owned_by_another_user(scratch):
    theirs = scratch / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    line = refused(scratch, NOWHERE, "--out", str(theirs))
    assert "another user" in line and "theirs" in line
    assert list(theirs.iterdir()) == []


def test_check_run_dir_creates_nested_directories(tmp_path):
    target = tmp_path / "a" / "b" / "c"
    check_run_dir(target)
    assert target.is_dir() and list(target.iterdir()) == []
    (target / "x").write_text(json.dumps({}))
    with pytest.raises(OutputError, match="not empty"):
        check_run_dir(target)


def test_too_many_load_processes_is_refused(tmp_path) -> None:
    res = run_cli(["run", "redis", "--headless", "--processes", "100000", "--out", str(tmp_path / "r")])
    assert res.returncode == 2 and "--processes" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r").exists()


def test_report_of_an_overlong_name_is_one_line(tmp_path) -> None:
    res = run_cli(["report", "x" * 5000])
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("streambench: error")]
    assert len(errors) == 1 and "is not a run directory" in errors[0] and len(errors[0]) < 200


def test_long_target_label_gives_a_bounded_log_dir(tmp_path) -> None:
    from loadgen.run import log_dir

    path = log_dir(tmp_path, 0, "redis:maxlen=" + "0" * 1000 + "1")
    assert len(path.name) <= 110 and path.parent == tmp_path / "logs"


@pytest.mark.parametrize("text", ["abc", "5", "nan", "-1", ""])
def test_replay_speed_other_than_the_three_says_which_it_takes(tmp_path, text) -> None:
    res = run_cli(["replay", str(tmp_path), "--speed", text], timeout_s=60)
    assert res.returncode == 2
    (line,) = res.stderr.strip().splitlines()
    assert f"--speed: expected 1, 10 or 60 (times real time), got {text!r}" in line, line


def test_replay_speeds_are_the_keys_speeds() -> None:
    from tui.bench.parser import REPLAY_SPEEDS, replay_speed
    from tui.replay import SPEEDS

    assert REPLAY_SPEEDS == SPEEDS
    assert [replay_speed(t) for t in ("1", "10x", "60.0")] == [1.0, 10.0, 60.0]
