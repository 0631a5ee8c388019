"""Authentication and TLS of the clients streambench opens to an existing cluster (an @ADDRESS
target): the TARGET options, the typed settings they give, and the reasons a TLS handshake
failed, told in one line.

Secrets (passwords, tokens) come only from an environment variable or a file the target names
(`password_env=NAME`, `password_file=PATH`, `token_env=`, `token_file=`), never from the command
line: `password=` and `token=` are refused before the TARGET is echoed anywhere. A secret is
read when a client is made, held in a `Secret` (whose repr and str hide it, and which refuses
to be pickled, so it never crosses to another process or into a file) and handed to the client
library only. The options themselves (user, mechanism, file paths, variable names, CA path, tls
on/off) are not secret and are recorded with the target's other options."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from loadgen.core.errors import TargetError
from loadgen.core.target import OptionSpec, Target, parse_bool

SASL_MECHANISMS = {"plain": "PLAIN", "scram-sha-256": "SCRAM-SHA-256",
                   "scram-sha-512": "SCRAM-SHA-512"}

_ON_THE_COMMAND_LINE = ("a secret on the command line shows in the process list, the shell "
                        "history and the run's files")


def _refused(what: str, instead: str) -> OptionSpec:
    return OptionSpec(f"refused: {_ON_THE_COMMAND_LINE}; use {instead}",
                      refuse=f"{what} is not taken on the command line ({_ON_THE_COMMAND_LINE}); "
                             f"use {instead}")


def _tls_options(client_cert: bool) -> dict[str, OptionSpec]:
    options = {
        "tls": OptionSpec("existing cluster: connect with TLS (on by itself when ca, cert or key "
                          "is given)", default=False, parse=parse_bool, flag=True),
        "ca": OptionSpec("existing cluster: PEM file of the CA certificate(s) the server's "
                         "certificate must chain to (default: the system's CAs)", default=None),
        "tls_verify_hostname": OptionSpec("existing cluster: check that the server's "
                                          "certificate names the host of the address",
                                          default=True, parse=parse_bool, flag=True),
    }
    if client_cert:
        options["cert"] = OptionSpec("existing cluster: PEM file of the client certificate "
                                     "(TLS client authentication)", default=None)
        options["key"] = OptionSpec("existing cluster: PEM file of the client certificate's "
                                    "private key (default: in the cert file)", default=None)
    return options


_PASSWORD_OPTIONS = {
    "password_file": OptionSpec("existing cluster: file holding the password (one line)",
                                default=None),
    "password_env": OptionSpec("existing cluster: environment variable holding the password",
                               default=None),
    "password": _refused("password=", "password_file=PATH or password_env=NAME"),
}

KAFKA_SECURITY_OPTIONS = {
    "sasl": OptionSpec("existing cluster: SASL mechanism (with user= and password_file= or "
                       "password_env=)", default=None, choices=tuple(SASL_MECHANISMS)),
    "user": OptionSpec("existing cluster: SASL user name", default=None),
    **_PASSWORD_OPTIONS,
    **_tls_options(client_cert=True),
}

REDIS_SECURITY_OPTIONS = {
    "user": OptionSpec("existing server: ACL user (AUTH user password; default: the default "
                       "user)", default=None),
    **_PASSWORD_OPTIONS,
    **_tls_options(client_cert=True),
}

PULSAR_SECURITY_OPTIONS = {
    "token_file": OptionSpec("existing cluster: file holding the authentication token (JWT)",
                             default=None),
    "token_env": OptionSpec("existing cluster: environment variable holding the "
                            "authentication token", default=None),
    "token": _refused("token=", "token_file=PATH or token_env=NAME"),
    # TLS is chosen by the address: pulsar+ssl:// and https://
    **{k: v for k, v in _tls_options(client_cert=True).items() if k != "tls"},
}
TLS_SCHEMES = ("pulsar+ssl://", "https://")  # addresses whose scheme asks for TLS

SECURITY_KEYS = frozenset({*KAFKA_SECURITY_OPTIONS, *REDIS_SECURITY_OPTIONS,
                           *PULSAR_SECURITY_OPTIONS})


class Secret:
    """A password or token: shown as *** and never pickled."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(***)"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Secret is not pickled; each process reads it from its source")


def read_secret(target: Target, what: str) -> Secret | None:
    """The secret of `<what>_file` / `<what>_env`, None when the target names neither."""
    o = target.options
    path, env = o.get(f"{what}_file"), o.get(f"{what}_env")
    if path and env:
        raise TargetError(f"target {target.spec!r}: give {what}_file or {what}_env, not both")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
            raise TargetError(f"target {target.spec!r}: cannot read {what}_file {path}: "
                              f"{reason}") from None
        source = f"{what}_file {path}"
    elif env:
        if env not in os.environ:
            raise TargetError(f"target {target.spec!r}: environment variable {env} "
                              f"({what}_env) is not set")
        text, source = os.environ[env], f"environment variable {env}"
    else:
        return None
    value = text.rstrip("\r\n")
    if not value or "\n" in value:
        raise TargetError(f"target {target.spec!r}: {source} must hold the {what} on one "
                          f"non-empty line")
    return Secret(value)


@dataclass(frozen=True)
class TlsSettings:
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify_hostname: bool = True

    @classmethod
    def of(cls, target: Target) -> TlsSettings:
        """The TLS options of a target, its files checked (whether TLS is on is the caller's)."""
        o = target.options
        tls = cls(o.get("ca"), o.get("cert"), o.get("key"), bool(o.get("tls_verify_hostname", True)))
        _check_tls_files(target.spec, tls)
        return tls

    def context(self) -> ssl.SSLContext:
        """A client context: the server's certificate verified against `ca` (else the system's
        CAs), its host name checked unless turned off, the client certificate loaded."""
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.check_hostname = self.verify_hostname
        if self.cert:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def describe(self) -> dict[str, str]:
        shown = {"tls": "on", "tls_verify_hostname": "on" if self.verify_hostname else "off"}
        shown.update({k: v for k, v in (("ca", self.ca), ("cert", self.cert)) if v})
        return shown


@dataclass(frozen=True)
class ClientSecurity:
    """How the clients of one target authenticate and encrypt; the default is plaintext and
    no authentication."""

    tls: TlsSettings | None = None
    user: str | None = None
    password: Secret | None = field(default=None, repr=False)
    mechanism: str | None = None  # Kafka SASL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    token: Secret | None = field(default=None, repr=False)

    @classmethod
    def of(cls, target: Target) -> ClientSecurity:
        """The settings of a target, its secret read and its TLS files loaded once to check
        them; TargetError naming the target when something does not fit."""
        o = target.options
        spec = target.spec
        if "tls_verify_hostname" not in o:  # a platform that does not take these settings
            return cls()
        given = sorted(target.explicit & SECURITY_KEYS)
        if not given:
            return cls()
        if target.address is None:
            raise TargetError(f"target {spec!r}: {', '.join(given)} apply to an existing cluster "
                              f"({target.platform}@ADDRESS); the brokers streambench starts take "
                              "plaintext connections without authentication")
        tls = None
        files = {k: o.get(k) for k in ("ca", "cert", "key")}
        if "tls" in target.explicit and not o["tls"] and any(files.values()):
            raise TargetError(f"target {spec!r}: tls=false with "
                              f"{', '.join(k for k, v in files.items() if v)}; leave tls out")
        if files["key"] and not files["cert"]:
            raise TargetError(f"target {spec!r}: key= needs cert= (the client certificate)")
        if "tls" not in o:  # the address's scheme asks for TLS or not (Pulsar)
            if any(s in target.address for s in TLS_SCHEMES):
                tls = TlsSettings.of(target)
            elif any(k in target.explicit for k in ("ca", "cert", "key", "tls_verify_hostname")):
                raise TargetError(f"target {spec!r}: ca, cert, key and tls_verify_hostname need "
                                  "TLS addresses (pulsar+ssl://HOST:6651, https://HOST:8443)")
        elif o.get("tls") or any(files.values()):
            tls = TlsSettings.of(target)
        password = read_secret(target, "password") if "password_file" in o else None
        token = read_secret(target, "token") if "token_file" in o else None
        user = o.get("user") or None
        mechanism = None
        if "sasl" in o:  # a Kafka-API target: authentication is SASL's
            if o["sasl"]:
                mechanism = SASL_MECHANISMS[o["sasl"]]
                if not user or password is None:
                    raise TargetError(f"target {spec!r}: sasl={o['sasl']} needs user= and "
                                      "password_file= or password_env=")
            elif user or password is not None:
                raise TargetError(f"target {spec!r}: a user and password need sasl=plain, "
                                  "scram-sha-256 or scram-sha-512")
        elif user and password is None:
            raise TargetError(f"target {spec!r}: user={user} needs password_file= or password_env=")
        return cls(tls, user, password, mechanism, token)

    def ssl_context(self) -> ssl.SSLContext | None:
        return None if self.tls is None else self.tls.context()

    def describe(self) -> dict[str, str]:
        """The settings that may be shown and recorded (no secret)."""
        shown = self.tls.describe() if self.tls is not None else {}
        if self.mechanism:
            shown["sasl"] = self.mechanism
        if self.user:
            shown["user"] = self.user
        if self.token is not None:
            shown["auth"] = "token"
        return shown

    def kafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every aiokafka client (producer, consumer, admin)."""
        if self.tls is None and self.mechanism is None:
            return {}
        protocol = ("SASL_" if self.mechanism else "") + ("SSL" if self.tls else "PLAINTEXT")
        kwargs: dict[str, Any] = {"security_protocol": protocol}
        if self.tls is not None:
            kwargs["ssl_context"] = self.tls.context()
        if self.mechanism is not None:
            assert self.password is not None
            kwargs.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.user,
                          sasl_plain_password=self.password.reveal())
        return kwargs

    def redis_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of a redis-py client."""
        kwargs: dict[str, Any] = {}
        if self.password is not None:
            kwargs["password"] = self.password.reveal()
            if self.user:
                kwargs["username"] = self.user
        if self.tls is not None:
            t = self.tls
            kwargs.update(ssl=True, ssl_ca_certs=t.ca, ssl_certfile=t.cert, ssl_keyfile=t.key,
                          ssl_check_hostname=t.verify_hostname, ssl_cert_reqs="required")
        return kwargs

    def redis_auth(self) -> list[str]:
        """The AUTH command the driver's own connections send first ([] without a password)."""
        if self.password is None:
            return []
        return ["AUTH", *([self.user] if self.user else []), self.password.reveal()]


def _check_tls_files(spec: str, tls: TlsSettings) -> None:
    for option, path in (("ca", tls.ca), ("cert", tls.cert), ("key", tls.key)):
        if path and not os.path.isfile(path):
            raise TargetError(f"target {spec!r}: {option}={path}: no such file")
    try:
        tls.context()
    except (ssl.SSLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
        which = "ca" if tls.ca and not tls.cert else "ca, cert and key"
        raise TargetError(f"target {spec!r}: the TLS files ({which}) do not load: {reason}") from None


# ---- why a handshake failed ---------------------------------------------------------------------

_PLAINTEXT_PEER = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "UNEXPECTED_EOF", "EOF occurred",
                   "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST", "UNKNOWN_PROTOCOL")


def _links(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    queue = [exc]
    while queue and len(seen) < 32:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [getattr(current, "reason", None), current.__cause__, current.__context__,
                  *current.args, *(getattr(current, "exceptions", None) or ())]
        queue += [e for e in linked if isinstance(e, BaseException)]


def tls_failure(exc: BaseException) -> str | None:
    """Why a TLS connection failed, in words the user can act on; None when the failure was
    not TLS's."""
    for link in _links(exc):
        if isinstance(link, ssl.SSLCertVerificationError):
            message = link.verify_message or link.reason or "certificate verify failed"
            if link.verify_code == 62 or "ostname mismatch" in str(message):  # X509_V_ERR_HOSTNAME_MISMATCH
                return (f"TLS: the server's certificate does not match the host ({message}); "
                        "connect by a name the certificate has, or tls_verify_hostname=false")
            return (f"TLS: the server's certificate is not trusted ({message}); name the CA "
                    "that signed it with ca=PATH")
        if isinstance(link, ssl.SSLError):
            text = f"{link.reason or ''} {link}"
            if any(mark in text for mark in _PLAINTEXT_PEER):
                return ("TLS handshake failed: the server does not speak TLS on this port "
                        f"({link.reason or 'unexpected reply'}); is it a plaintext port?")
            if any(m in text for m in ("CERTIFICATE_REQUIRED", "HANDSHAKE_FAILURE",
                                       "BAD_CERTIFICATE", "UNKNOWN_CA")):
                return (f"TLS: the server refused the handshake ({link.reason}); does it want a "
                        "client certificate (cert=, key=) signed by a CA it trusts?")
            return f"TLS handshake failed: {link.reason or link}"
    return None


def auth_failure(exc: BaseException) -> str | None:
    """Why the server refused the client's credentials (or wanted some); None when the failure
    was not about authentication. Told by the client libraries' exception classes and the
    servers' error codes (Redis `WRONGPASS`, `NOAUTH`)."""
    for link in _links(exc):
        name = type(link).__name__
        text = (str(link).strip().splitlines() or [""])[0]
        if not (text.startswith(("WRONGPASS", "NOAUTH")) or "Authentication" in name
                or "Sasl" in name):
            continue
        detail = text.rstrip(".")[:200] or name
        if ("required" in text.lower() or text.startswith("NOAUTH")
                or "already authenticated" in text):  # redis' HELLO without credentials
            return ("the server requires authentication; give user= and password_file= or "
                    "password_env=")
        return f"authentication failed ({detail}); check user= and the password"
    return None


PLAINTEXT = ClientSecurity()  # no TLS, no authentication: what the brokers streambench starts take
