"""The platform contract's cases and its shared runs: one clean run and one fault run per
platform and runtime, each made once for the session (on first use) and read by every check.

The cases come from the platform registry (loadgen.platforms.PLATFORMS), so an installed plugin
platform is among them: every registered platform on each runtime it declares that can run
here (local always; docker when the Docker engine answers and holds every image the platform's
docker runtime runs). What is checked of a platform beyond the common contract follows what its
record declares (Platform.fault_actions, lag_per_partition, keyed, settings_read_back)."""

from __future__ import annotations

import functools
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loadgen.core.platform import Platform
from loadgen.platforms import PLATFORMS, resolve_target
from tests.conftest import CLI, run_cli

RATE = 1000  # msg/s of the clean run
DURATION_S = 5
WARMUP_S = 1
PARTITIONS = 2
FAULT_RATE = 500  # msg/s of the fault run
FAULT_CAP_S = 120  # the fault run's planned length; it is stopped once it recovered
AFTER_RECOVERY_S = 3.5  # how long the fault run goes on after its last recovery, at its rate
FAULT_TIMEOUT_S = 300
RUN_TIMEOUT_S = 420  # a first run may fetch a broker's release
REFERENCE = "redis"  # the platform every other one runs beside in the clean run


@dataclass(frozen=True)
class Case:
    platform: str
    runtime: str

    @property
    def record(self) -> Platform:
        return PLATFORMS[self.platform]

    @property
    def id(self) -> str:
        return f"{self.platform}-{self.runtime}"


@functools.cache
def _docker_holds(images: tuple[str, ...]) -> bool:
    docker = shutil.which("docker")
    if docker is None or not images:
        return False
    try:
        res = subprocess.run([docker, "image", "inspect", *images], capture_output=True,
                             timeout=10, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def runtimes_here(platform: Platform) -> list[str]:
    """The runtimes of `platform` the contract runs here: local, and docker when its images are
    here (external needs a cluster the contract does not have)."""
    found = ["local"] if "local" in platform.runtimes else []
    if "docker" in platform.runtimes:
        images = tuple(platform.docker_images(resolve_target(f"{platform.name}:runtime=docker")))
        if _docker_holds(images):
            found.append("docker")
    return found


def contract_cases() -> list[Case]:
    return [Case(name, runtime) for name in sorted(PLATFORMS)
            for runtime in runtimes_here(PLATFORMS[name])]


CASES = contract_cases()


@pytest.fixture(scope="module", params=CASES, ids=[c.id for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    """Module-scoped, so pytest runs every check of one platform before the next platform's."""
    return request.param


@dataclass
class CleanRun:
    """`streambench run` at a fixed rate, delivery tracked, beside the reference platform."""

    run_dir: Path
    result: subprocess.CompletedProcess[str]
    labels: list[str]
    keyed: bool


@dataclass
class FaultRun:
    """`streambench run` with the faults the platform takes on its runtime, stopped (SIGINT)
    once it recovered from the last of them."""

    run_dir: Path
    code: int
    stderr: str
    faults: list[str]  # the fault actions asked for, in order
    steps: list[str] = field(default_factory=list)  # the event kinds seen on stderr, in order


def _workload(folder: Path, keyed: bool) -> Path:
    path = folder / "contract.yaml"
    path.write_text("name: platform-contract\n"
                    f"keyDistributor: {'KEY_ROUND_ROBIN' if keyed else 'NO_KEY'}\n")
    return path


def clean_run(case: Case, folder: Path) -> CleanRun:
    keyed = case.record.keyed
    labels = [case.platform] + ([REFERENCE] if case.platform != REFERENCE else [])
    run_dir = folder / "run"
    res = run_cli(["run", *labels, "--runtime", case.runtime, "--workload",
                   str(_workload(folder, keyed)), "--rate", str(RATE), "--duration",
                   str(DURATION_S), "--warmup", str(WARMUP_S), "--partitions", str(PARTITIONS),
                   "--consumers", "2", "--track-delivery", "--headless", "--out", str(run_dir)],
                  timeout_s=RUN_TIMEOUT_S)
    return CleanRun(run_dir, res, labels, keyed)


def fault_plan(case: Case) -> list[tuple[str, str]]:
    """The fault pairs the run takes, each followed by a recovery: (fault, its undoing)."""
    takes = set(case.record.fault_actions(case.runtime))
    return [pair for pair in (("pause", "resume"), ("kill", "start")) if set(pair) <= takes]


def fault_run(case: Case, folder: Path) -> FaultRun:
    """Pause at 2 s and resume at 3 s of the measuring phase (--at); once the run says it
    recovered, kill and then start the broker (standard input); stopped AFTER_RECOVERY_S after
    it recovered from that too. A plan of one pair runs it by --at alone."""
    name = case.platform
    plan = fault_plan(case)
    first, rest = plan[0], plan[1:]
    run_dir = folder / "run"
    args = ["run", name, "--runtime", case.runtime, "--rate", str(FAULT_RATE), "--duration",
            str(FAULT_CAP_S), "--warmup", str(WARMUP_S), "--partitions", str(PARTITIONS),
            "--consumers", "2", "--headless", "--out", str(run_dir),
            "--at", f"2s:{first[0]}={name}", "--at", f"3s:{first[1]}={name}"]
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    watchdog = threading.Timer(FAULT_TIMEOUT_S, proc.kill)
    watchdog.start()
    found = FaultRun(run_dir, 0, "", [a for pair in plan for a in pair])
    lines: list[str] = []
    # ticks on standard output: read so that the pipe never fills
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    drain = threading.Thread(target=proc.stdout.read, daemon=True)
    drain.start()
    recovered = 0
    for line in proc.stderr:
        lines.append(line)
        if not line.startswith(f"[event] {name} "):
            continue
        kind = line.split(" ", 3)[2].rstrip(":")
        found.steps.append(kind)
        if kind == "recovered":
            recovered += 1
            if recovered <= len(rest):
                proc.stdin.write(f"{rest[recovered - 1][0]}={name}\n")
                proc.stdin.flush()
            elif recovered == len(plan):  # a few ticks at the rate, then the stop
                stop = threading.Timer(AFTER_RECOVERY_S, proc.send_signal, [signal.SIGINT])
                stop.daemon = True
                stop.start()
        elif 0 < recovered <= len(rest) and kind == f"fault-{rest[recovered - 1][0]}":
            proc.stdin.write(f"{rest[recovered - 1][1]}={name}\n")
            proc.stdin.flush()
    found.code = proc.wait()
    watchdog.cancel()
    drain.join(5)
    proc.stdin.close()
    found.stderr = "".join(lines)
    return found


class Runs:
    """Each kind of run once per case for the session."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._clean: dict[Case, CleanRun] = {}
        self._faults: dict[Case, FaultRun] = {}

    def clean(self, case: Case) -> CleanRun:
        if case not in self._clean:
            self._clean[case] = clean_run(case, self._factory.mktemp(f"clean-{case.id}"))
        return self._clean[case]

    def faults(self, case: Case) -> FaultRun:
        if case not in self._faults:
            self._faults[case] = fault_run(case, self._factory.mktemp(f"faults-{case.id}"))
        return self._faults[case]


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    yield Runs(tmp_path_factory)
