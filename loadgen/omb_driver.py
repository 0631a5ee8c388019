"""`driver=FILE`: an OpenMessaging Benchmark driver YAML file as a target's settings. Kafka
files (`producerConfig`, `consumerConfig`, `commonConfig`, `topicConfig` as properties text,
`replicationFactor`) and Pulsar files (`producer:`, `consumer:` sections) map field by field
onto the namespaced settings; Redis and RabbitMQ files hold only connection and client-pool
settings, none of which streambench takes from a file. Every field streambench does not act on
is named in a warning on stderr, with what to use instead where there is something."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from loadgen.core.target import OptionSpec

Check = Callable[[str, str], tuple[str, Any]]
# fields that name the driver, not a setting
_IDENTITY = ("name", "driverClass")


def _load(path: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).expanduser().read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise ValueError(f"{path} is not valid YAML") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an OpenMessaging Benchmark driver (a mapping)")
    return data


def _properties(text: Any) -> dict[str, str]:
    out = {}
    for line in str(text or "").splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def _warn(path: str, notes: list[str]) -> None:
    for note in notes:
        sys.stderr.write(f"streambench: warning: driver {path}: {note} (not acted on)\n")


def _mapped(space: str, name: str, value: str, checks: Mapping[str, Check],
            settings: dict[str, str], notes: list[str], field: str) -> None:
    try:
        checks[space](name, value)
    except ValueError as exc:
        notes.append(f"{field} {name}={value}: {exc}")
        return
    settings[f"{space}.{name}"] = value


def kafka_driver(path: str, checks: Mapping[str, Check]) -> dict[str, str]:
    data = _load(path)
    settings: dict[str, str] = {}
    notes: list[str] = []
    for field, spaces in (("producerConfig", ("producer",)), ("consumerConfig", ("consumer",)),
                          ("topicConfig", ("topic",)),
                          ("commonConfig", ("producer", "consumer", "admin"))):
        for name, value in _properties(data.get(field)).items():
            if name == "bootstrap.servers":
                notes.append(f"{field} bootstrap.servers: give the cluster as kafka@HOST:PORT")
                continue
            for space in spaces:
                _mapped(space, name, value, checks, settings, notes, field)
    for field, value in data.items():
        if field == "replicationFactor":
            settings["replication"] = str(value)  # the topic's, as the option replication=
        elif field not in (*_IDENTITY, "producerConfig", "consumerConfig", "topicConfig",
                           "commonConfig"):
            notes.append(f"{field}")
    _warn(path, notes)
    return settings


# OMB's Pulsar driver fields -> pulsar-client keyword arguments
_PULSAR_PRODUCER = {"batchingEnabled": "batching_enabled",
                    "batchingMaxPublishDelayMs": "batching_max_publish_delay_ms",
                    "batchingMaxBytes": "batching_max_allowed_size_in_bytes",
                    "batchingMaxMessages": "batching_max_messages",
                    "pendingQueueSize": "max_pending_messages",
                    "maxPendingMessagesAcrossPartitions": "max_pending_messages_across_partitions"}
_PULSAR_CONSUMER = {"receiverQueueSize": "receiver_queue_size"}
_PULSAR_INSTEAD = {
    "blockIfQueueFull": "streambench never blocks on a full queue",
    "topicType": "give persistent=false for non-persistent topics",
    "namespacePrefix": "give namespace=TENANT/NAMESPACE",
    "serviceUrl": "give the cluster as pulsar@pulsar://HOST:6650,http://HOST:8080",
    "httpUrl": "give the cluster as pulsar@pulsar://HOST:6650,http://HOST:8080",
}


def pulsar_driver(path: str, checks: Mapping[str, Check]) -> dict[str, str]:
    data = _load(path)
    settings: dict[str, str] = {}
    notes: list[str] = []
    for section, space, names in (("producer", "producer", _PULSAR_PRODUCER),
                                  ("consumer", "consumer", _PULSAR_CONSUMER)):
        fields = data.get(section) or {}
        if not isinstance(fields, dict):
            raise ValueError(f"{path}: {section}: expected a mapping")
        for field, value in fields.items():
            text = "true" if value is True else "false" if value is False else str(value)
            if field == "pendingQueueSize" and str(value) == "0":
                notes.append(f"{section}.pendingQueueSize 0 (unbounded in the Java client): "
                             "pulsar-client needs a bound")
            elif field in names:
                _mapped(space, names[field], text, checks, settings, notes, section)
            else:
                why = _PULSAR_INSTEAD.get(field)
                notes.append(f"{section}.{field}" + (f": {why}" if why else ""))
    client = data.get("client") or {}
    for field in (client if isinstance(client, dict) else {}):
        why = _PULSAR_INSTEAD.get(field)
        notes.append(f"client.{field}" + (f": {why}" if why else ""))
    for field in data:
        if field not in (*_IDENTITY, "client", "producer", "consumer"):
            notes.append(field)
    _warn(path, notes)
    return settings


# OMB's Redis driver: where the server is and Jedis's connection pool
REDIS_FIELDS = {
    "redisHost": "give the server as redis@HOST:PORT",
    "redisPort": "give the server as redis@HOST:PORT",
    "redisPass": "give password_file=PATH or password_env=NAME",
    "redisUser": "give user=NAME",
    "jedisPoolMaxTotal": "streambench opens one connection per producer and per consumer",
    "jedisPoolMaxIdle": "streambench opens one connection per producer and per consumer",
}
# OMB's RabbitMQ driver (AMQP queues): streambench's rabbitmq target is RabbitMQ Streams
_CREATION = "streambench creates its clients at the start, one after another"
RABBITMQ_FIELDS = {
    "amqpUris": "give the server as rabbitmq@HOST:PORT (the stream protocol, not AMQP)",
    "messagePersistence": "a stream always stores its messages on disk",
    "queueType": "the rabbitmq target uses streams (one per partition), not classic or "
                 "quorum queues",
    "producerCreationDelay": _CREATION, "producerCreationBatchSize": _CREATION,
    "consumerCreationDelay": _CREATION, "consumerCreationBatchSize": _CREATION,
}


def named_driver(fields: Mapping[str, str]) -> Callable[[str], dict[str, str]]:
    """A driver file of which streambench acts on no field (OMB's Redis and RabbitMQ drivers
    hold connection and client-pool settings only): each field is named in a warning with what
    to give instead, and the file adds no setting."""
    def expand(path: str) -> dict[str, str]:
        data = _load(path)
        _warn(path, [f"{f}: {fields[f]}" if f in fields else f for f in data if f not in _IDENTITY])
        return {}
    return expand


def _readable(text: str) -> str:
    _load(text)
    return text


def driver_option(expand: Callable[[str], dict[str, str]]) -> OptionSpec:
    return OptionSpec("an OpenMessaging Benchmark driver YAML file: its producer, consumer and "
                      "topic settings (a warning names each field not acted on)", default=None,
                      parse=_readable, expands=expand, expands_as="user")
