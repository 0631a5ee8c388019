"""The platform registry imports a platform's module on first use: a load worker, which looks
up its own platform by name, imports that platform's client and no other; a listing loads them
all, in the same order and with the same records whatever was looked up before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the top-level modules of the platforms' clients (the optional ones are imported by a run only)
CLIENTS = ("aiokafka", "redis", "pulsar", "_pulsar", "nats", "rstream", "confluent_kafka",
           "rbfly", "pravega_client")

PROBE = """
import json, sys
import loadgen.worker  # what a spawned load process imports
from loadgen.platforms import PLATFORMS
looked_up = [PLATFORMS[name] for name in sys.argv[1:]]
known = set(json.loads(sys.stdin.readline()))
before = sorted({m.partition('.')[0] for m in sys.modules} & known)
listing = [(name, p.origin) for name, p in PLATFORMS.items()]
after = sorted({m.partition('.')[0] for m in sys.modules} & known)
same = all(PLATFORMS[p.name] is p for p in looked_up)  # the records handed out stay the ones listed
print(json.dumps({"before": before, "after": after, "listing": listing, "same": same}))
"""


def _python(code: str, *args: str) -> str:
    """Runs `code` in a fresh interpreter (the client names on its stdin); its output."""
    res = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, input=json.dumps(CLIENTS) + "\n")
    assert res.returncode == 0, res.stderr
    return res.stdout


def _probe(*names: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(_python(PROBE, *names))
    return out


@pytest.mark.parametrize(("platform", "client"), [
    ("redis", "redis"), ("kafka", "aiokafka"), ("pulsar", "pulsar"), ("nats", "nats"),
])
def test_a_looked_up_platform_imports_its_own_client_alone(platform: str, client: str) -> None:
    """The clients a process imports before it lists the platforms: its own platform's only.
    (The listing then imports every module, so it is taken after.)"""
    code = ("import json, sys\n"
            "import loadgen.worker\n"
            "from loadgen.platforms import PLATFORMS\n"
            f"PLATFORMS[{platform!r}].make_driver\n"
            "clients = json.loads(sys.stdin.readline())\n"
            "print(json.dumps(sorted({m.partition('.')[0] for m in sys.modules} & set(clients))))\n")
    out = _python(code)
    imported = set(json.loads(out))
    assert client in imported
    assert imported <= {client, "_pulsar"}, imported


def test_resolving_a_target_imports_its_platform_alone() -> None:
    """What `streambench run redis:aof` imports to place its target: Redis's client only (an
    unknown option still gets its one line from the same table)."""
    code = ("import json, sys\n"
            "from loadgen.core.errors import TargetError\n"
            "from loadgen.platforms import resolve_target\n"
            "target = resolve_target('redis:aof,fsync=always', 'local')\n"
            "try:\n"
            "    resolve_target('redis:aoff')\n"
            "except TargetError as exc:\n"
            "    message = str(exc)\n"
            "clients = json.loads(sys.stdin.readline())\n"
            "print(json.dumps([target.options['fsync'], message,\n"
            "                  sorted({m.partition('.')[0] for m in sys.modules} & set(clients))]))\n")
    out = _python(code)
    fsync, message, imported = json.loads(out)
    assert fsync == "always"
    assert "unknown option 'aoff' for redis" in message and "did you mean aof?" in message
    assert imported == ["redis"]


def test_the_listing_does_not_depend_on_what_was_looked_up_first() -> None:
    alone = _probe()
    after = _probe("redis", "pulsar")
    assert alone["listing"] == after["listing"]
    assert after["same"] is True
    names = [name for name, _ in alone["listing"]]
    assert {"redis", "kafka", "redpanda", "pulsar", "nats", "rabbitmq", "pravega"} <= set(names)
    assert len(names) == len(set(names))
    # the registry alone imports no client; a lookup, its platform's; the listing, every one
    # but the optional ones
    assert alone["before"] == []
    assert set(after["before"]) == {"redis", "pulsar", "_pulsar"}
    assert {"redis", "aiokafka", "pulsar", "nats", "rstream"} <= set(alone["after"])


def test_a_name_of_no_bundled_entry_point_loads_them_all() -> None:
    """redpanda is declared by the kafka entry point: found by loading everything; an unknown
    name is not found, after the same."""
    code = ("from loadgen.platforms import PLATFORMS\n"
            "assert PLATFORMS['redpanda'].name == 'redpanda'\n"
            "assert 'nosuch' not in PLATFORMS\n"
            "try:\n"
            "    PLATFORMS['nosuch']\n"
            "except KeyError:\n"
            "    print('KeyError', len(PLATFORMS))\n")
    out = _python(code)
    word, count = out.split()
    assert word == "KeyError" and int(count) >= 8


def test_threads_looking_up_at_once_get_one_record_each_and_no_warning() -> None:
    code = ("import threading\n"
            "from loadgen.platforms import LOAD_WARNINGS, PLATFORMS\n"
            "names = ['redis', 'kafka', 'pulsar', 'nats', 'redpanda', 'rabbitmq'] * 3\n"
            "got = [None] * len(names)\n"
            "start = threading.Barrier(len(names))\n"
            "def look(i):\n"
            "    start.wait()\n"
            "    got[i] = PLATFORMS[names[i]]\n"
            "threads = [threading.Thread(target=look, args=(i,)) for i in range(len(names))]\n"
            "for t in threads: t.start()\n"
            "for t in threads: t.join()\n"
            "assert all(PLATFORMS[n] is g for n, g in zip(names, got)), 'two records for a name'\n"
            "print(len(set(map(id, got))), len(LOAD_WARNINGS))\n")
    out = _python(code)
    assert out.split() == ["6", "0"]
