"""The NATS platform's pure parts: addresses, stream names, the stream sequence in an ack
subject, version and size checks."""

from __future__ import annotations

import pytest

from compose.nats import check_version, endpoint_of, parse_address
from loadgen.core.errors import StackError, StreambenchError, TargetError
from loadgen.platforms import PLATFORMS, resolve_target
from loadgen.platforms.nats import _parse_size, _stream_sequence, stream_name, subjects

BAD_TARGETS = [
    ("nats:storage=disk", "expected one of file, memory"),
    ("nats:fetch=0", "must be a whole number from 1 to 9,223,372,036,854,775,807"),
    ("nats:max_memory=lots", "expected a size like 512M"),
    ("nats:port=70000", "port number between 1 and 65535"),
    ("nats:monitor=ftp://x", "expected the monitoring endpoint's URL"),
    ("nats:monitor=http://127.0.0.1:8222", "monitor= names the monitoring endpoint"),
    ("nats:max_memory=1G@127.0.0.1:4222", "configure a server streambench starts"),
    ("nats:max_file=1G,runtime=docker", "apply to the local runtime"),
    ("nats:port=4222@127.0.0.1:4222", "runtime= and port= do not apply"),
    ("nats@127.0.0.1:99999", "bad address"),
]


@pytest.mark.parametrize("spec, fragment", BAD_TARGETS, ids=[s for s, _ in BAD_TARGETS])
def test_bad_targets_are_refused_before_anything_starts(spec, fragment):
    with pytest.raises(StreambenchError) as caught:
        PLATFORMS["nats"].make_stack(resolve_target(spec))
    assert fragment in str(caught.value)


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:4222", ("127.0.0.1", 4222)),
    ("nats://10.0.0.5:4333", ("10.0.0.5", 4333)),
    ("broker.example", ("broker.example", 4222)),
    ("[::1]:4223", ("::1", 4223)),
])
def test_addresses(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["127.0.0.1:0", "127.0.0.1:99999", "host:port", "a/b:4222"])
def test_bad_addresses(address):
    with pytest.raises(TargetError, match="expected HOST:PORT"):
        parse_address(address)


def test_ipv6_endpoints_are_bracketed():
    assert endpoint_of("::1", 4222) == "[::1]:4222"
    assert endpoint_of("127.0.0.1", 4222) == "127.0.0.1:4222"


def test_stream_names_and_subjects():
    assert stream_name("streambench-20261123T1015Z-a.v2-0-0") == "streambench-20261123T1015Z-a_v2-0-0"
    assert stream_name("a b*c>d") == "a_b_c_d"
    assert subjects("s", 3) == ["s.0", "s.1", "s.2"]


def test_stream_sequence_of_an_ack_subject():
    assert _stream_sequence("$JS.ACK.S.sub.1.1234.17.1795452297566505627.4") == "1234"
    # with a domain and an account hash, and the trailing token
    assert _stream_sequence("$JS.ACK.dom.ACCHASH.S.sub.2.99.18.1795452297566505627.0.xyz") == "99"


def test_versions():
    check_version("2.9.10", "here")
    check_version("2.10.24", "here")
    with pytest.raises(StackError, match=r"needs nats-server 2\.9 or newer"):
        check_version("2.8.4", "here")


def test_sizes():
    assert _parse_size("512m") == "512M"
    assert _parse_size("2G") == "2G"
    for bad in ("lots", "1.5G", "-1G"):
        with pytest.raises(ValueError):
            _parse_size(bad)


@pytest.mark.parametrize(("spec", "seconds"), [("nats", "30"), ("nats:ack_wait=7", "7")])
def test_a_stalled_drain_names_the_ack_wait_in_force(spec, seconds):
    hint = PLATFORMS["nats"].drain_stall_hint
    assert hint is not None
    text = hint(resolve_target(spec))
    assert f"only ack_wait ({seconds} s) after it was delivered without an acknowledgement" in text
    assert PLATFORMS["redis"].drain_stall_hint is None
