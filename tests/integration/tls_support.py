"""Shared pieces of the tests of authenticated and encrypted external clusters: certificates
made with the openssl command line (a CA, a server certificate for IP 127.0.0.1 only, so that
`localhost` is a host name mismatch, a client certificate, and a second CA that signed
neither), a CLI run that reports what of it outlives it, and the checks on its output."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.conftest import CLI

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


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    left: list[str]  # processes of the run still alive after it exited


def run(args: list[str], env: dict[str, str] | None = None) -> Outcome:
    """`streambench …` in a session of its own; what of that session outlives it."""
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True,
                            env={**os.environ, **(env or {})})
    stdout, stderr = proc.communicate(timeout=120)
    deadline = time.monotonic() + 5
    while True:
        left = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if os.getsid(p.pid) == proc.pid:
                    left.append(" ".join(p.info["cmdline"] or []))
            except (ProcessLookupError, PermissionError):
                continue
        if not left or time.monotonic() > deadline:
            return Outcome(proc.returncode, stdout, stderr, left)
        time.sleep(0.1)


def assert_nowhere(secret: str, *places: Path | str) -> None:
    """Neither a text nor any file under a directory holds the secret (read as bytes, so also
    binary files)."""
    needle = secret.encode()
    for place in places:
        if isinstance(place, Path):
            for path in [place, *place.rglob("*")] if place.is_dir() else [place]:
                if path.is_file():
                    assert needle not in path.read_bytes(), f"the secret is in {path}"
        else:
            assert secret not in place


def assert_failed(res: Outcome, cause: str, ports: list[int], secret: str, out: Path,
                  code: int) -> None:
    """Exit `code` (2: the TARGET refused before anything starts; 3: the broker cannot be
    reached with it), one error line (the last, no traceback) with the cause and, unless the
    TARGET was refused for holding a secret, one of the ports; the secret nowhere; nothing left."""
    assert res.returncode == code, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("streambench: error")]
    assert len(errors) == 1 and lines[-1] == errors[0], res.stderr
    assert cause in errors[0] and "Traceback" not in res.stderr
    if "password=" not in errors[0] and "token=" not in errors[0]:
        assert any(str(port) in errors[0] for port in ports), errors[0]
    assert_nowhere(secret, res.stdout, res.stderr, out)
    assert res.left == []
