"""An existing Pulsar (a standalone started by the module) with TLS ports and token
authentication (AuthenticationProviderToken with a secret key): a run through
`pulsar:token_file=…,ca=…@pulsar+ssl://…,https://…`, the token written nowhere, and a
refused token and an untrusted certificate each one line and exit 3."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import compose.pulsar
from compose.process import free_port
from compose.pulsar import PulsarAdmin, PulsarLocalStack, standalone_conf
from loadgen.core.security import ClientSecurity, Secret
from loadgen.pacing import run_precise
from loadgen.platforms import resolve_target
from tests.conftest import run_json
from tests.integration.tls_support import Pki, assert_failed, assert_nowhere, make_pki, run

pytestmark = pytest.mark.integration


def hs256_token(key: bytes, subject: str) -> str:
    """A JWT signed with HMAC-SHA256, as `pulsar tokens create --secret-key` makes."""
    def b64(data: bytes) -> bytes:
        return base64.urlsafe_b64encode(data).rstrip(b"=")
    signed = b64(b'{"alg":"HS256"}') + b"." + b64(json.dumps({"sub": subject}).encode())
    return (signed + b"." + b64(hmac.new(key, signed, hashlib.sha256).digest())).decode()


class SecureStandalone(PulsarLocalStack):
    """The local standalone with TLS ports next to its plaintext ones and tokens required."""

    def __init__(self, pki: Pki, key_file: Path, admin_token: str) -> None:
        super().__init__(resolve_target("pulsar:heap=512m,runtime=local"), "pulsar-tls")
        self.pki, self.key_file, self.admin_token = pki, key_file, admin_token
        self.tls_port = free_port()
        self.https_port = free_port()

    def _write_conf(self, home: Path, port: int, admin_port: int) -> Path:
        conf = super()._write_conf(home, port, admin_port)
        conf.write_text(standalone_conf(conf.read_text(), {
            "brokerServicePortTls": str(self.tls_port),
            "webServicePortTls": str(self.https_port),
            "tlsCertificateFilePath": str(self.pki.server_cert),
            "tlsKeyFilePath": str(self.pki.server_key),
            "tlsTrustCertsFilePath": str(self.pki.ca),
            "authenticationEnabled": "true",
            "authenticationProviders":
                "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
            "tokenSecretKey": f"file://{self.key_file}",
            "superUserRoles": "admin",
            "brokerClientAuthenticationPlugin":
                "org.apache.pulsar.client.impl.auth.AuthenticationToken",
            "brokerClientAuthenticationParameters": f"token:{self.admin_token}",
        }))
        return conf


@dataclass(frozen=True)
class Cluster:
    address: str
    pki: Pki
    token_file: Path
    wrong_token_file: Path
    token: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("secure-pulsar")
    pki = make_pki(base / "pki")
    key, other = os.urandom(32), os.urandom(32)
    key_file = base / "secret.key"
    key_file.write_bytes(key)
    token = hs256_token(key, "admin")
    token_file, wrong = base / "token", base / "wrong-token"
    token_file.write_text(token + "\n")
    wrong.write_text(hs256_token(other, "admin") + "\n")
    stack = SecureStandalone(pki, key_file, token)
    try:
        # the stack's start-up check calls the admin API, which now wants the token
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(compose.pulsar, "PulsarAdmin", functools.partial(
                PulsarAdmin, security=ClientSecurity(token=Secret(token))))
            run_precise(stack.up(print))
        yield Cluster(f"pulsar+ssl://127.0.0.1:{stack.tls_port},https://127.0.0.1:{stack.https_port}",
                      pki, token_file, wrong, token)
    finally:
        run_precise(stack.down())


def test_run_over_tls_with_a_token(cluster, tmp_path):
    out = tmp_path / "run"
    res = run(["run", f"pulsar:token_file={cluster.token_file},ca={cluster.pki.ca}@{cluster.address}",
               "--rate", "200", "--duration", "2", "--warmup", "0", "--partitions", "2",
               "--headless", "--out", str(out)])
    assert res.returncode == 0, res.stderr
    totals = run_json(out)["totals"][0]
    assert totals["produced"] == totals["consumed"] == 400
    assert_nowhere(cluster.token, out, res.stdout, res.stderr)
    assert res.left == []


@pytest.mark.parametrize("options, cause", [
    ("token_file={wrong},ca={ca}", "refused the credentials"),
    ("token_file={token},ca={other_ca}", "certificate is not trusted"),
], ids=["wrong-token", "wrong-ca"])
def test_failure_is_one_line_naming_target_and_cause(cluster, tmp_path, options, cause):
    options = options.format(wrong=cluster.wrong_token_file, token=cluster.token_file,
                             ca=cluster.pki.ca, other_ca=cluster.pki.other_ca)
    res = run(["run", f"pulsar:{options}@{cluster.address}", "--rate", "100", "--duration", "1",
               "--warmup", "0", "--headless", "--out", str(tmp_path / "run")])
    port = int(cluster.address.rsplit(":", 1)[1])
    assert_failed(res, cause, [port], cluster.token, tmp_path, code=3)  # refused by the broker
