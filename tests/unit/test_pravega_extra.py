"""The Pravega client (the `pravega` package, Apache-2.0) is the `pravega` extra: loading the
platforms never imports it, `streambench platforms` says whether it is installed, and a Pravega
run without it ends with one line and exit code 2 before anything starts (no standalone, no
container, no run directory), not in the client processes once the broker is up. "Without it"
is the real command line in a fresh interpreter in which every import of pravega_client fails
as it does when the package is not installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compose.process import free_port
from loadgen.platforms import PLATFORMS
from tests.conftest import server_pids

ROOT = Path(__file__).resolve().parents[2]
MISSING = ("streambench: error: pravega: the Pravega Python client pravega (Apache-2.0) is not "
           "installed: pip install 'streambench[pravega]'")
SERVERS = ("java", "redis-server")

# the command line in an interpreter that cannot import pravega_client (argv[1]: "block" or
# "allow"); after main() returns it says on stderr whether the client was loaded at all
CLI = """
import sys


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pravega_client":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if sys.argv[1] == "block":
    sys.meta_path.insert(0, Blocker())
from tui.cli import main

code = main(sys.argv[2:])
sys.stderr.write(f"pravega_client loaded: {'pravega_client' in sys.modules}\\n")
sys.exit(code)
"""


def _cli(mode: str, *args: str) -> tuple[int, str, list[str]]:
    """Exit code, stdout and the stderr lines of the command (the last one says whether the
    client was loaded)."""
    res = subprocess.run([sys.executable, "-c", CLI, mode, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    lines = res.stderr.splitlines()
    assert lines and lines[-1].startswith("pravega_client loaded: "), res.stderr
    return res.returncode, res.stdout, lines


def _servers() -> set[int]:
    return {pid for name in SERVERS for pid in server_pids(name)}


def test_loading_the_platforms_does_not_import_the_client() -> None:
    code = ("import sys\n"
            "from loadgen.platforms import PLATFORMS\n"
            "import loadgen.platforms.pravega\n"
            "assert 'pravega' in PLATFORMS, sorted(PLATFORMS)\n"
            "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'pravega_client'))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "[]\n"


@pytest.mark.parametrize("mode", ["allow", "block"])
def test_platforms_lists_pravega_and_its_client(mode: str) -> None:
    code, out, err = _cli(mode, "platforms")
    assert code == 0
    assert err == ["pravega_client loaded: False"]  # no warning, and listing never loads the client
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith("`")}
    assert set(rows) == set(PLATFORMS)  # every platform has its row, as with the client
    state = "installed" if mode == "allow" else "missing: pip install 'streambench[pravega]'"
    assert rows["pravega"].endswith("  " + state)  # the CLIENT column
    assert all(row.endswith("  bundled") for n, row in rows.items()
               if PLATFORMS[n].optional_client is None)


@pytest.mark.parametrize("mode", ["allow", "block"])
def test_platforms_pravega_names_its_client_and_licence(mode: str) -> None:
    code, out, err = _cli(mode, "platforms", "pravega")
    assert code == 0
    assert err == ["pravega_client loaded: False"]
    lines = out.splitlines()
    assert lines[0].startswith("pravega: ")
    state = "installed" if mode == "allow" else "not installed: pip install 'streambench[pravega]'"
    assert lines[1] == ("  from: streambench 0.1.0 (pravega = loadgen.platforms.pravega:PLATFORMS); "
                        "client: the Pravega Python client pravega (Apache-2.0), from the pravega "
                        f"extra ({state})")
    code, out, err = _cli(mode, "platforms", "--json")
    assert code == 0
    assert err == ["pravega_client loaded: False"]
    client = {record["name"]: record["client"] for record in json.loads(out)}
    assert set(client) == set(PLATFORMS)
    assert client["pravega"] == ("installed" if mode == "allow"
                                 else "missing: pip install 'streambench[pravega]'")


@pytest.mark.parametrize("targets", [
    ["pravega"],
    ["pravega:runtime=local,heap=256m"],
    ["pravega:runtime=docker"],
    ["pravega@tcp://127.0.0.1:9090"],
    ["redis", "pravega"],  # the target that could run does not start either
])
def test_a_pravega_run_without_the_client_refuses_before_starting(targets: list[str],
                                                                   tmp_path: Path) -> None:
    before = _servers()
    run_dir = tmp_path / "run"
    code, out, err = _cli("block", "run", *targets, "--headless", "--duration", "2", "--warmup", "0",
                          "--out", str(run_dir))
    assert code == 2
    assert out == ""
    assert err == [MISSING, "pravega_client loaded: False"]
    assert not run_dir.exists()  # nothing ran, nothing was written
    assert _servers() - before == set()  # no standalone, no redis-server started or left


def test_with_the_client_a_run_gets_past_the_check(tmp_path: Path) -> None:
    """With the client installed the same path imports it and goes on: here to an existing
    cluster that is not there, which ends the run on a line of its own
    (exit 3: the platform cannot be reached)."""
    port = free_port()
    code, _out, err = _cli("allow", "run", f"pravega@tcp://127.0.0.1:{port}", "--headless",
                           "--duration", "2", "--out", str(tmp_path / "run"))
    assert code == 3
    assert err[-2].endswith(f"cannot reach the Pravega controller at tcp://127.0.0.1:{port}: "
                            "connection refused (nothing listens there?)"), err
    assert not any("pravega_client" in line or "Pravega Python client" in line
                   for line in err[:-1]), err
    assert err[-1] == "pravega_client loaded: True"
