"""Fixtures of the container tests: a Docker engine that answers (`make test` starts one), the
offline-built test images behind the image variables, and checks that nothing labelled with a
run's id outlives it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from compose.docker import RUN_LABEL, engine_answers
from tests.containers import images


@pytest.fixture(scope="session")
def docker_images() -> Iterator[dict[str, str]]:
    """The test images (built on first use), exported as the compose files' image variables."""
    if not engine_answers():
        message = ("no Docker engine or compose CLI answers: run `make test`, which installs "
                   "docker.io and docker-compose and starts dockerd (bash .ci/docker-engine.sh)")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    variables = images.build_all()
    before = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    yield variables
    for key, value in before.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@dataclass
class BesideTheRun:
    """A reader on a thread of its own while a run goes (`with Reader(run_id) as reader:`):
    run() reads until `_stop` is set, which leaving the block does."""

    run_id: str
    _stop: threading.Event = field(default_factory=threading.Event, init=False)

    def run(self) -> None:
        raise NotImplementedError

    def container(self) -> str | None:
        """The id of the run's running container (one broker), if it has one now."""
        out = subprocess.run(["docker", "ps", "-q", "--no-trunc", "--filter",
                              f"label={RUN_LABEL}={self.run_id}"],
                             capture_output=True, text=True, timeout=30).stdout.split()
        return out[0] if out else None

    def __enter__(self) -> BesideTheRun:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def labelled(run_id: str) -> dict[str, list[str]]:
    """Containers, volumes and networks labelled with the run's id."""
    label = f"label={RUN_LABEL}={run_id}"
    found = {}
    for kind, argv in (("containers", ["docker", "ps", "-a", "-q", "--filter", label]),
                       ("volumes", ["docker", "volume", "ls", "-q", "--filter", label]),
                       ("networks", ["docker", "network", "ls", "-q", "--filter", label])):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
        found[kind] = out.split()
    return found


def nothing_labelled(run_id: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    found = labelled(run_id)
    while any(found.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        found = labelled(run_id)
    assert not any(found.values()), f"left behind by run {run_id}: {found}"


def run_id_of(run_dir: Path) -> str:
    return str(json.loads((run_dir / "run.json").read_text())["run_id"])


def all_streambench() -> set[str]:
    """Every container and volume with a streambench.run label (to check that error paths,
    which may fail before run.json exists, leave nothing behind)."""
    ids = set()
    for argv in (["docker", "ps", "-a", "-q", "--filter", f"label={RUN_LABEL}"],
                 ["docker", "volume", "ls", "-q", "--filter", f"label={RUN_LABEL}"],
                 ["docker", "network", "ls", "-q", "--filter", f"label={RUN_LABEL}"]):
        ids |= set(subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.split())
    return ids


@pytest.fixture
def no_new_stacks() -> Iterator[None]:
    before = all_streambench()
    yield
    deadline = time.monotonic() + 20
    while all_streambench() - before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert all_streambench() - before == set(), "a container, volume or network was left behind"
