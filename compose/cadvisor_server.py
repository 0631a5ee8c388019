"""cAdvisor for `--resources cadvisor`: streambench's own build of cAdvisor's library module (the
small Go program in compose/cadvisor, built once by compose.gobuild), started for a docker
target, or a running cAdvisor the user names (the target option cadvisor=HOST:PORT).

Started like the Toxiproxy server, by the process that owns the target's stack and before its
containers, so that cAdvisor sees them from their creation: bound to 127.0.0.1 on a port the
kernel picks (the program writes the address it listens on to a file), in its own process group
and killed by the kernel should its owner die (compose.process.start_process), its log in a data
dir that names its owner. It samples the docker containers (-docker_only) every second
(-housekeeping_interval=1s, -allow_dynamic_housekeeping=false) and keeps two minutes of
samples."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import urllib.request
from pathlib import Path

from compose.gobuild import source_program
from compose.process import make_data_dir, start_process, stop_and_remove, tail
from loadgen.core.errors import StackError
from loadgen.core.stack import Progress

SOURCE = Path(__file__).parent / "cadvisor"
# the manager reads the machine and every container of the engine before it listens
START_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 2.0
ARGS = ("-housekeeping_interval=1s", "-allow_dynamic_housekeeping=false", "-docker_only",
        "-storage_duration=2m")


async def cadvisor_program(progress: Progress) -> Path:
    """The cAdvisor program, built on first use into streambench's cache."""
    return await source_program("cadvisor", SOURCE, progress)


def answers(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether a cAdvisor answers at HOST:PORT (its /healthz says ok)."""
    try:
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=timeout_s) as reply:
            return bool(reply.status == 200 and reply.read().strip() == b"ok")
    except (OSError, ValueError):
        return False


class Cadvisor:
    """The cAdvisor of one target: one streambench starts, or the user's own."""

    def __init__(self, label: str, address: str | None = None,
                 engine: str = "unix:///var/run/docker.sock") -> None:
        self._label = label
        self._given = address
        self._engine = engine  # the Docker engine whose containers it reads
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: Path | None = None
        self.address = address or ""

    async def start(self, progress: Progress) -> None:
        """Start cAdvisor and wait until it answers; for a given one, check that it answers.
        StackError with one line otherwise."""
        if self._given is not None:
            if not await asyncio.to_thread(answers, self._given):
                raise StackError(f"{self._label}: no cAdvisor answers at {self._given} "
                                 f"(http://{self._given}/healthz)")
            progress(f"{self._label}: container figures from the cAdvisor at {self._given}")
            return
        program = await cadvisor_program(progress)
        self._dir = make_data_dir("streambench-cadvisor-")
        address_file = self._dir / "address"
        log = self._dir / "cadvisor.log"
        # from the event loop's (main) thread: the program's death signal is tied to it
        self._proc = start_process([str(program), f"-address_file={address_file}",
                                    f"-docker={self._engine}", *ARGS], log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.address or not await asyncio.to_thread(answers, self.address):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                why = (f"exited with code {self._proc.returncode}" if self._proc.poll() is not None
                       else f"did not answer within {START_TIMEOUT_S:.0f} s")
                said = tail(log, 2)
                await self.stop()
                raise StackError(f"{self._label}: cAdvisor {why}" + (f": {said}" if said else ""))
            await asyncio.sleep(0.1)
            with contextlib.suppress(OSError):
                self.address = address_file.read_text().strip()
        progress(f"{self._label}: cAdvisor (pid {self._proc.pid}) at {self.address}")

    def describe(self) -> str:
        """Which cAdvisor, for run.json."""
        if self._given is not None:
            return f"{self.address} (given)"
        return f"{self.address} (started by streambench, pid {self.pid})"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def stop(self, log_dir: Path | None = None) -> None:
        """Stop the cAdvisor streambench started (its log kept in log_dir) and remove its data
        dir; a given one is left as it is."""
        proc, self._proc = self._proc, None
        where, self._dir = self._dir, None
        logs = [where / "cadvisor.log"] if where is not None else []
        await stop_and_remove(proc, where, logs, log_dir)
