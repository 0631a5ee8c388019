"""`streambench stacks ls|prune`: what streambench started in Docker that is still there.

Everything streambench starts carries the label `streambench.run`; its compose project groups
it per run and target, and `streambench.owner=<host>:<pid>` names the process that owns it. A
project whose owner is gone (streambench was killed outright, or crashed) is a leftover:
`prune` removes its containers, volumes and networks. Volumes a run kept on purpose (--keep)
and the monitoring stack (`stacks up monitoring`, which outlives the command that started it)
stay until `prune --all`, which removes every streambench-labelled project, those of runs still
going included.

Local stacks keep their data in `<tmp>/streambench-<platform>-<pid>-*` dirs that record their
owner (compose.process): `ls` lists those whose owner is gone and `prune` removes them, with or
without a Docker engine (the next run of any local stack removes them too)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import Any

import psutil

from compose.docker import OWNER_LABEL, PROJECT_LABEL, RUN_LABEL, TARGET_LABEL, engine, remove_project
from compose.monitoring import PROJECT as MONITORING_PROJECT
from compose.monitoring import remove_targets
from compose.process import leftover_dirs, remove_leftover_dirs
from loadgen.core.errors import StackError


@dataclass
class Project:
    """One compose project streambench started."""

    name: str
    run: str = ""
    target: str = ""
    owner: str = ""
    containers: list[str] = field(default_factory=list)  # "name (status)"
    volumes: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)

    @property
    def owner_alive(self) -> bool | None:
        """Whether the owning streambench still runs; None when it ran on another host."""
        host, _, pid = self.owner.rpartition(":")
        if not pid.isdigit():
            return False
        if host != socket.gethostname():
            return None
        try:
            return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    @property
    def kept(self) -> bool:
        """Only volumes left: data a run kept on purpose (--keep)."""
        return bool(self.volumes) and not self.containers and not self.networks

    @property
    def monitoring(self) -> bool:
        """The monitoring stack: up until `stacks down monitoring`, whoever started it."""
        return self.name == MONITORING_PROJECT

    @property
    def leftover(self) -> bool:
        return self.owner_alive is False and not self.kept and not self.monitoring


def _labels(obj: Any) -> dict[str, str]:
    return dict(getattr(obj, "labels", None) or obj.attrs.get("Labels") or {})


def projects(client: Any) -> list[Project]:
    found: dict[str, Project] = {}

    def project_of(labels: dict[str, str]) -> Project:
        name = labels.get(PROJECT_LABEL, "(no compose project)")
        p = found.setdefault(name, Project(name))
        p.run = p.run or labels.get(RUN_LABEL, "")
        p.target = p.target or labels.get(TARGET_LABEL, "")
        p.owner = p.owner or labels.get(OWNER_LABEL, "")
        return p

    label = {"label": RUN_LABEL}
    for c in client.containers.list(all=True, filters=label):
        p = project_of(_labels(c))
        p.containers.append(f"{c.name} ({c.status})")
    for v in client.volumes.list(filters=label):
        project_of(_labels(v)).volumes.append(v.name)
    for n in client.networks.list(filters=label):
        project_of(_labels(n)).networks.append(n.name)
    return sorted(found.values(), key=lambda p: p.name)


def _state(p: Project) -> str:
    if p.monitoring:
        return "the monitoring stack (stacks down monitoring stops it)"
    if p.kept:
        return "volumes kept by the run (prune --all removes them)"
    alive = p.owner_alive
    if alive is None:
        return f"owner {p.owner} (another host)"
    return f"owner pid {p.owner.rpartition(':')[2]} " + ("running" if alive else "gone: leftover")


def _no_engine(exc: StackError) -> str:
    return f"Docker projects not looked at: {exc}"


def list_stacks() -> list[str]:
    """One line per project, then its containers, volumes and networks; then the local data
    dirs left by killed runs. Without a Docker engine, a line says so and the dirs follow."""
    dirs = [f"data dir {path}  owner pid {pid} gone: leftover" for path, pid in leftover_dirs()]
    try:
        client = engine()
    except StackError as exc:
        if dirs:
            return [_no_engine(exc), *dirs]
        raise
    try:
        lines = []
        for p in projects(client):
            lines.append(f"{p.name}  run {p.run or '?'}  target {p.target or '?'}  {_state(p)}")
            lines += [f"  container {c}" for c in p.containers]
            lines += [f"  volume {v}" for v in p.volumes]
            lines += [f"  network {n}" for n in p.networks]
        return lines + dirs
    finally:
        client.close()


def prune_stacks(everything: bool = False) -> tuple[list[str], list[str]]:
    """Remove leftover projects (every project with everything=True) and the local data dirs
    of dead owners; returns (what was removed, what was kept and why: projects whose
    streambench still runs, Docker projects when no engine answers)."""
    removed = [f"data dir {line}" for line in remove_leftover_dirs()]
    skipped: list[str] = []
    try:
        client = engine()
    except StackError as exc:
        return removed, [_no_engine(exc)]
    try:
        for p in projects(client):
            if not (everything or p.leftover):
                skipped.append(f"{p.name} ({_state(p)})")
                continue
            removed += remove_project(client, p.name)
            if p.monitoring:
                removed += remove_targets()
        return removed, skipped
    finally:
        client.close()
