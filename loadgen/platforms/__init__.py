"""The platforms streambench can drive: their TARGET options, stack, driver and collectors.
Adding a platform means adding one entry here and one driver module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectors.base import Collector
from collectors.process import ProcessResources
from compose.stack import Stack, StackDescription
from loadgen.errors import TargetError
from loadgen.platforms.base import Driver
from loadgen.target import OptionSpec, Target, parse_bool, parse_target


@dataclass(frozen=True)
class Platform:
    name: str
    summary: str
    options: dict[str, OptionSpec]
    runtimes: tuple[str, ...]
    make_stack: Callable[[Target], Stack]
    make_driver: Callable[[Target, StackDescription], Driver]
    # collectors that need the topic's partitions and the subscriptions: (target, desc, topic,
    # partitions, subscriptions)
    make_collectors: Callable[[Target, StackDescription, str, int, list[str]], list[Collector]]


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise ValueError("must be a port number between 1 and 65535")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be 0 or more")
    return value


def _redis_stack(target: Target) -> Stack:
    from compose.redis import RedisExternalStack, RedisLocalStack

    if target.runtime == "external":
        return RedisExternalStack(target, target.label)
    return RedisLocalStack(target, target.label)


def _redis_driver(target: Target, desc: StackDescription) -> Driver:
    from compose.redis import parse_address
    from loadgen.platforms.redis_streams import RedisStreamsDriver

    host, port = parse_address(desc.endpoints["redis"])
    return RedisStreamsDriver(host, port, maxlen=int(target.options.get("maxlen") or 0))


def _redis_collectors(target: Target, desc: StackDescription, topic: str, partitions: int,
                      subscriptions: list[str]) -> list[Collector]:
    from collectors.redis import RedisTelemetry
    from compose.redis import parse_address
    from loadgen.platforms.redis_streams import stream_names

    host, port = parse_address(desc.endpoints["redis"])
    found: list[Collector] = [RedisTelemetry(host, port, stream_names(topic, partitions), subscriptions)]
    if desc.pids:
        found.insert(0, ProcessResources(desc.pids))
    return found


PLATFORMS: dict[str, Platform] = {
    "redis": Platform(
        name="redis",
        summary="Redis Streams (XADD / XREADGROUP + XACK); a partition is a stream",
        options={
            "aof": OptionSpec("append-only file on (fsync per `fsync`, default every second)",
                              default=False, parse=parse_bool, flag=True),
            "fsync": OptionSpec("appendfsync policy with aof", default="everysec",
                                choices=("always", "everysec", "no")),
            "port": OptionSpec("loopback port of the local redis-server (default: a free one)",
                               default=0, parse=_port),
            "maxlen": OptionSpec("trim each stream to about this many entries (0 = never)",
                                 default=0, parse=_non_negative),
            "runtime": OptionSpec("where the broker runs", default="local", choices=("local",)),
        },
        runtimes=("local", "external"),
        make_stack=_redis_stack,
        make_driver=_redis_driver,
        make_collectors=_redis_collectors,
    ),
}


def option_tables() -> dict[str, dict[str, OptionSpec]]:
    return {name: p.options for name, p in PLATFORMS.items()}


def resolve_target(spec: str) -> Target:
    target = parse_target(spec, option_tables())
    if target.address is not None and target.explicit & {"runtime", "port"}:
        raise TargetError(f"target {spec!r}: an @ADDRESS target uses an existing server; "
                          "runtime= and port= do not apply")
    return target
