"""Where a target's producers and consumers run when its load is spread over several worker
processes, and how many processes `--processes auto` takes.

Producers and consumers are dealt in one sequence (every producer, then every consumer), client
k to process k mod N: with one producer and one consumer over two processes they run apart,
and no process is left without a client while there are clients enough to go round."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Placement:
    """One process's share: producer numbers (topic × producers + i) and consumer numbers
    ((topic × subscriptions + subscription) × consumers + i)."""

    producers: list[int] = field(default_factory=list)
    consumers: list[int] = field(default_factory=list)

    def describe(self) -> str:
        return f"{len(self.producers)} producer(s), {len(self.consumers)} consumer(s)"


def place(producers: int, consumers: int, processes: int,
          split_roles: bool = False) -> list[Placement]:
    """Deal `producers` then `consumers` over `processes` processes, round robin. With
    `split_roles` (and two processes or more) the producers go round the first half of the
    processes and the consumers round the others: no process has both."""
    if split_roles and processes >= 2:
        half = processes // 2
        shares = [Placement() for _ in range(processes)]
        for k in range(producers):
            shares[k % half].producers.append(k)
        for k in range(consumers):
            shares[half + k % (processes - half)].consumers.append(k)
        return shares
    shares = [Placement() for _ in range(processes)]
    for k in range(producers + consumers):
        share = shares[k % processes]
        if k < producers:
            share.producers.append(k)
        else:
            share.consumers.append(k - producers)
    return shares


def auto_processes(clients: int, targets: int, cores: int | None = None) -> int:
    """Worker processes per target for `--processes auto`: one per client while the host has
    cores to spare (one core is left to the brokers and the dashboard, the rest shared by the
    targets), and at least one."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    spare = max(1, (cores - 1) // max(1, targets))
    return max(1, min(clients, spare))
