"""Where a target's brokers run, and the TARGET options of the docker runtime that every
platform with one shares: per-broker CPU and memory limits, the telemetry source, keeping the
data volumes.

The runtime of a target is, first match wins: its own `runtime=` option; `--runtime` of the
run; $STREAMBENCH_RUNTIME where the platform has that runtime; docker when the platform has no
other; docker when a Docker engine (and a compose CLI) answers and every image the platform's
compose file runs is present locally (nothing to pull); else the platform's last runtime
(local). When the rule decides, its reason goes with the target (loadgen.core.stack.RUNTIME_NOTE)
and the stack says it as its first progress line. `PLATFORM@ADDRESS` is always the external
runtime. Limits follow the same order: the
target's `cpus=`/`memory=`, then the run's `--cpus`/`--memory` (or the workload's
brokerCpus/brokerMemory); they apply to docker targets only."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from compose.docker import engine_answers, image_present, parse_cpus, parse_memory
from loadgen.core.errors import TargetError
from loadgen.core.security import ClientSecurity
from loadgen.core.stack import CADVISOR_ADDRESS, RUNTIME_NOTE
from loadgen.core.target import OptionSpec, Target, parse_bool

RUNTIME_ENV = "STREAMBENCH_RUNTIME"
RESOURCE_SOURCES = ("docker", "cadvisor", "process")
DOCKER_ONLY = ("cpus", "memory", "keep")


def runtime_options(runtimes: tuple[str, ...]) -> dict[str, OptionSpec]:
    """The `runtime` option and the docker runtime's options, for a platform that can run in
    the given runtimes (besides external)."""
    default_rule = ("docker when a Docker engine answers and the image is present locally, "
                    "else local" if len(runtimes) > 1 else runtimes[0])
    return {
        "runtime": OptionSpec(f"where the brokers run (default: {default_rule})", default=None,
                              choices=runtimes),
        "cpus": OptionSpec("docker: CPU limit of each broker container, e.g. 6 (default: none)",
                           default=None, parse=parse_cpus),
        "memory": OptionSpec("docker: memory limit of each broker container, e.g. 2.67g "
                             "(default: none)", default=None, parse=parse_memory),
        "resources": OptionSpec("source of the CPU and memory figures (default: docker stats for "
                                "containers, the process tree for local brokers; cadvisor: a "
                                "cAdvisor streambench starts, or the one --cadvisor names)",
                                default=None,
                                choices=RESOURCE_SOURCES),
        "keep": OptionSpec("docker: keep the data volumes after the run", default=False,
                           parse=parse_bool, flag=True),
    }


def default_runtime(name: str, runtimes: tuple[str, ...], chosen: str | None = None,
                    images: Callable[[], list[str]] = list) -> tuple[str, str]:
    """The runtime of a target that names none (see the module's docstring), and why, when the
    default rule decided ("" when the user did). `images`: what the docker runtime would run."""
    if chosen is not None:
        if chosen not in runtimes:
            raise TargetError(f"{name} has no {chosen} runtime (it runs: {', '.join(runtimes)}; "
                              f"an existing cluster: {name}@HOST:PORT)")
        return chosen, ""
    preferred = os.environ.get(RUNTIME_ENV)
    if preferred in runtimes:
        return preferred, ""
    if "docker" not in runtimes:
        return runtimes[-1], ""
    if len(runtimes) == 1:
        return "docker", ""
    local = runtimes[-1]
    if not engine_answers():
        return local, f"{local} runtime (no Docker engine with a compose CLI answers)"
    wanted = images()
    if not wanted:
        return "docker", f"docker runtime (a Docker engine answers; --runtime {local} for a local process)"
    missing = [image for image in wanted if not image_present(image)]
    if missing:
        return local, (f"{local} runtime ({_images(missing)} not present; --runtime docker to "
                       f"pull {'them' if len(missing) > 1 else 'it'})")
    return "docker", f"docker runtime ({_images(wanted)} present; --runtime {local} for a local process)"


def _images(names: list[str]) -> str:
    return f"image{'s' if len(names) > 1 else ''} {', '.join(names)}"


def place(target: Target, runtimes: tuple[str, ...], chosen: str | None = None,
          images: Callable[[Target], list[str]] = lambda _target: []) -> Target:
    """Fill in the runtime of a parsed target and check the options that depend on it.
    `images`: the images the platform's docker runtime would run for it (Platform.docker_images)."""
    ClientSecurity.of(target)  # authentication and TLS: external only, files readable
    if "runtime" not in target.options:
        return target
    if target.address is not None:
        check(target)
        return target
    options = dict(target.options)
    if not options["runtime"]:
        options["runtime"], note = default_runtime(target.platform, runtimes, chosen,
                                                   lambda: images(target))
        if note:
            options[RUNTIME_NOTE] = note
    placed = dataclasses.replace(target, options=options)
    check(placed)
    return placed


def check(target: Target) -> None:
    opts = target.options
    if target.runtime == "docker":
        return
    misplaced = sorted(k for k in DOCKER_ONLY if k in target.explicit)
    if misplaced:
        hint = "add runtime=docker" if target.address is None else "it is an existing cluster"
        raise TargetError(f"target {target.spec!r}: {', '.join(misplaced)} apply to containers "
                          f"streambench starts ({hint}); leave them out")
    if opts.get("resources") in ("docker", "cadvisor"):
        raise TargetError(f"target {target.spec!r}: resources={opts['resources']} needs the "
                          f"docker runtime; this target runs {target.runtime}")


def with_run_settings(target: Target, cpus: float | None = None, memory: str | None = None,
                      resources: str | None = None, keep: bool = False,
                      cadvisor: str | None = None) -> Target:
    """The run's --cpus/--memory/--resources/--keep filled into a target that does not set
    them itself (limits and keep: docker targets only); --cadvisor HOST:PORT stands for
    --resources cadvisor, with the cAdvisor to read."""
    if cadvisor is not None:
        if resources not in (None, "cadvisor"):
            raise TargetError(f"--cadvisor {cadvisor} names the cAdvisor of --resources cadvisor, "
                              f"not of --resources {resources}; leave one out")
        resources = "cadvisor"
    if "runtime" not in target.options or target.address is not None:
        return target
    docker = target.runtime == "docker"
    fill: dict[str, Any] = {}
    if docker and cpus is not None and "cpus" not in target.explicit:
        fill["cpus"] = cpus
    if docker and memory is not None and "memory" not in target.explicit:
        try:
            fill["memory"] = parse_memory(str(memory))
        except ValueError as exc:
            raise TargetError(f"--memory {memory}: {exc}") from None
    if docker and keep and "keep" not in target.explicit:
        fill["keep"] = True
    if resources is not None and "resources" not in target.explicit:
        if not docker and resources != "process":
            asked = f"--cadvisor {cadvisor}" if cadvisor else f"--resources {resources}"
            raise TargetError(f"{asked} needs the docker runtime; target {target.spec!r} runs "
                              "locally")
        fill["resources"] = resources
    if cadvisor is not None and {**target.options, **fill}.get("resources") == "cadvisor":
        fill[CADVISOR_ADDRESS] = cadvisor
    if not fill:
        return target
    return dataclasses.replace(target, options={**target.options, **fill})
