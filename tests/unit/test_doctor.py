"""The shadowing check of `streambench doctor` and of every command's start-up, with a fake
distribution that installs a top-level `compose` package of its own."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tui.bench import doctor

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from tui.bench.doctor import find_shadows, quick_shadows
print(json.dumps({"full": find_shadows(), "quick": quick_shadows()}))
"""


def _fake_distribution(site: Path) -> None:
    """A distribution named `compose` 9.9 whose package `compose` comes first on the path."""
    (site / "compose").mkdir()
    (site / "compose" / "__init__.py").write_text('"""Someone else\'s compose."""\n')
    info = site / "compose-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: compose\nVersion: 9.9\n")
    (info / "RECORD").write_text("compose/__init__.py,,\ncompose-9.9.dist-info/METADATA,,\n"
                                 "compose-9.9.dist-info/RECORD,,\n")


def _python(code: str, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=site, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_nothing_is_shadowed_here() -> None:
    assert doctor.quick_shadows() == []
    assert doctor.find_shadows() == []


def test_fake_distribution_is_named_once(tmp_path: Path) -> None:
    _fake_distribution(tmp_path)
    res = _python(PROBE, tmp_path)
    assert res.returncode == 0, res.stderr
    found = json.loads(res.stdout)
    assert found["full"] == found["quick"]
    [line] = found["full"]
    assert line.startswith("'compose' is shadowed: import compose finds ")
    assert str(tmp_path / "compose") in line and "installed by compose 9.9" in line
    assert line.endswith("(pipx install . or uv tool install .)")


def test_every_command_warns_at_start_up(tmp_path: Path) -> None:
    _fake_distribution(tmp_path)
    res = _python("import sys\nfrom tui.cli import main\nsys.exit(main(['workloads']))", tmp_path)
    assert res.returncode == 0, res.stderr
    [warning] = res.stderr.splitlines()
    assert warning.startswith("streambench: warning: 'compose' is shadowed: ")
    assert warning.endswith("(see streambench doctor)")
    assert "simple-workload" in res.stdout  # the command itself ran


def _sha256(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_a_distribution_merged_into_a_wheel_install_is_suspected(tmp_path: Path) -> None:
    """Installed from a wheel, streambench shares site-packages: a file it did not install in
    one of its package folders, or an __init__.py written over, gives the package away."""
    package = tmp_path / "compose"
    package.mkdir()
    (package / "__init__.py").write_text('"""streambench stacks."""\n')
    (package / "docker.py").write_text("")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "docker.cpython-311.pyc").write_bytes(b"")
    info = tmp_path / "streambench-0.1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        f"compose/__init__.py,{_sha256(package / '__init__.py')},27\n"
        f"compose/docker.py,{_sha256(package / 'docker.py')},0\n"
        "streambench-0.1.0.dist-info/RECORD,,\n")
    record = doctor._own_record(tmp_path)
    assert record is not None
    assert not doctor._merged("compose", tmp_path, record)
    (package / "cli.py").write_text("")
    assert doctor._merged("compose", tmp_path, record)
    (package / "cli.py").unlink()
    (package / "__init__.py").write_text('"""Someone else\'s compose."""\n')
    assert doctor._merged("compose", tmp_path, record)
    assert doctor._own_record(tmp_path / "compose") is None  # a checkout: no RECORD, no check


@pytest.mark.parametrize("shadows, code", [(["'compose' is shadowed: …"], 6)])
def test_doctor_exit_code_follows_the_shadows(monkeypatch: pytest.MonkeyPatch,
                                              shadows: list[str], code: int) -> None:
    monkeypatch.setattr(doctor, "find_shadows", lambda: shadows)
    checks = tuple(lambda i=i: f"tool {i}: checked" for i in range(len(doctor.CHECKS)))
    monkeypatch.setattr(doctor, "CHECKS", checks)
    lines: list[str] = []
    assert doctor.doctor(lines.append) == code
    assert lines[0].startswith("streambench: ")
    assert lines[1:] == [*(f"problem: {line}" for line in shadows),
                         *(f"tool {i}: checked" for i in range(len(checks)))]
