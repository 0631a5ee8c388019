"""An existing Kafka 3.9 broker (KRaft, one node, started by the module from the assembled
release) with a SASL_SSL listener (PEM key store, client certificates required; PLAIN and SCRAM
users), a SASL_PLAINTEXT listener and a plaintext one: runs through
`kafka:sasl=…,user=…,password_file=…,ca=…@HOST:PORT` in every client streambench opens, the
secret never written anywhere, and the failures each one line and exit 3 (a TARGET refused
before anything starts: exit 2) with nothing left running."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from compose.kafka import KafkaRuntime, broker_count, random_cluster_id
from compose.process import free_port
from tests.conftest import run_json
from tests.integration.kafka_support import kafka_39  # noqa: F401
from tests.integration.tls_support import Pki, assert_failed, assert_nowhere, make_pki, run

pytestmark = pytest.mark.integration

USER = "bench"
PASSWORD = "Kf-5d21b7e0-secret"
SCRAM = "SCRAM-SHA-256", "SCRAM-SHA-512"
HEAP = "384m"


@dataclass(frozen=True)
class Broker:
    sasl_ssl: int
    sasl_plain: int
    plain: int
    pki: Pki
    password_file: Path
    wrong_password_file: Path

    def tls(self, ca: Path | None = None) -> str:
        return f"ca={ca or self.pki.ca},cert={self.pki.client_cert},key={self.pki.client_key}"

    def groups(self) -> list[str]:
        async def listed() -> list[str]:
            admin = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{self.plain}")
            await admin.start()
            try:
                return [g[0] for g in await admin.list_consumer_groups()]
            finally:
                await admin.close()
        return asyncio.run(listed())


def _config(base: Path, pki: Pki, ports: dict[str, int], controller: int) -> Path:
    keystore = base / "server-keystore.pem"  # private key (PKCS#8) and certificate
    keystore.write_text(pki.server_key.read_text() + pki.server_cert.read_text())
    jaas = "org.apache.kafka.common.security"
    lines = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join([f"CONTROLLER://127.0.0.1:{controller}",
                               *(f"{name}://127.0.0.1:{port}" for name, port in ports.items())]),
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "log.dirs": base / "data",
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.ca,
        "listener.name.sasl_ssl.ssl.client.auth": "required",
    }
    for listener in ("sasl_ssl", "sasl_plaintext"):
        lines[f"listener.name.{listener}.plain.sasl.jaas.config"] = (
            f'{jaas}.plain.PlainLoginModule required user_{USER}="{PASSWORD}";')
        for mechanism in SCRAM:
            lines[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = (
                f"{jaas}.scram.ScramLoginModule required;")
    path = base / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


def _ready(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"the broker exited: {log.read_text()[-2000:]}"
        try:
            if asyncio.run(broker_count(f"127.0.0.1:{port}", 3.0)) >= 1:
                return
        except Exception:
            pass
        assert time.monotonic() < deadline, "the broker did not answer in 90 s"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, kafka_39: KafkaRuntime) -> Iterator[Broker]:  # noqa: F811
    base = tmp_path_factory.mktemp("secure-kafka")
    pki = make_pki(base / "pki")
    secret, wrong = base / "password", base / "wrong-password"
    secret.write_text(PASSWORD + "\n")
    wrong.write_text("not-the-password\n")
    ports = {"SASL_SSL": free_port(), "SASL_PLAINTEXT": free_port(), "PLAINTEXT": free_port()}
    controller = free_port()
    assert len({*ports.values(), controller}) == 4
    config = _config(base, pki, ports, controller)
    logging = kafka_39.write_logging(base / "logging.properties", "WARN")
    # the SCRAM users are written into the metadata log when the storage is formatted
    scram = [arg for m in SCRAM for arg in ("--add-scram", f"{m}=[name={USER},password={PASSWORD}]")]
    subprocess.run(kafka_39.argv("kafka.tools.StorageTool",
                                 ["format", "-t", random_cluster_id(), "-c", str(config), *scram],
                                 "256m", logging), check=True, capture_output=True, timeout=120)
    log = base / "broker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(kafka_39.argv("kafka.Kafka", [str(config)], HEAP, logging),
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _ready(ports["PLAINTEXT"], proc, log)
        yield Broker(ports["SASL_SSL"], ports["SASL_PLAINTEXT"], ports["PLAINTEXT"], pki, secret,
                     wrong)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("client", ["aiokafka", "librdkafka"])
def test_scram_over_tls_in_every_client(broker, tmp_path, client):
    out = tmp_path / "run"
    target = (f"kafka:client={client},sasl=scram-sha-512,user={USER},"
              f"password_file={broker.password_file},{broker.tls()}@127.0.0.1:{broker.sasl_ssl}")
    res = run(["run", target, "--rate", "500", "--duration", "3", "--warmup", "0", "--partitions",
               "2", "--headless", "--out", str(out)])
    assert res.returncode == 0, res.stderr
    meta = run_json(out)
    totals = meta["targets"][0], meta["totals"][0]
    assert totals[1]["produced"] == totals[1]["consumed"] == 1500
    assert totals[0]["options"]["sasl"] == "scram-sha-512"
    assert_nowhere(PASSWORD, out, res.stdout, res.stderr)
    assert res.left == []


@pytest.mark.parametrize("mechanism, listener", [("scram-sha-256", "sasl_ssl"),
                                                 ("plain", "sasl_plain")])
def test_other_mechanisms(broker, tmp_path, mechanism, listener):
    out = tmp_path / "run"
    tls = f",{broker.tls()},tls_verify_hostname=false" if listener == "sasl_ssl" else ""
    host = "localhost" if tls else "127.0.0.1"  # not in the certificate: no host name check
    target = (f"kafka:sasl={mechanism},user={USER},password_env=SB_KAFKA_PW{tls}"
              f"@{host}:{getattr(broker, listener)}")
    res = run(["run", target, "--rate", "200", "--duration", "1", "--warmup", "0", "--headless",
               "--out", str(out)], env={"SB_KAFKA_PW": PASSWORD})
    assert res.returncode == 0, res.stderr
    assert run_json(out)["totals"][0]["consumed"] == 200
    assert_nowhere(PASSWORD, out, res.stdout, res.stderr)


# (id, TARGET, what the error line says, exit code: 3 the broker cannot be reached with it,
#  2 the TARGET is refused before anything starts)
FAILURES = [
    ("wrong-password", "sasl=scram-sha-512,user={user},password_file={wrong},{tls}@127.0.0.1:{ssl}",
     "authentication failed", 3),
    ("wrong-ca", "sasl=plain,user={user},password_file={pw},{wrong_ca}@127.0.0.1:{ssl}",
     "certificate is not trusted", 3),
    ("host-mismatch", "sasl=plain,user={user},password_file={pw},{tls}@localhost:{ssl}",
     "does not match the host", 3),
    ("tls-to-plaintext", "sasl=plain,user={user},password_file={pw},{tls}@127.0.0.1:{plain}",
     "does the port take TLS", 3),
    ("plaintext-to-tls", "sasl=plain,user={user},password_file={pw}@127.0.0.1:{ssl}",
     "a TLS listener?", 3),
    ("no-client-cert", "sasl=plain,user={user},password_file={pw},ca={ca}@127.0.0.1:{ssl}",
     "client certificate", 3),
    ("password-on-command-line", "sasl=plain,user={user},password=" + PASSWORD
     + "@127.0.0.1:{ssl}", "password_file=PATH or password_env=NAME", 2),
]


@pytest.mark.parametrize("form, cause, code", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failure_is_one_line_naming_target_and_cause(broker, tmp_path, form, cause, code):
    groups = set(broker.groups())
    target = "kafka:" + form.format(
        user=USER, pw=broker.password_file, wrong=broker.wrong_password_file, ca=broker.pki.ca,
        tls=broker.tls(), wrong_ca=broker.tls(broker.pki.other_ca), ssl=broker.sasl_ssl,
        plain=broker.plain)
    res = run(["run", target, "--rate", "100", "--duration", "1", "--warmup", "0",
               "--headless", "--out", str(tmp_path / "run")])
    assert_failed(res, cause, [broker.sasl_ssl, broker.plain], PASSWORD, tmp_path, code)
    assert set(broker.groups()) == groups  # no consumer group was joined
