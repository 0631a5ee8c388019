"""Local broker processes: free loopback ports, a process group per broker that dies with
streambench, and a stop that always leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from loadgen.errors import StackError

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the broker binding it can still race; callers
    retry on a bind failure)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _die_with_parent() -> None:
    # New process group so a Ctrl-C in the terminal reaches streambench only, which then stops
    # the broker itself; and the kernel kills the broker should streambench be killed outright.
    os.setpgrp()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start_process(argv: list[str], log_path: Path, cwd: Path | None = None,
                  env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a broker in its own process group with output to log_path. Must be called from
    the main thread: the death signal fires when the thread that started the child exits."""
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
    try:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, env=env, preexec_fn=_die_with_parent, close_fds=True,
        )
    except FileNotFoundError:
        raise StackError(f"{argv[0]} not found") from None
    finally:
        log.close()


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL what is left."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def remove_stale_dirs(prefix: str) -> None:
    """Remove data dirs `<tmp>/<prefix><pid>-*` left by a streambench that was killed outright
    (its pid no longer runs)."""
    root = Path(tempfile.gettempdir())
    for path in root.glob(f"{prefix}*"):
        pid_text = path.name[len(prefix):].split("-", 1)[0]
        if pid_text.isdigit() and not psutil.pid_exists(int(pid_text)):
            shutil.rmtree(path, ignore_errors=True)


LOG_LIMIT_BYTES = 16 * 2**20  # of each log kept: its end


def keep_logs(files: list[Path], root: Path, log_dir: Path | None) -> None:
    """Copy a stopped broker's log files (their last LOG_LIMIT_BYTES) into the run's log dir,
    named by their path under root (`node-1/broker.log` → `node-1-broker.log`); never raises."""
    if log_dir is None:
        return
    for path in files:
        with contextlib.suppress(OSError, ValueError):
            if not path.is_file() or path.stat().st_size == 0:
                continue
            name = "-".join(path.relative_to(root).parts)
            log_dir.mkdir(parents=True, exist_ok=True)
            with path.open("rb") as src, (log_dir / name).open("wb") as dst:
                src.seek(max(0, path.stat().st_size - LOG_LIMIT_BYTES))
                shutil.copyfileobj(src, dst)


async def stop_and_remove(proc: subprocess.Popen[bytes] | None, data_dir: Path | None,
                          logs: list[Path] | None = None, log_dir: Path | None = None) -> None:
    """Stop a local broker (see stop_process) off the event loop, keep its logs in log_dir,
    then remove its data dir."""
    if proc is not None:
        await asyncio.to_thread(stop_process, proc)
    if data_dir is not None:
        keep_logs(logs or [], data_dir, log_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
