"""Resources of local broker processes (and their children) through psutil."""

from __future__ import annotations

import contextlib

import psutil

from collectors.base import Collector, CounterDeltas, Reading


class ProcessResources(Collector):
    name = "process"

    def __init__(self, pids: tuple[int, ...]) -> None:
        self._roots = pids
        self._procs: dict[int, psutil.Process] = {}
        self._deltas = CounterDeltas()

    def _tree(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        for pid in self._roots:
            try:
                root = self._procs.get(pid) or psutil.Process(pid)
                found.append(root)
                found.extend(root.children(recursive=True))
            except psutil.Error:
                continue
        # keep the same Process objects so cpu_percent() measures since the previous call
        alive = {}
        for p in found:
            alive[p.pid] = self._procs.get(p.pid, p)
        self._procs = alive
        return list(alive.values())

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
        cpu = 0.0
        rss = 0
        procs = self._tree()
        if not procs:
            return Reading()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                cpu += p.cpu_percent(None)
                rss += p.memory_info().rss
        read, write = self._disk_totals()
        return Reading(
            cpu_percent=cpu,
            memory_bytes=rss,
            disk_read_bytes=int(self._deltas.delta("read", read)),
            disk_write_bytes=int(self._deltas.delta("write", write)),
        )
