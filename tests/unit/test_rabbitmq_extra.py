"""rbfly (GPL-3.0-or-later) is opt-in, the `rabbitmq` extra: loading the platforms never imports
it, `streambench platforms` still lists RabbitMQ and says whether its client is installed, and a
RabbitMQ run without it ends with one line and exit code 2 before anything starts. "Without it"
is the real command line in a fresh interpreter in which every import of rbfly fails as it does
when the package is not installed."""

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
MISSING = ("streambench: error: rabbitmq: the RabbitMQ Streams client rbfly (GPL-3.0-or-later) is "
           "not installed: pip install 'streambench[rabbitmq]'")
BROKERS = ("beam.smp", "epmd", "redis-server")

# the command line in an interpreter that cannot import rbfly (argv[1]: "block" or "allow");
# after main() returns it says on stderr whether rbfly was loaded at all
CLI = """
import sys


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "rbfly":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if sys.argv[1] == "block":
    sys.meta_path.insert(0, Blocker())
from tui.cli import main

code = main(sys.argv[2:])
sys.stderr.write(f"rbfly loaded: {'rbfly' in sys.modules}\\n")
sys.exit(code)
"""


def _cli(mode: str, *args: str) -> tuple[int, str, list[str]]:
    """Exit code, stdout and the stderr lines of the command (the rbfly line taken off)."""
    res = subprocess.run([sys.executable, "-c", CLI, mode, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, stdin=subprocess.DEVNULL)
    lines = res.stderr.splitlines()
    assert lines and lines[-1].startswith("rbfly loaded: "), res.stderr
    return res.returncode, res.stdout, lines


def _brokers() -> set[int]:
    return {pid for name in BROKERS for pid in server_pids(name)}


def test_loading_the_platforms_does_not_import_rbfly() -> None:
    code = ("import sys\n"
            "from loadgen.platforms import PLATFORMS\n"
            "import loadgen.platforms.rabbitmq\n"
            "assert 'rabbitmq' in PLATFORMS, sorted(PLATFORMS)\n"
            "print(sorted(m for m in sys.modules if m.partition('.')[0] == 'rbfly'))\n")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "[]\n"


@pytest.mark.parametrize("mode", ["allow", "block"])
def test_platforms_lists_rabbitmq_and_its_client(mode: str) -> None:
    code, out, err = _cli(mode, "platforms")
    assert code == 0
    assert err == ["rbfly loaded: False"]  # no warning, and listing never loads the client
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith("`")}
    assert set(rows) == set(PLATFORMS)  # every platform has its row, as with the client
    state = "installed" if mode == "allow" else "missing: pip install 'streambench[rabbitmq]'"
    assert rows["rabbitmq"].endswith("  " + state)  # the CLIENT column
    assert all(row.endswith("  bundled") for n, row in rows.items()
               if PLATFORMS[n].optional_client is None)


@pytest.mark.parametrize("mode", ["allow", "block"])
def test_platforms_rabbitmq_names_its_client_and_licence(mode: str) -> None:
    code, out, err = _cli(mode, "platforms", "rabbitmq")
    assert code == 0
    assert err == ["rbfly loaded: False"]
    lines = out.splitlines()
    assert lines[0].startswith("rabbitmq: ")
    state = "installed" if mode == "allow" else "not installed: pip install 'streambench[rabbitmq]'"
    assert lines[1] == ("  from: streambench 0.1.0 (rabbitmq = loadgen.platforms.rabbitmq:PLATFORMS); "
                        "client: the RabbitMQ Streams client rbfly (GPL-3.0-or-later), from the rabbitmq "
                        f"extra ({state})")
    code, out, err = _cli(mode, "platforms", "--json")
    assert code == 0
    assert err == ["rbfly loaded: False"]
    client = {record["name"]: record["client"] for record in json.loads(out)}
    assert set(client) == set(PLATFORMS)
    assert client["rabbitmq"] == ("installed" if mode == "allow"
                                  else "missing: pip install 'streambench[rabbitmq]'")


@pytest.mark.parametrize("targets", [
    ["rabbitmq"],
    ["rabbitmq:runtime=local,store_interval_ms=200"],
    ["rabbitmq@127.0.0.1:5552"],
    ["redis", "rabbitmq"],  # the target that could run does not start either
])
def test_a_rabbitmq_run_without_rbfly_refuses_before_starting(targets: list[str], tmp_path: Path) -> None:
    before = _brokers()
    run_dir = tmp_path / "run"
    code, out, err = _cli("block", "run", *targets, "--headless", "--duration", "2", "--warmup", "0",
                          "--out", str(run_dir))
    assert code == 2
    assert out == ""
    assert err == [MISSING, "rbfly loaded: False"]
    assert not run_dir.exists()  # nothing ran, nothing was written
    assert _brokers() - before == set()  # no node, no epmd, no redis-server started or left


def test_with_rbfly_a_run_gets_past_the_check(tmp_path: Path) -> None:
    """With rbfly installed the same path loads the client and goes on: here to an existing
    server that is not there, which ends the run on a line of its own
    (exit 3: the platform cannot be reached)."""
    port = free_port()
    code, _out, err = _cli("allow", "run", f"rabbitmq@127.0.0.1:{port}", "--headless",
                           "--duration", "2", "--out", str(tmp_path / "run"))
    assert code == 3
    assert err[-2].endswith(f"cannot reach rabbitmq at 127.0.0.1:{port}: connection refused "
                            "(nothing listens there?)"), err
    assert not any("rbfly" in line for line in err[:-1]), err
    assert err[-1] == "rbfly loaded: True"
