"""Two streambench processes assembling the same jars at the same moment: the cache's lock makes
one wait while the other runs Maven, and both then use the one copy."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compose.maven import cache_dir

pytestmark = pytest.mark.integration

COORDINATE = "org.slf4j:slf4j-api:1.7.36"  # one small jar (Kafka's own release uses it)

ASSEMBLE = """
import asyncio, json, sys, time
from pathlib import Path
from compose.maven import assemble

go, cache = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.005)

def progress(message):
    print(message, flush=True)

jars = asyncio.run(assemble("race", [sys.argv[3]], progress, cache=cache))
print(json.dumps([str(j) for j in jars]), flush=True)
"""


def test_two_processes_fetching_the_same_jars_take_turns(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    # Maven's local repository is shared with the real cache: only the jar directory is new
    repository = cache_dir() / "maven-repository"
    repository.mkdir(parents=True, exist_ok=True)
    (cache / "maven-repository").symlink_to(repository, target_is_directory=True)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", ASSEMBLE, str(go), str(cache), COORDINATE],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    time.sleep(1.0)  # both interpreters up and polling for the go file
    go.touch()
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        outputs.append(out.splitlines())
    fetched = [lines for lines in outputs if any(line.startswith("fetching the race jars")
                                                 for line in lines)]
    waited = [lines for lines in outputs if any(line.startswith("waiting for another streambench")
                                                for line in lines)]
    assert len(fetched) == 1, outputs  # Maven ran once
    assert len(waited) == 1 and waited[0] is not fetched[0], outputs  # the other one waited
    jars = [json.loads(lines[-1]) for lines in outputs]
    assert jars[0] == jars[1] == [str(cache / "jars" / "race" / "slf4j-api-1.7.36.jar")]
    assert Path(jars[0][0]).stat().st_size > 10_000
    # no work directory of either process is left next to the jars
    assert sorted(p.name for p in (cache / "jars").iterdir() if not p.name.startswith(".race.lock")
                  ) == ["race"]
