"""Resources of local broker processes (and their children) through psutil.

A broker can be killed and started again during a run (the stacks' fault hooks): a root pid
that is gone is skipped, and a child of this process running the same command line takes its
place (the stack starts its brokers from the process that samples them).

Listing a process's children reads the status of every process on the host (psutil has no
other way on Linux): about 2 ms a listing with 120 processes, the more the busier the host. So
the trees are listed again only every RESCAN_S, or at once when a root changed or a process of
them is gone; the samples in between read the known processes alone."""

from __future__ import annotations

import contextlib
import time

import psutil

from loadgen.core.collector import Collector, CounterDeltas, Reading

# seconds between two listings of the roots' children while none of them ends
RESCAN_S = 10.0


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class ProcessResources(Collector):
    name = "process"

    def __init__(self, pids: tuple[int, ...]) -> None:
        self._roots: list[int] = list(pids)
        self._cmdlines: dict[int, list[str]] = {}  # root pid -> its command line, once read
        self._procs: dict[int, psutil.Process] = {}
        self._children: dict[int, list[psutil.Process]] = {}  # root pid -> its descendants
        self._listed_at = -RESCAN_S  # time.monotonic() of the last listing of children
        self._deltas = CounterDeltas()

    def _root(self, i: int) -> psutil.Process | None:
        """Root i as a live process: the one it was, else its replacement, else None."""
        pid = self._roots[i]
        try:
            root = self._procs.get(pid) or psutil.Process(pid)
        except psutil.Error:
            root = None
        if root is not None and _alive(root):
            if pid not in self._cmdlines:
                with contextlib.suppress(psutil.Error):
                    self._cmdlines[pid] = root.cmdline()
            return root
        cmdline = self._cmdlines.get(pid)
        if not cmdline:
            return None
        taken = set(self._roots)
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process().children():
                with contextlib.suppress(psutil.Error):
                    if child.pid not in taken and _alive(child) and child.cmdline() == cmdline:
                        self._roots[i] = child.pid
                        self._cmdlines[child.pid] = cmdline
                        return child
        return None

    def _tree(self) -> list[psutil.Process]:
        return [p for procs in self._trees().values() for p in procs]

    def _trees(self) -> dict[int, list[psutil.Process]]:
        """The live processes under each root, by the root's index."""
        found: dict[int, list[psutil.Process]] = {}
        now = time.monotonic()
        relist = now - self._listed_at >= RESCAN_S
        roots = list(map(self._root, range(len(self._roots))))
        if not relist and any(root is not None and root.pid not in self._children
                              for root in roots):
            relist = True  # a root started again: its children are not known yet
        if not relist and any(not _alive(p) for kids in self._children.values() for p in kids):
            relist = True  # one ended: others may have taken its place
        if relist:
            self._children = {}
            self._listed_at = now
        for i, root in enumerate(roots):
            if root is None:
                continue
            found[i] = [root]
            if relist:
                kids: list[psutil.Process] = []
                with contextlib.suppress(psutil.Error):
                    kids = root.children(recursive=True)
                self._children[root.pid] = kids
            found[i].extend(self._children.get(root.pid, ()))
        # keep the same Process objects so cpu_percent() measures since the previous call
        alive: dict[int, psutil.Process] = {}
        trees: dict[int, list[psutil.Process]] = {}
        for i, procs in found.items():
            for p in procs:
                if p.pid not in alive:  # a process under two roots counts once
                    alive[p.pid] = self._procs.get(p.pid, p)
                    trees.setdefault(i, []).append(alive[p.pid])
        self._procs = alive
        return trees

    async def start(self) -> None:
        for p in self._tree():
            with contextlib.suppress(psutil.Error):
                p.cpu_percent(None)
        self._disk_totals()

    def _disk_totals(self) -> tuple[float, float]:
        read = write = 0.0
        for p in self._procs.values():
            with contextlib.suppress(psutil.Error, AttributeError):
                io = p.io_counters()
                read += io.read_bytes
                write += io.write_bytes
        return read, write

    async def sample(self) -> Reading:
        """The sum over every broker; with several brokers also each one's figures as
        `broker.broker-<n>.cpu_percent` / `.memory_bytes` / `.disk_read_bytes` /
        `.disk_write_bytes` (bytes in the interval; n = 1, 2 … in the stack's order)."""
        cpu = 0.0
        rss = 0
        trees = self._trees()
        if not trees:
            return Reading()
        per_broker: dict[str, float] = {}
        for i, procs in trees.items():
            broker_cpu, broker_rss = 0.0, 0
            broker_read = broker_write = 0.0
            for p in procs:
                with contextlib.suppress(psutil.Error):
                    broker_cpu += p.cpu_percent(None)
                    broker_rss += p.memory_info().rss
                with contextlib.suppress(psutil.Error, AttributeError):
                    io = p.io_counters()
                    broker_read += io.read_bytes
                    broker_write += io.write_bytes
            cpu, rss = cpu + broker_cpu, rss + broker_rss
            if len(self._roots) > 1:
                name = f"broker.broker-{i + 1}"
                per_broker[f"{name}.cpu_percent"] = broker_cpu
                per_broker[f"{name}.memory_bytes"] = float(broker_rss)
                per_broker[f"{name}.disk_read_bytes"] = self._deltas.delta(f"read-{i}", broker_read)
                per_broker[f"{name}.disk_write_bytes"] = self._deltas.delta(f"write-{i}",
                                                                            broker_write)
        read, write = self._disk_totals()
        return Reading(
            cpu_percent=cpu,
            memory_bytes=rss,
            disk_read_bytes=int(self._deltas.delta("read", read)),
            disk_write_bytes=int(self._deltas.delta("write", write)),
            broker=per_broker,
        )
