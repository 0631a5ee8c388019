"""Workload payloads on the wire, checked with the broker's own byte counter: a payloadFile's
bytes, and OMB's randomized payloads (random bytes then zeros)."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from compose.process import free_port
from tests.conftest import run_cli, run_json

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def redis_port():
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    yield port
    server.terminate()
    server.wait()


def _input_bytes(port: int) -> int:
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "stats"], capture_output=True,
                         text=True, check=True).stdout
    return int(re.search(r"total_net_input_bytes:(\d+)", out).group(1))


@pytest.mark.parametrize("kind", ["file", "randomized"])
def test_payload_bytes_reach_the_broker(tmp_path: Path, redis_port: int, kind: str):
    size = 20_000
    if kind == "file":
        (tmp_path / "payload.data").write_bytes(b"p" * size)
        body = "payloadFile: payload.data\nmessageSize: 100\n"
    else:
        body = (f"messageSize: {size}\nuseRandomizedPayloads: true\nrandomBytesRatio: 0.5\n"
                "randomizedPayloadPoolSize: 8\n")
    workload = tmp_path / "w.yaml"
    workload.write_text(f"name: payload-{kind}\nproducerRate: 200\ntestDurationSeconds: 3\n"
                        f"warmupDurationSeconds: 0\n{body}")
    before = _input_bytes(redis_port)
    res = run_cli(["run", f"redis@127.0.0.1:{redis_port}", "--workload", str(workload),
                   "--headless", "--out", str(tmp_path / "run")])
    assert res.returncode == 0, res.stderr
    received = _input_bytes(redis_port) - before
    meta = run_json(tmp_path / "run")
    produced = meta["totals"][0]["produced"]
    assert produced == 600
    assert meta["workload"]["messageSize"] == size
    # every message's payload went in, plus per command protocol framing, the entry's other
    # field and streambench's reads, acknowledgements and telemetry: well under 10 %
    assert produced * size <= received <= produced * size * 1.10, (received, produced * size)
    if kind == "file":
        assert "messageSize 100 does not apply" in res.stderr
