"""Local broker processes: free loopback ports, a process group per broker that dies with
streambench, data dirs that name their owner, and a stop that always leaves nothing behind."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from loadgen.core.errors import StackError
from loadgen.core.stack import Stack

_PR_SET_PDEATHSIG = 1
PAUSE_WAIT_S = 2.0  # a pause waits at most this long for every thread of the broker to stop


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
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=cwd, env=env, preexec_fn=_die_with_parent, close_fds=True,
        )
        _started[:] = [p for p in _started if p.returncode is None] + [proc]
        return proc
    except FileNotFoundError:
        raise StackError(f"{argv[0]} not found") from None
    finally:
        log.close()


def signal_tree(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send sig to a broker's whole process tree: its process group (start_process made one)
    and, while the broker itself has not been reaped (its pid cannot have been reused), every
    descendant, even one that left the group."""
    procs: list[psutil.Process] = []
    if proc.returncode is None:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(proc.pid)
            procs = [root, *root.children(recursive=True)]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


def _tree_pids(proc: subprocess.Popen[bytes]) -> list[int]:
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(proc.pid)
        return [root.pid, *(p.pid for p in root.children(recursive=True))]
    return []


def _all_stopped(pids: list[int]) -> bool:
    """Whether every thread of these processes is in the stopped state (a process that has
    exited counts as stopped)."""
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                    state = f.read().rpartition(b")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"T", b"t", b"Z", b"X"):
                return False
    return True


def pause_tree(proc: subprocess.Popen[bytes], timeout_s: float = PAUSE_WAIT_S) -> bool:
    """SIGSTOP a broker's process tree and wait until every thread of it has stopped: the
    signal takes effect when one thread of a process acts on it, and until then the others
    run on (on a busy host, long enough to answer a request). False when some thread still
    ran after `timeout_s`."""
    signal_tree(proc, signal.SIGSTOP)
    pids = _tree_pids(proc)
    deadline = time.monotonic() + timeout_s
    while not _all_stopped(pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM the process tree, wait, then SIGKILL what is left. A paused (SIGSTOPped) broker
    is let go on after the SIGTERM, so that it can act on it."""
    if proc.poll() is None:
        signal_tree(proc, signal.SIGTERM)
        signal_tree(proc, signal.SIGCONT)
        deadline = time.monotonic() + grace_s
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    signal_tree(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def kill_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process tree at once (a crash) and reap it."""
    signal_tree(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@dataclass
class LocalNode:
    """One broker process of a local stack, with what it takes to start it again: its command
    line, working dir, environment and log (its ports and data dir are in the command line or
    its config files, which stay)."""

    name: str  # as faults name it, e.g. "broker-2"
    argv: list[str]
    log: Path
    cwd: Path | None = None
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Start the process (from the main thread: see start_process)."""
        self.proc = start_process(self.argv, self.log, cwd=self.cwd, env=self.env)
        self.paused = False

    def pause(self) -> bool:
        """SIGSTOP, and wait until it has taken effect; False when it had not within
        PAUSE_WAIT_S."""
        assert self.proc is not None
        self.paused = True
        return pause_tree(self.proc)

    def resume(self) -> None:
        if self.proc is not None:
            signal_tree(self.proc, signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        if self.proc is not None:
            kill_process(self.proc)
        self.paused = False

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace_s)
        self.paused = False


ReadyProbe = Callable[[LocalNode, float], Awaitable[None]]
RESTART_GRACE_S = 10.0
FAULT_READY_TIMEOUT_S = 120.0


async def node_fault(label: str, node: LocalNode, action: str, ready: ReadyProbe,
                     grace_s: float = RESTART_GRACE_S,
                     ready_timeout_s: float = FAULT_READY_TIMEOUT_S) -> str:
    """One fault (a name of loadgen.core.stack.FAULTS) on one local broker; `ready` waits until a
    (re)started node answers, or raises StackError. Returns the event's detail."""
    if action in ("pause", "resume", "kill") and node.proc is None:
        raise StackError(f"{label}: {node.name} was never started")
    if action == "pause":
        if not node.running:
            raise StackError(f"{label}: cannot pause {node.name}: it is not running "
                             f"(exit code {node.proc.returncode if node.proc else None}); start it first")
        if not await asyncio.to_thread(node.pause):
            return (f"{node.name} (pid {node.pid}): SIGSTOP to its process tree (some of its "
                    f"threads still ran {PAUSE_WAIT_S:g} s later)")
        return f"{node.name} (pid {node.pid}): SIGSTOP to its process tree"
    if action == "resume":
        node.resume()
        return f"{node.name} (pid {node.pid}): SIGCONT to its process tree"
    if action == "kill":
        was = "" if node.running else " (it had exited already)"
        await asyncio.to_thread(node.kill)
        return f"{node.name} (pid {node.pid}): SIGKILL to its process tree{was}"
    if action == "start" and node.running:
        raise StackError(f"{label}: cannot start {node.name}: it is running (pid {node.pid}"
                         f"{', paused' if node.paused else ''}); restart stops and starts it"
                         + (", resume lets it go on" if node.paused else ""))
    old = node.pid
    if action == "restart" and node.proc is not None:
        await asyncio.to_thread(node.stop, grace_s)
    # from the event loop's (main) thread: the broker's death signal is tied to it
    node.start()
    await ready(node, ready_timeout_s)
    how = "stopped (SIGTERM) and started again" if action == "restart" else "started again"
    return f"{node.name} {how}: pid {old} -> {node.pid}"


def tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


OWNER_FILE = ".streambench-owner"  # in each data dir: `<host>:<pid>:<process start time>`
# `<tmp>/streambench-<what>-<pid>-<mkdtemp's suffix>`: what make_data_dir makes
_DATA_DIR_RE = re.compile(r"^streambench-[a-z]+-(\d+)-[A-Za-z0-9_]+$")
_made_dirs: set[Path] = set()  # the data dirs this process made and has not removed
_started: list[subprocess.Popen[bytes]] = []  # the brokers this process started


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time():.2f}"


def _owner_alive(owner: str) -> bool | None:
    """Whether the process an owner line names still runs; None when it ran on another host
    (a temp folder shared over the network)."""
    host, _, rest = owner.strip().partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname():
        return None
    if not pid.isdigit():
        return False
    try:
        proc = psutil.Process(int(pid))
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        # another process that took the pid since started later
        return not started or abs(proc.create_time() - float(started)) < 1.0
    except (psutil.Error, ValueError):
        return False


def leftover_dirs() -> list[tuple[Path, str]]:
    """The data dirs in the temp folder whose owner no longer runs (streambench, or its load
    worker, was killed outright), with their owner's pid. A dir made before owners were
    recorded is judged by the pid in its name."""
    root = Path(tempfile.gettempdir())
    found = []
    with contextlib.suppress(OSError):
        for path in sorted(root.glob("streambench-*")):
            m = _DATA_DIR_RE.match(path.name)
            if m is None or not path.is_dir() or path.is_symlink() or path in _made_dirs:
                continue
            try:
                owner = (path / OWNER_FILE).read_text()
            except FileNotFoundError:
                owner = ""
            except OSError:
                continue
            if owner:
                alive = _owner_alive(owner)
                pid = owner.partition(":")[2].partition(":")[0]
            else:  # no owner recorded (yet, or by an older streambench): the name's pid
                alive = psutil.pid_exists(int(m.group(1)))
                pid = m.group(1)
            if alive is False:
                found.append((path, pid))
    return found


def remove_leftover_dirs() -> list[str]:
    """Remove the data dirs of dead owners (leftover_dirs); returns a line for each."""
    removed = []
    for path, pid in leftover_dirs():
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(f"{path} (owner pid {pid} gone)")
    return removed


def make_data_dir(prefix: str) -> Path:
    """A new dir `<tmp>/<prefix><pid>-XXXXXXXX` for a stack's data, with this process recorded
    as its owner, once the data dirs of dead owners are removed (of every platform: a run of
    one platform cleans up after a killed run of another)."""
    remove_leftover_dirs()
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    try:
        (path / OWNER_FILE).write_text(_owner() + "\n")
    except OSError as exc:
        shutil.rmtree(path, ignore_errors=True)
        raise StackError(f"cannot write in {path}: {exc.strerror or exc}") from None
    _made_dirs.add(path)
    return path


def abandon() -> None:
    """The owner is gone (the coordinator of this load worker was killed outright): SIGKILL
    every broker this process started, at once, and remove its data dirs. For the last moment
    of a process: nothing is stopped gracefully, no log is kept."""
    for proc in _started:
        if proc.poll() is None:
            signal_tree(proc, signal.SIGKILL)
    for proc in _started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    for path in list(_made_dirs):
        shutil.rmtree(path, ignore_errors=True)
        _made_dirs.discard(path)


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
        _made_dirs.discard(data_dir)


def nodes_down(nodes: list[LocalNode]) -> dict[str, str]:
    """The started nodes whose process has ended, and how it ended."""
    down = {}
    for node in nodes:
        code = node.proc.poll() if node.proc is not None else None
        if code is not None:
            down[node.name] = (f"killed by signal {-code}" if code < 0
                               else f"exited with code {code}")
    return down


class OneNodeLocalStack(Stack):
    """A local stack of one broker process in a data dir of its own: the fault hooks, the death
    watch and the tear-down (logs kept, data removed). Subclasses start `_node` in `_dir` and
    say when a (re)started node answers."""

    runtime = "local"
    NODE = "broker"  # the fault hooks' name of the one broker
    SERVER = "the broker"  # the process as messages name it, e.g. "redis-server"
    LOGS: tuple[str, ...] = ()  # the data dir's log files kept at down()
    _node: LocalNode | None = None
    _dir: Path | None = None

    async def _node_ready(self, node: LocalNode, timeout_s: float) -> None:
        """Return once a node started by a fault answers; StackError when it does not."""
        raise NotImplementedError

    def brokers(self) -> list[str]:
        return [self.NODE]

    def down_brokers(self) -> dict[str, str]:
        return nodes_down([self._node] if self._node is not None else [])

    async def _apply_fault(self, action: str, broker: str) -> str:
        if self._node is None:
            raise StackError(f"{self._label}: {self.SERVER} is not running (the stack is not up)")
        return await node_fault(self._label, self._node, action, self._node_ready)

    def log_files(self) -> list[Path]:
        return [self._dir / name for name in self.LOGS] if self._dir is not None else []

    async def down(self) -> None:
        logs = self.log_files()
        node, data_dir, self._node, self._dir = self._node, self._dir, None, None
        await stop_and_remove(node.proc if node is not None else None, data_dir, logs,
                              self.context.log_dir)
