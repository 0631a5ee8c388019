"""`HOST:PORT` addresses of existing servers (redis@, nats@, rabbitmq@, kafka@ …): one parser
for every platform that takes them, IPv6 included, and a reason in the error."""

from __future__ import annotations

import socket

import pytest
from aiokafka.conn import collect_hosts

from compose.kafka import bootstrap_text, parse_bootstrap
from compose.nats import parse_address as nats_address
from compose.rabbitmq import parse_address as rabbitmq_address
from compose.redis import parse_address as redis_address
from loadgen.core.errors import TargetError
from loadgen.core.target import split_host_port


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:6380", ("127.0.0.1", 6380)),
    ("broker.example", ("broker.example", 6379)),
    (" broker.example:1 ", ("broker.example", 1)),
    (":7000", ("127.0.0.1", 7000)),
    ("", ("127.0.0.1", 6379)),
    ("[::1]:6380", ("::1", 6380)),
    ("[::1]", ("::1", 6379)),
    ("::1", ("::1", 6379)),  # an IPv6 address alone: no port in it
    ("fe80::1:2", ("fe80::1:2", 6379)),
    ("host:65535", ("host", 65535)),
])
def test_addresses(text, expected):
    assert split_host_port(text, 6379) == expected


@pytest.mark.parametrize("text, reason", [
    ("127.0.0.1:9092:acks=1", "more than one ':'"),
    ("[::1", "a [ with no ] after the IPv6 address"),
    ("[::1]6379", "'6379' after the ]"),
    ("[]:6379", "nothing between [ and ]"),
    ("host:", "port '' is not a number from 1 to 65535"),
    ("host:0", "port '0' is not a number from 1 to 65535"),
    ("host:65536", "port '65536' is not a number from 1 to 65535"),
    ("host:port", "port 'port' is not a number from 1 to 65535"),
    ("host:\u0661\u0662", "is not a number from 1 to 65535"),  # digits, but not ASCII ones
    ("a/b:6379", "'a/b' is not a host name"),
    ("a b:6379", "'a b' is not a host name"),
])
def test_bad_addresses_say_why(text, reason):
    with pytest.raises(ValueError) as err:
        split_host_port(text, 6379)
    assert reason in str(err.value)


@pytest.mark.parametrize("parse, example", [
    (redis_address, "127.0.0.1:6379"),
    (nats_address, "127.0.0.1:4222"),
    (rabbitmq_address, "127.0.0.1:5552"),
])
def test_each_platform_names_the_address_the_reason_and_an_example(parse, example):
    with pytest.raises(TargetError) as err:
        parse("[::1")
    assert str(err.value) == (f"bad address '[::1': a [ with no ] after the IPv6 address; "
                              f"expected HOST:PORT, e.g. {example}")
    assert parse("[::1]:1000") == ("::1", 1000)


def test_kafka_bootstrap_list():
    servers = parse_bootstrap("[::1]:9093, ::1,b")
    assert servers == [("::1", 9093), ("::1", 9092), ("b", 9092)]
    # handed to the clients in brackets, as aiokafka's own parser reads them back
    text = bootstrap_text(servers)
    assert text == "[::1]:9093,[::1]:9092,b:9092"
    assert collect_hosts(text, randomize=False) == [
        ("::1", 9093, socket.AF_INET6), ("::1", 9092, socket.AF_INET6), ("b", 9092, socket.AF_UNSPEC)]
    with pytest.raises(TargetError, match=r"bad address 'b:x': port 'x' is not a number"):
        parse_bootstrap("a:1,b:x")
