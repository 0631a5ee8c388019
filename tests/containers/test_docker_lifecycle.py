"""The docker runtime's life cycle through the command line: Ctrl-C and SIGKILL followed by
`streambench stacks prune` leave nothing labelled with the run; every failure a user can cause
(Docker missing, daemon down, image missing offline, port taken, a broker that never becomes
ready or crashes) is one line, exit 3, nothing left. And the fault hooks and the per-broker
limits on a real container."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from analysis.sink import ParquetSink
from compose.docker import COMPOSE_DIR
from loadgen.core.events import RunEvent
from loadgen.core.target import unique_labels
from loadgen.core.ticks import Phase, Tick
from loadgen.core.workload import Workload
from loadgen.load import TargetLoad
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from loadgen.run import Run
from tests.containers import images
from tests.containers.conftest import labelled, nothing_labelled, run_id_of
from tests.integration.conftest import CLI, CliRun

pytestmark = pytest.mark.integration

RUN = ["--rate", "1000", "--duration", "60", "--warmup", "1", "--headless"]


def _cli(args: list[str], env: dict[str, str] | None = None,
         timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout_s,
                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})


def _one_error_line(res: subprocess.CompletedProcess[str], fragment: str) -> str:
    """Each of these is a stack that cannot start: exit 3 and one error line, the last."""
    assert res.returncode == 3, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("streambench: error")]
    assert len(errors) == 1 and lines[-1] == errors[0], res.stderr
    assert fragment in errors[0], errors[0]
    assert "Traceback" not in res.stderr
    return errors[0]


def test_ctrl_c_brings_the_stack_down(tmp_path, docker_images):
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--runtime", "docker", *RUN, "--out", str(run_dir)])
    cli.wait_for_line("measuring", 90)
    cli.wait_for_line("measuring", 10)
    run_id = run_id_of(run_dir)
    assert labelled(run_id)["containers"]
    cli.signal(signal.SIGINT)
    rc, _out, err = cli.finish(timeout_s=90)
    assert rc == 130, err
    assert "Traceback" not in err
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["stopped_early"] is True
    assert meta["totals"][0]["consumed"] == meta["totals"][0]["produced"] > 0
    nothing_labelled(run_id)


def test_sigkill_then_prune_removes_everything(tmp_path, docker_images):
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis:aof", "--runtime", "docker", *RUN, "--out", str(run_dir)])
    cli.wait_for_line("measuring", 90)
    run_id = run_id_of(run_dir)
    os.killpg(cli.proc.pid, signal.SIGKILL)  # streambench and its worker: a crash, no clean-up
    cli.finish(timeout_s=30)
    left = labelled(run_id)
    assert left["containers"] and left["volumes"], left
    deadline = time.monotonic() + 15  # until the kernel has taken the killed worker away
    listing = _cli(["stacks", "ls"])
    while "leftover" not in listing.stdout and time.monotonic() < deadline:
        time.sleep(0.5)
        listing = _cli(["stacks", "ls"])
    assert listing.returncode == 0, listing.stderr
    assert f"run {run_id}" in listing.stdout and "leftover" in listing.stdout, listing.stdout
    pruned = _cli(["stacks", "prune"])
    assert pruned.returncode == 0, pruned.stderr
    assert "removed container" in pruned.stdout and "removed volume" in pruned.stdout, pruned.stdout
    nothing_labelled(run_id, timeout_s=5)


def test_prune_keeps_stacks_of_running_streambench(tmp_path, docker_images):
    run_dir = tmp_path / "run"
    cli = CliRun(["run", "redis", "--runtime", "docker", *RUN, "--out", str(run_dir)])
    try:
        cli.wait_for_line("measuring", 90)
        run_id = run_id_of(run_dir)
        pruned = _cli(["stacks", "prune"])
        assert pruned.returncode == 0 and "kept streambench-" in pruned.stdout, pruned.stdout
        assert labelled(run_id)["containers"]
    finally:
        cli.signal(signal.SIGTERM)
        rc, _out, err = cli.finish(timeout_s=90)
    assert rc == 143, err
    nothing_labelled(run_id)


def test_docker_not_installed(tmp_path, no_new_stacks):
    res = _cli(["run", "redis", "--runtime", "docker", "--headless", "--duration", "1",
                "--out", str(tmp_path / "run")], env={"PATH": str(tmp_path)})
    _one_error_line(res, "docker is not installed")


def test_daemon_down(tmp_path, docker_images, no_new_stacks):
    res = _cli(["run", "redis", "--runtime", "docker", "--headless", "--duration", "1",
                "--out", str(tmp_path / "run")],
               env={"DOCKER_HOST": f"unix://{tmp_path}/nobody-listens.sock"})
    _one_error_line(res, "no Docker engine answers at unix://")


def test_default_runtime_is_local_without_an_engine(tmp_path):
    env = {"DOCKER_HOST": f"unix://{tmp_path}/nobody-listens.sock", "STREAMBENCH_RUNTIME": ""}
    code = ("from loadgen.platforms import resolve_target; "
            "print(resolve_target('redis').runtime, resolve_target('redpanda').runtime)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    assert res.stdout.split() == ["local", "docker"], res.stderr


def test_image_missing_offline_fails_fast(tmp_path, docker_images, no_new_stacks):
    started = time.monotonic()
    res = _cli(["run", "redis", "--runtime", "docker", "--headless", "--duration", "1",
                "--out", str(tmp_path / "run")],
               env={"STREAMBENCH_IMAGE_REDIS": "streambench-test/not-built:none",
                    "STREAMBENCH_PULL_TIMEOUT": "30"})
    line = _one_error_line(res, "cannot pull image streambench-test/not-built:none")
    assert "no network?" in line
    assert time.monotonic() - started < 60


def test_port_taken(tmp_path, docker_images, no_new_stacks):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = _cli(["run", f"redis:port={port}", "--runtime", "docker", "--headless",
                    "--duration", "1", "--out", str(tmp_path / "run")])
    _one_error_line(res, f"port {port} on 127.0.0.1 is already in use")


@pytest.fixture(scope="module")
def broken_images(docker_images) -> dict[str, str]:
    """Redis images whose `redis-server` never answers, or exits at once."""
    return {"never-ready": images.broken("never-ready", "echo 'loading the dataset'; exec sleep 600"),
            "crashing": images.broken("crashing", "echo 'FATAL: cannot open /data/appendonly.aof' >&2; "
                                                  "exit 3")}


def test_broker_never_ready(tmp_path, broken_images, no_new_stacks):
    started = time.monotonic()
    res = _cli(["run", "redis", "--runtime", "docker", "--headless", "--duration", "1",
                "--out", str(tmp_path / "run")],
               env={"STREAMBENCH_IMAGE_REDIS": broken_images["never-ready"],
                    "STREAMBENCH_READY_TIMEOUT": "8"})
    line = _one_error_line(res, "redis in container streambench-")
    assert "not ready after 8 s" in line and "loading the dataset" in line
    assert time.monotonic() - started < 90


def test_broker_crashes(tmp_path, broken_images, no_new_stacks):
    res = _cli(["run", "redis", "--runtime", "docker", "--headless", "--duration", "1",
                "--out", str(tmp_path / "run")],
               env={"STREAMBENCH_IMAGE_REDIS": broken_images["crashing"]})
    line = _one_error_line(res, "exited (code 3) before redis was ready")
    assert "cannot open /data/appendonly.aof" in line


def test_fault_hooks_and_limits(docker_images):
    """pause/unpause/kill/start/restart one broker, each a run event; the per-broker limits
    reach the container."""
    events: list[RunEvent] = []
    run_id = f"faults-{os.getpid()}"
    target = resolve_target("redis:runtime=docker,cpus=0.5,memory=256m")
    load = TargetLoad(0, target.label, target, Workload(), run_id, False, False, events.append)

    async def ping(port: int) -> bool:
        from compose.redis import ping as redis_ping

        try:
            await asyncio.wait_for(redis_ping("127.0.0.1", port, 1.0), 2.0)
            return True
        except Exception:
            return False

    async def scenario() -> None:
        try:
            await load.start(lambda message: None)
            stack, desc = load.stack, load.desc
            assert stack is not None and desc is not None
            port = int(desc.endpoints["redis"].rsplit(":", 1)[1])
            host = json.loads(subprocess.run(["docker", "inspect", desc.container_ids[0]],
                                             capture_output=True, text=True).stdout)[0]["HostConfig"]
            assert host["NanoCpus"] == 500_000_000 and host["Memory"] == 256 * 2**20
            await stack.pause("redis")  # type: ignore[attr-defined]
            assert not await ping(port)
            await stack.unpause("redis")  # type: ignore[attr-defined]
            assert await ping(port)
            await stack.kill("redis")  # type: ignore[attr-defined]
            assert not await ping(port)
            await stack.start("redis")  # type: ignore[attr-defined]
            await stack.ready(30, lambda message: None)
            await stack.restart("redis")  # type: ignore[attr-defined]
            await stack.ready(30, lambda message: None)
            assert await ping(port)
        finally:
            await load.close()

    asyncio.run(scenario())
    kinds = [e.kind for e in events]
    assert kinds.index("stack-up") < kinds.index("fault-pause") < kinds.index("fault-resume") \
        < kinds.index("fault-kill") < kinds.index("fault-start") < kinds.index("fault-restart") \
        < kinds.index("stack-down")
    assert all(e.target == target.label for e in events)
    nothing_labelled(run_id)


@pytest.mark.parametrize("name", sorted(p.name for p in COMPOSE_DIR.glob("*.yml")))
def test_compose_files_load(name, docker_images, tmp_path):
    """Every compose file loads in the installed compose CLI, with and without limits (the
    Redpanda files are only checked this far: their image is not built here); the monitoring
    stack's files (Prometheus, Grafana, cAdvisor) take no broker limits."""
    from compose.docker import compose_command
    from compose.monitoring import FILES as MONITORING_FILES
    from compose.monitoring import MonitoringPorts, compose_env

    # the monitoring stack's files need what `stacks up monitoring` passes them
    given = compose_env(MonitoringPorts(), tmp_path) if name in MONITORING_FILES else {}
    for extra in ({}, {"STREAMBENCH_CPUS": "6", "STREAMBENCH_MEMORY": "2.67g"}):
        res = subprocess.run([*compose_command(), "-f", str(Path(COMPOSE_DIR) / name), "config"],
                             capture_output=True, text=True, env={**os.environ, **given, **extra},
                             timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "network_mode: host" in res.stdout
        if extra and name not in MONITORING_FILES:
            assert "cpus: 6.0" in res.stdout and "mem_limit: 2.67g" in res.stdout


def test_fault_during_a_run_is_in_the_run_files(tmp_path, docker_images):
    """The coordinator asks the target's worker to pause and resume the broker mid-run: the
    faults are events in the run files and nothing is lost."""
    run_dir = tmp_path / "run"
    workload = Workload(name="faults", rate=500, duration_s=6, warmup_s=1)
    run = Run(workload, unique_labels([resolve_target("redis:runtime=docker")]), out_dir=run_dir,
              recorder=ParquetSink)
    faults: list[asyncio.Future[None]] = []

    async def pause_and_resume() -> None:
        await run.runners[0].fault("pause", "redis")
        await asyncio.sleep(1.0)
        await run.runners[0].fault("unpause", "redis")

    def on_item(item: object) -> None:
        if isinstance(item, Tick) and item.phase == Phase.MEASURING and not faults:
            faults.append(asyncio.ensure_future(pause_and_resume()))

    run.subscribe(on_item)
    summary = run_precise(run.execute())
    assert faults and faults[0].done() and faults[0].exception() is None
    (t,) = summary.targets
    assert t.consumed == t.produced == 3500 and t.send_errors == 0
    events = ds.dataset(run_dir / "events", format="parquet").to_table().to_pydict()
    kinds = events["kind"]
    assert kinds.index("fault-pause") < kinds.index("fault-resume")
    nothing_labelled(run.run_id)
