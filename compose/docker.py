"""The docker runtime: a compose project per run and target from the files in compose/, driven
with the `docker compose` CLI (v2 plugin) or `docker-compose` (v1), whichever exists.

Images missing locally are pulled first through the Docker SDK, with progress and a time-out;
readiness is polled per platform and a failure names the container and shows its last log
lines; down() is `down -v` followed by a sweep by label, so nothing is left even when compose
itself failed half-way. Every container, volume (and network, should a file define one) carries
`streambench.run=<run id>`, `streambench.target=<label>` and `streambench.owner=<host>:<pid>`,
which `streambench stacks ls|prune` use. The fault hooks (Stack.fault: pause, resume, kill,
start, restart one broker's container) are recorded as run events."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compose.cadvisor_server import Cadvisor
from compose.net import classify
from compose.process import LOG_LIMIT_BYTES, free_port, make_data_dir, port_in_use
from loadgen.core.errors import StackError
from loadgen.core.stack import (
    CADVISOR_ADDRESS,
    FAULT_ALIASES,
    Progress,
    Stack,
    StackDescription,
    announce_runtime,
)
from loadgen.core.stack import FAULTS as STACK_FAULTS
from loadgen.core.target import Target

# how long one readiness probe of a compose stack waits for its answer
DOCKER_PROBE_TIMEOUT_S = 2.0

COMPOSE_DIR = Path(__file__).parent
RUN_LABEL = "streambench.run"
TARGET_LABEL = "streambench.target"
OWNER_LABEL = "streambench.owner"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
PULL_TIMEOUT_ENV = "STREAMBENCH_PULL_TIMEOUT"
PULL_TIMEOUT_S = 600.0  # a whole pull; a pull that moves no byte for PULL_STALL_S fails sooner
PULL_STALL_S = 60.0
COMPOSE_TIMEOUT_S = 300.0
STOP_GRACE_S = 10
PROGRESS_EVERY_S = 5.0
ENGINE_TIMEOUT_S = 10
INSTALL_HINT = "Debian/Ubuntu: apt-get install docker.io docker-compose"
# the fault hooks every Stack has as methods (loadgen.core.stack.FAULTS and their aliases)
FAULTS = (*STACK_FAULTS, *FAULT_ALIASES)
IMAGE_CHECK_TIMEOUT_S = 5
FAULT_READY_TIMEOUT_S = 120.0  # a broker started again by a fault hook answers within this
# the compose file of a target's own settings (ComposeStack.override), in <tmp>/<prefix><pid>-*
OVERRIDE_PREFIX = "streambench-compose-"
OVERRIDE_FILE = "settings.yml"


def engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def engine() -> Any:
    """A Docker SDK client of the engine DOCKER_HOST names (or the default socket); StackError
    with one line when no engine answers."""
    import docker

    try:
        client = docker.from_env(timeout=ENGINE_TIMEOUT_S)
        client.ping()
    except Exception as exc:  # the SDK raises DockerException and requests' errors alike
        raise StackError(f"no Docker engine answers at {engine_address()} ({_reason(exc)}): start "
                         "dockerd, point DOCKER_HOST at a running engine, or use --runtime local") from None
    return client


@functools.cache
def engine_answers() -> bool:
    """Whether a Docker engine and a compose CLI are there (decides the default runtime)."""
    try:
        compose_command()
        import docker

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def compose_command() -> list[str]:
    """`docker compose` when the v2 plugin is installed, else `docker-compose` (v1)."""
    docker_cli = shutil.which("docker")
    if docker_cli is not None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            if subprocess.run([docker_cli, "compose", "version"], capture_output=True, timeout=20,
                              stdin=subprocess.DEVNULL).returncode == 0:
                return [docker_cli, "compose"]
    v1 = shutil.which("docker-compose")
    if v1 is not None:
        return [v1]
    if docker_cli is None:
        raise StackError(f"docker is not installed (no docker or docker-compose on PATH): install "
                         f"Docker ({INSTALL_HINT}) or use --runtime local")
    raise StackError(f"Docker Compose is not installed (neither `docker compose` nor docker-compose "
                     f"works): install it ({INSTALL_HINT}) or use --runtime local")


def _reason(exc: BaseException) -> str:
    failure = classify(exc)
    if failure is not None:
        return failure.value
    text = str(exc)
    return (text.splitlines() or [type(exc).__name__])[0][:200]


_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


def compose_images(files: list[str], env: dict[str, str] | None = None) -> list[str]:
    """The images the services of compose files under compose/ run, with their ${VAR:-default}
    resolved against env (default: the environment), as compose would."""
    values = os.environ if env is None else env
    found: list[str] = []
    for name in files:
        doc = yaml.safe_load((COMPOSE_DIR / name).read_text()) or {}
        for service in (doc.get("services") or {}).values():
            image = str((service or {}).get("image") or "")
            image = _VARIABLE.sub(lambda m: values.get(m.group(1)) or (m.group(2) or ""), image)
            if image and image not in found:
                found.append(image)
    return found


@functools.cache
def image_present(image: str) -> bool:
    """Whether the engine has the image locally (False when it cannot tell)."""
    try:
        import docker

        client = docker.from_env(timeout=IMAGE_CHECK_TIMEOUT_S)
        try:
            client.images.get(image)
            return True
        finally:
            client.close()
    except Exception:
        return False


def owner() -> str:
    """`<host>:<pid>` of the process that owns a stack: a crashed owner's stacks are leftovers."""
    return f"{socket.gethostname()}:{os.getpid()}"


def project_name(run_id: str, index: int) -> str:
    """A compose project per run and target (lower case, digits, dashes: compose's rules)."""
    run = re.sub(r"[^a-z0-9]+", "-", run_id.lower()).strip("-") or "run"
    return f"streambench-{run}-{index}-{os.getpid()}"


def last_log_lines(container: Any, lines: int = 5) -> str:
    try:
        text = container.logs(tail=lines).decode(errors="replace")
    except Exception:
        return "no log"
    found = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(found[-lines:]) or "no output"


def parse_memory(text: str) -> str:
    """A container memory limit as docker takes it: bytes, or a number with b/k/m/g."""
    if not re.fullmatch(r"\d+(\.\d+)?[bkmgBKMG]?", text) or float(re.sub(r"[^\d.]", "", text)) <= 0:
        raise ValueError("expected a size like 2.67g, 512m or 1073741824")
    return text.lower()


def memory_bytes(limit: str) -> float:
    """A container memory limit as parse_memory() gives it, in bytes."""
    units = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = limit.strip().lower()
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def parse_cpus(text: str) -> float:
    problem = "must be a number of CPUs greater than 0, e.g. 6 or 1.5"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(problem) from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(problem)
    return value


# ---- image pulls ------------------------------------------------------------------------------

@dataclass
class _PullState:
    layers: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (current, total)
    done: set[str] = field(default_factory=set)
    error: str | None = None
    finished: bool = False
    last_change: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        current = sum(c for c, _ in self.layers.values())
        total = sum(t for _, t in self.layers.values())
        size = f", {current / 1e6:.1f} of {total / 1e6:.1f} MB" if total else ""
        return f"{len(self.done)} of {max(len(self.layers), len(self.done))} layers{size}"


def _pull_thread(client: Any, image: str, state: _PullState) -> None:
    from docker.utils import parse_repository_tag

    repo, tag = parse_repository_tag(image)
    try:
        for event in client.api.pull(repo, tag=tag or "latest", stream=True, decode=True):
            if "error" in event:
                state.error = str(event.get("error"))
                break
            layer, status = event.get("id"), str(event.get("status", ""))
            if layer and event.get("progressDetail", {}).get("total"):
                detail = event["progressDetail"]
                state.layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
            if layer and status in ("Pull complete", "Already exists"):
                state.done.add(layer)
            state.last_change = time.monotonic()
    except Exception as exc:
        state.error = str(getattr(exc, "explanation", None) or exc)
    finally:
        state.finished = True


async def pull_failure(client: Any, image: str, label: str, progress: Progress) -> str | None:
    """Pull `image` unless it is there; None once it is there, else why not, in one line naming
    the image (the pull failed, stalled or ran past the time-out)."""
    import docker

    try:
        await asyncio.to_thread(client.images.get, image)
        return None
    except docker.errors.ImageNotFound:
        pass
    timeout = float(os.environ.get(PULL_TIMEOUT_ENV) or PULL_TIMEOUT_S)
    progress(f"{label}: pulling {image}")
    state = _PullState()
    threading.Thread(target=_pull_thread, args=(client, image, state), daemon=True,
                     name=f"pull {image}").start()
    started = last_report = time.monotonic()
    while not state.finished:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        if now - started > timeout or now - state.last_change > PULL_STALL_S:
            return (f"pulling {image} made no progress for "
                    f"{min(now - started, now - state.last_change):.0f} s")
        if now - last_report >= 2.0 and state.layers:
            last_report = now
            progress(f"{label}: pulling {image}: {state.line()}")
    if state.error is not None:
        return f"cannot pull image {image}: {_pull_reason(state.error)}"
    progress(f"{label}: pulled {image}")
    return None


async def ensure_image(client: Any, image: str, label: str, progress: Progress) -> None:
    """Pull `image` unless it is there; StackError naming the image when the pull fails, stalls
    or runs past the time-out."""
    failure = await pull_failure(client, image, label, progress)
    if failure is not None:
        raise StackError(f"{label}: {failure} (no network? --runtime local runs it as a local "
                         "process; or load or build the image, or set the image variable to one "
                         "you have)")


def _pull_reason(text: str) -> str:
    text = " ".join(text.split())
    for pattern in ("no such host", "Temporary failure in name resolution", "i/o timeout",
                    "connection refused", "network is unreachable", "not found",
                    "pull access denied", "manifest unknown"):
        if pattern in text:
            return text[:160]
    return text[:200]


async def run_compose(command: list[str], project: str, files: list[str], env: dict[str, str],
                      args: tuple[str, ...], timeout_s: float = COMPOSE_TIMEOUT_S) -> tuple[int, str]:
    """`compose -p PROJECT -f FILE… ARGS` (files under compose/, or absolute paths) with `env` over
    the environment; (exit code, output). A time-out kills it (-1 and a line saying so)."""
    argv = [*command, "-p", project]
    for name in files:
        argv += ["-f", str(COMPOSE_DIR / name)]
    # docker-compose v1 is a Python program with a top-level `compose` package: a PYTHONPATH
    # that reaches this project's own `compose` package would shadow it, so none is passed on
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # a session of its own: a Ctrl-C in the terminal reaches streambench, which then stops
    # the stack itself, not compose half-way
    proc = await asyncio.create_subprocess_exec(
        *argv, *args, env={**base, **env}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except (TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, TimeoutError):
            return -1, f"compose {args[0]} did not finish within {timeout_s:.0f} s"
        raise
    return proc.returncode or 0, out.decode(errors="replace")


# ---- the compose stack ------------------------------------------------------------------------

class ComposeStack(Stack):
    """A target's brokers as one compose project. Subclasses name the compose files, the
    variables they read (ports, settings), the broker services and the readiness probe."""

    runtime = "docker"
    product = "broker"

    def __init__(self, target: Target, label: str) -> None:
        opts = target.options
        self._target = target
        self._label = label
        self._cpus: float | None = opts.get("cpus")
        self._memory: str | None = opts.get("memory")
        self._keep = bool(opts.get("keep"))
        self._cadvisor = (Cadvisor(label, opts.get(CADVISOR_ADDRESS), engine_address())
                          if opts.get("resources") == "cadvisor" else None)
        self._compose: list[str] = []
        self._client: Any = None
        self._project = ""
        self._env: dict[str, str] = {}
        self._images: dict[str, str] = {}
        self._containers: dict[str, Any] = {}  # service -> container
        self._launched = False
        self._version = ""
        self._override_dir: Path | None = None
        self._written: dict[str, str] = {}  # broker settings the stack set (StackDescription)

    # -- what subclasses say --

    @abstractmethod
    def files(self) -> list[str]:
        """Compose files under compose/ for this shape of the platform."""

    @abstractmethod
    def settings(self) -> dict[str, str]:
        """The STREAMBENCH_* variables of the files: ports (chosen and checked here), options."""

    @abstractmethod
    def brokers(self) -> list[str]:
        """The broker services, in order (the fault hooks take these names)."""

    @abstractmethod
    async def probe(self) -> bool:
        """One readiness check; True when the platform answers (set self._version then)."""

    @abstractmethod
    def endpoints(self) -> dict[str, str]: ...

    def config(self) -> dict[str, str]:
        """Settings worth recording in run.json beyond the common ones."""
        return {}

    def override(self) -> dict[str, dict[str, Any]]:
        """The target's broker settings as compose service fragments (service -> its keys, e.g.
        `environment` or `command`), merged over the files; called after settings()."""
        return {}

    def written(self, services: dict[str, Any]) -> dict[str, str]:
        """The broker settings the stack sets (its own and the target's), NAME -> value, from the
        effective services of `compose config`."""
        return {}

    def scratch_dir(self) -> Path:
        """A directory of this stack's files (override, mounted configs), removed by down()."""
        if self._override_dir is None:
            self._override_dir = make_data_dir(OVERRIDE_PREFIX)
            self._override_dir.chmod(0o755)  # a container's own user reads mounted files
        return self._override_dir

    def _remove_scratch(self) -> None:
        if self._override_dir is not None:
            shutil.rmtree(self._override_dir, ignore_errors=True)
            self._override_dir = None

    # -- helpers for subclasses --

    def take_port(self, explicit: int, option: str = "port") -> int:
        """The port the user chose (checked free), or a free one."""
        if explicit:
            if port_in_use(explicit):
                raise StackError(f"port {explicit} on 127.0.0.1 is already in use; choose another "
                                 f"with {self._target.platform}:{option}=N or leave {option} unset")
            return explicit
        return free_port()

    # -- lifecycle --

    def _all_files(self) -> list[str]:
        files = self.files()
        if self._override_dir is not None and (self._override_dir / OVERRIDE_FILE).is_file():
            files.append(str(self._override_dir / OVERRIDE_FILE))  # absolute: taken as it is
        return files

    async def _run_compose(self, *args: str, timeout_s: float = COMPOSE_TIMEOUT_S) -> tuple[int, str]:
        return await run_compose(self._compose, self._project, self._all_files(), self._env, args,
                                 timeout_s)

    async def up(self, progress: Progress) -> None:
        announce_runtime(progress, self._label, self._target.options)
        self._compose = await asyncio.to_thread(compose_command)
        self._client = await asyncio.to_thread(engine)
        self._project = project_name(self.context.run_id, self.context.index)
        self._env = {
            "STREAMBENCH_RUN": self.context.run_id,
            "STREAMBENCH_TARGET": self._label,
            "STREAMBENCH_OWNER": owner(),
            "STREAMBENCH_CPUS": f"{self._cpus:g}" if self._cpus else "0",
            "STREAMBENCH_MEMORY": self._memory or "0",
            **self.settings(),
        }
        fragments = self.override()
        if fragments:
            text = yaml.safe_dump({"services": _literal(fragments)}, sort_keys=False)
            (self.scratch_dir() / OVERRIDE_FILE).write_text(text)
        code, out = await self._run_compose("config")
        if code != 0:
            raise StackError(f"{self._label}: the compose files do not load: {compose_error(out)}")
        services = (yaml.safe_load(out) or {}).get("services", {})
        self._written = self.written(services)
        self._images = {name: str(svc.get("image", "")) for name, svc in services.items()}
        for image in dict.fromkeys(self._images.values()):
            await ensure_image(self._client, image, self._label, progress)
        if self._cadvisor is not None:  # before the containers: it sees them from their start
            await self._cadvisor.start(progress)
        progress(f"{self._label}: starting {', '.join(self._images)} (compose project {self._project})")
        self._launched = True
        code, out = await self._run_compose("up", "-d", "--no-build", "--no-color")
        if code != 0:
            raise StackError(f"{self._label}: compose up failed: {compose_error(out)}")
        found = await asyncio.to_thread(self._client.containers.list, all=True,
                                        filters={"label": f"{PROJECT_LABEL}={self._project}"})
        self._containers = {c.labels.get(SERVICE_LABEL, c.name): c for c in found}
        missing = sorted(set(self._images) - set(self._containers))
        if missing:
            raise StackError(f"{self._label}: compose up created no container for "
                             f"{', '.join(missing)}")
        self.context.events("stack-up", f"compose project {self._project}: " + ", ".join(
            f"{s}={c.short_id}" for s, c in sorted(self._containers.items())))

    def _exited(self) -> tuple[str, Any] | None:
        for service, container in self._containers.items():
            container.reload()
            if container.status in ("exited", "dead"):
                return service, container
        return None

    async def ready(self, timeout_s: float, progress: Progress) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        last_report = started
        while True:
            gone = await asyncio.to_thread(self._exited)
            if gone is not None:
                service, container = gone
                code = container.attrs.get("State", {}).get("ExitCode")
                logs = await asyncio.to_thread(last_log_lines, container)
                raise StackError(f"{self._label}: container {container.name} ({service}) exited "
                                 f"(code {code}) before {self.product} was ready; last log lines: "
                                 f"{logs}")
            if await self.probe():
                return
            now = loop.time()
            if now - started > timeout_s:
                container = self._containers[self.brokers()[0]]
                logs = await asyncio.to_thread(last_log_lines, container)
                raise StackError(f"{self._label}: {self.product} in container {container.name} not "
                                 f"ready after {timeout_s:.0f} s; last log lines: {logs}")
            if now - last_report >= PROGRESS_EVERY_S:
                last_report = now
                progress(f"{self._label}: waiting for {self.product} in "
                         f"{', '.join(self.brokers())} ({now - started:.0f} s)")
            await asyncio.sleep(0.5)

    async def down(self) -> None:
        if self._cadvisor is not None:
            await self._cadvisor.stop(self.context.log_dir)
        if not self._launched:
            self._close_client()
            self._remove_scratch()
            return
        self._launched = False
        await self._keep_logs()
        args = ["down", "--remove-orphans", "--timeout", str(STOP_GRACE_S)]
        if not self._keep:
            args.append("-v")
        with contextlib.suppress(Exception):
            await self._run_compose(*args)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._sweep)
        self.context.events("stack-down", f"compose project {self._project}"
                            + (" (volumes kept)" if self._keep else ""))
        self._close_client()
        self._remove_scratch()

    async def _keep_logs(self) -> None:
        """The containers' output (`compose logs`), into the run's log dir; never raises."""
        log_dir = self.context.log_dir
        if log_dir is None:
            return
        with contextlib.suppress(Exception):
            _code, out = await self._run_compose("logs", "--no-color", "--timestamps", timeout_s=60)
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / "compose.log").write_text(out[-LOG_LIMIT_BYTES:])

    def _sweep(self) -> None:
        """What compose left (it failed or was killed half-way): remove by project label."""
        if self._client is None:
            return
        remove_project(self._client, self._project, volumes=not self._keep)

    def _close_client(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    def describe(self) -> StackDescription:
        pids = []
        for c in self._containers.values():
            pid = c.attrs.get("State", {}).get("Pid") or 0
            if pid:
                pids.append(int(pid))
        endpoints = self.endpoints()
        if self._cadvisor is not None:
            endpoints["cadvisor"] = self._cadvisor.address
        config = {
            "compose_project": self._project,
            "compose_files": ",".join(Path(f).name for f in self._all_files()),
            "images": ",".join(f"{s}={i}" for s, i in sorted(self._images.items())),
            "cpus": f"{self._cpus:g}" if self._cpus else "unlimited",
            "memory": self._memory or "unlimited",
            "volumes": "kept" if self._keep else "removed at the end",
            **({"cadvisor": self._cadvisor.describe()} if self._cadvisor is not None else {}),
            **self.config(),
        }
        return StackDescription(runtime="docker", endpoints=endpoints, pids=tuple(pids),
                                container_ids=tuple(c.id for c in self._containers.values()),
                                version=self._version, config=config,
                                broker_settings=dict(self._written))

    # -- fault hooks --

    def down_brokers(self) -> dict[str, str]:
        down = {}
        for broker in self.brokers():
            container = self._containers.get(broker)
            if container is None:
                continue
            container.reload()  # one engine request: the container's state now
            if container.status != "running" and container.status != "paused":
                code = (container.attrs.get("State") or {}).get("ExitCode")
                down[broker] = f"container {container.name} {container.status} (exit code {code})"
        return down

    async def _apply_fault(self, action: str, broker: str) -> str:
        container = self._containers.get(broker)
        if container is None:
            raise StackError(f"{self._label}: no container for {broker} (the stack is not up)")
        actions = {
            # cgroup freezer: every process of the container stops, its state stays
            "pause": lambda c: c.pause(),
            "resume": lambda c: c.unpause(),
            # a crash: the container stays, stopped, with its data
            "kill": lambda c: c.kill(signal="SIGKILL"),
            "start": lambda c: c.start(),
            # SIGTERM, SIGKILL after the grace time, start again with the same data
            "restart": lambda c: c.restart(timeout=STOP_GRACE_S),
        }

        def apply(c: Any) -> None:
            actions[action](c)
            with contextlib.suppress(Exception):
                c.reload()  # its state and pid now, for describe()

        await asyncio.to_thread(apply, container)
        if action in ("start", "restart"):
            await self._answers_again(broker, container)
        return f"{broker} (container {container.name})"

    async def _answers_again(self, broker: str, container: Any) -> None:
        """After a start: until the platform's readiness probe passes again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FAULT_READY_TIMEOUT_S
        while not await self.probe():
            if loop.time() > deadline or container.status in ("exited", "dead"):
                logs = await asyncio.to_thread(last_log_lines, container)
                raise StackError(f"{self._label}: {self.product} in container {container.name} "
                                 f"({broker}) not ready again after a start; last log lines: {logs}")
            await asyncio.sleep(0.5)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(container.reload)


def _literal(value: Any) -> Any:
    """Strings of a generated compose file as they are: compose reads `$` as the start of a
    variable, `$$` as a `$`."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def compose_error(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "error" in ln.lower():
            return ln[:300]
    return lines[-1][:300] if lines else "no output"


def remove_project(client: Any, project: str, volumes: bool = True) -> list[str]:
    """Remove every container (force), volume and network of a compose project that streambench
    labelled; returns what was removed, as `kind name` strings."""
    removed = []
    label = f"{PROJECT_LABEL}={project}"
    for c in client.containers.list(all=True, filters={"label": label}):
        if RUN_LABEL in c.labels:
            with contextlib.suppress(Exception):
                c.remove(force=True, v=volumes)
                removed.append(f"container {c.name}")
    if volumes:
        for v in client.volumes.list(filters={"label": label}):
            if RUN_LABEL in (v.attrs.get("Labels") or {}):
                with contextlib.suppress(Exception):
                    v.remove(force=True)
                    removed.append(f"volume {v.name}")
    for n in client.networks.list(filters={"label": label}):
        if RUN_LABEL in (n.attrs.get("Labels") or {}):
            with contextlib.suppress(Exception):
                n.remove()
                removed.append(f"network {n.name}")
    return removed


def file_images(*files: str) -> Callable[[Target], list[str]]:
    """A platform's docker images trait for compose files that every target of it runs as they
    are (the image variables of the environment applied)."""
    return lambda _target: compose_images(list(files), dict(os.environ))
