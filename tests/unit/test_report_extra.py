"""Without the report extra (PySpark, matplotlib), `streambench report` and `run --report` end
with one line naming the install command and exit code 6 (installation incomplete), before any
work starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tui.bench import exits

ROOT = Path(__file__).resolve().parents[2]

# makes the given top-level modules unimportable, then runs the command line
BLOCKED_CLI = """
import sys

BLOCKED = set(sys.argv[1].split(","))


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
from tui.cli import main

sys.exit(main(sys.argv[2:]))
"""


def _cli_without(blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED_CLI, blocked, *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("blocked", ["pyspark", "matplotlib", "pyspark,matplotlib"])
def test_report_without_the_extra_is_one_line_and_exit_6(blocked: str, tmp_path: Path) -> None:
    res = _cli_without(blocked, "report", str(tmp_path))
    assert res.returncode == exits.INSTALL == 6, res.stderr
    assert res.stdout == ""
    names = ", ".join(blocked.split(","))
    assert res.stderr.splitlines() == [
        f"streambench: error: reports need the report extra ({names} not installed): "
        "pip install 'streambench[report]'"
    ]


def test_run_with_report_refuses_before_starting(tmp_path: Path) -> None:
    res = _cli_without("pyspark", "run", "redis", "--report", "--headless", "--duration", "1",
                       "--out", str(tmp_path / "run"))
    assert res.returncode == exits.INSTALL == 6, res.stderr
    assert len(res.stderr.splitlines()) == 1 and "pip install 'streambench[report]'" in res.stderr
    assert not (tmp_path / "run").exists()  # nothing ran
