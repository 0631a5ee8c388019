"""Certificates for the tests of authenticated and encrypted external clusters, made with the
openssl command line: a CA, a server certificate for IP 127.0.0.1 only (so that `localhost`
is a host name mismatch), a client certificate, and a second CA that signed neither."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = "2"
KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True,
                   timeout=30)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl("req", "-x509", *KEY, "-keyout", key, "-out", cert, "-days", DAYS,
             "-subj", f"/CN=streambench test {name}", cwd=directory)
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr = (directory / f"{name}.pem", directory / f"{name}.key",
                      directory / f"{name}.csr")
    ext = directory / f"{name}.ext"
    ext.write_text(extensions + "\n")
    _openssl("req", *KEY, "-keyout", key, "-out", csr, "-subj", f"/CN={name}", cwd=directory)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial",
             "-out", cert, "-days", DAYS, "-extfile", ext, cwd=directory)
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    other, _ = _ca(directory, "other-ca")
    server = _signed(directory, "server", ca, "subjectAltName=IP:127.0.0.1\n"
                     "extendedKeyUsage=serverAuth,clientAuth")
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth")
    for path in directory.glob("*.key"):
        path.chmod(0o600)
    return Pki(ca[0], server[0], server[1], client[0], client[1], other)
