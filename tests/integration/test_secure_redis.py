"""An existing Redis that takes TLS only (client certificates required) and an ACL user, with
the default user off: runs through `redis:user=…,password_file=…,ca=…@HOST:PORT`, the secret
never written anywhere, and the failures (wrong password, wrong CA, host name mismatch, TLS to
a plaintext port and back, no credentials) each one line and exit 3 (a TARGET refused before
anything starts: exit 2) with nothing left behind.
One redis-server for the module, with a TLS port and a plaintext port."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import redis.asyncio as aioredis

from compose.process import free_port
from tests.conftest import port_listening, run_json
from tests.integration.tls_support import Pki, assert_failed, assert_nowhere, make_pki, run

pytestmark = pytest.mark.integration

USER = "bench"
PASSWORD = "Rd-7f3e9c1a-secret"  # what no file of a run nor its output may contain
ENV = "STREAMBENCH_TEST_REDIS_PASSWORD"


@dataclass(frozen=True)
class Server:
    tls_port: int
    plain_port: int
    pki: Pki
    password_file: Path
    wrong_password_file: Path

    def tls_options(self, ca: Path | None = None) -> str:
        return (f"ca={ca or self.pki.ca},cert={self.pki.client_cert},"
                f"key={self.pki.client_key}")

    async def _admin(self, command: list[str]) -> object:
        conn = aioredis.Redis(host="127.0.0.1", port=self.tls_port, username=USER,
                              password=PASSWORD, ssl=True, ssl_ca_certs=str(self.pki.ca),
                              ssl_certfile=str(self.pki.client_cert),
                              ssl_keyfile=str(self.pki.client_key), decode_responses=True)
        try:
            return await conn.execute_command(*command)
        finally:
            await conn.aclose()

    def admin(self, *command: str) -> object:
        """A command over the server's TLS port, with a client of the test's own."""
        return asyncio.run(self._admin(list(command)))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("secure-redis")
    pki = make_pki(base / "pki")
    secret = base / "password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    wrong = base / "wrong-password"
    wrong.write_text("not-the-password\n")
    acl = base / "users.acl"  # the password only as its SHA-256
    acl.write_text("user default off\n"
                   f"user {USER} on #{hashlib.sha256(PASSWORD.encode()).hexdigest()} ~* &* +@all\n")
    tls_port, plain_port = free_port(), free_port()
    while plain_port == tls_port:
        plain_port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(plain_port),
         "--tls-port", str(tls_port), "--tls-cert-file", str(pki.server_cert),
         "--tls-key-file", str(pki.server_key), "--tls-ca-cert-file", str(pki.ca),
         "--tls-auth-clients", "yes", "--aclfile", str(acl), "--save", "", "--appendonly", "no",
         "--dir", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not (port_listening(tls_port) and port_listening(plain_port)):
            assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
        yield Server(tls_port, plain_port, pki, secret, wrong)
    finally:
        proc.terminate()
        proc.wait(10)


def test_produce_and_consume_over_tls_as_an_acl_user(server, tmp_path):
    out = tmp_path / "run"
    target = (f"redis:user={USER},password_file={server.password_file},"
              f"{server.tls_options()}@127.0.0.1:{server.tls_port}")
    before = int(server.admin("INFO", "commandstats").get("cmdstat_xadd", {}).get("calls", 0))
    res = run(["run", target, "--rate", "500", "--duration", "3", "--warmup", "0", "--headless",
               "--out", str(out)])
    assert res.returncode == 0, res.stderr
    meta = run_json(out)
    totals = meta["totals"][0]
    assert totals["produced"] == totals["consumed"] == 1500
    # the server counted the same XADDs, over the TLS port, as the ACL user
    stats = server.admin("INFO", "commandstats")
    assert int(stats["cmdstat_xadd"]["calls"]) - before == 1500
    # the telemetry came over TLS as the ACL user as well: lag and the server's byte counters
    # in every tick, no failed sample
    ticks = ds.dataset(out / "ticks", format="parquet").to_table().to_pylist()
    assert ticks and all(t["lag_total"] is not None and t["net_rx_bytes"] > 0 for t in ticks)
    events = ds.dataset(out / "events", format="parquet").to_table().to_pylist()
    assert not [e for e in events if e["kind"].startswith("collector-")]
    # the non-secret settings are recorded with the target; the password is nowhere
    options = meta["targets"][0]["options"]
    assert options["user"] == USER and options["password_file"] == str(server.password_file)
    assert_nowhere(PASSWORD, out, res.stdout, res.stderr)
    assert res.left == []
    # every connection of the run was closed: only the test's own is listed
    assert len(str(server.admin("CLIENT", "LIST")).strip().splitlines()) == 1


def test_password_from_the_environment_and_no_host_name_check(server, tmp_path):
    # `localhost` is not in the server's certificate (IP 127.0.0.1 only): accepted only when
    # the host name check is off
    out = tmp_path / "run"
    target = (f"redis:user={USER},password_env={ENV},{server.tls_options()},"
              f"tls_verify_hostname=false@localhost:{server.tls_port}")
    res = run(["run", target, "--rate", "200", "--duration", "1", "--warmup", "0",
               "--headless", "--out", str(out)], env={ENV: PASSWORD})
    assert res.returncode == 0, res.stderr
    assert run_json(out)["totals"][0]["consumed"] == 200
    assert_nowhere(PASSWORD, out, res.stdout, res.stderr)


# (id, TARGET, what the error line says, exit code: 3 the broker cannot be reached with it,
#  2 the TARGET is refused before anything starts)
FAILURES = [
    ("wrong-password", "user={user},password_file={wrong},{tls}@127.0.0.1:{tls_port}",
     "authentication failed", 3),
    ("no-credentials", "{tls}@127.0.0.1:{tls_port}", "requires authentication", 3),
    ("wrong-ca", "user={user},password_file={pw},{wrong_ca}@127.0.0.1:{tls_port}",
     "certificate is not trusted", 3),
    ("host-mismatch", "user={user},password_file={pw},{tls}@localhost:{tls_port}",
     "does not match the host", 3),
    ("no-client-cert", "user={user},password_file={pw},ca={ca}@127.0.0.1:{tls_port}",
     "client certificate", 3),
    ("tls-to-plaintext", "user={user},password_file={pw},{tls}@127.0.0.1:{plain_port}",
     "does the port take TLS", 3),
    ("plaintext-to-tls", "user={user},password_file={pw}@127.0.0.1:{tls_port}",
     "add tls or ca=PATH", 3),
    ("password-on-command-line", "user={user},password=" + PASSWORD + "@127.0.0.1:{tls_port}",
     "password_file=PATH or password_env=NAME", 2),
    ("missing-env", "user={user},password_env=STREAMBENCH_TEST_UNSET,{tls}@127.0.0.1:{tls_port}",
     "STREAMBENCH_TEST_UNSET", 2),
]


@pytest.mark.parametrize("form, cause, code", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_failure_is_one_line_naming_target_and_cause(server, tmp_path, form, cause, code):
    target = "redis:" + form.format(
        user=USER, pw=server.password_file, wrong=server.wrong_password_file, ca=server.pki.ca,
        tls=server.tls_options(), wrong_ca=server.tls_options(server.pki.other_ca),
        tls_port=server.tls_port, plain_port=server.plain_port)
    res = run(["run", target, "--rate", "100", "--duration", "1", "--warmup", "0",
               "--headless", "--out", str(tmp_path / "run")])
    assert_failed(res, cause, [server.tls_port, server.plain_port], PASSWORD, tmp_path, code)
    assert len(str(server.admin("CLIENT", "LIST")).strip().splitlines()) == 1
