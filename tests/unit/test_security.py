"""TARGET options of authenticated and encrypted clusters: what is refused before anything
starts, and that a secret read for a client stays out of reprs, pickles and error lines."""

from __future__ import annotations

import pickle

import pytest

from loadgen.core.errors import TargetError
from loadgen.core.security import ClientSecurity, Secret
from loadgen.platforms import resolve_target
from loadgen.platforms.kafka import KafkaClientOptions

SECRET = "Unit-9b1e-secret"


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "pw"
    path.write_text(SECRET + "\n")
    return path


@pytest.mark.parametrize("spec", [
    f"kafka:sasl=plain,user=u,password={SECRET}@127.0.0.1:9092",
    f"redis:password={SECRET},user=u@127.0.0.1:6379",
    f"pulsar:token={SECRET}@pulsar://127.0.0.1:6650",
    f"kafak:password={SECRET}@127.0.0.1:9092",  # also before an unknown platform is named
    f"redis:bogus=1,password={SECRET}@127.0.0.1:6379",  # and before an unknown option
])
def test_a_secret_on_the_command_line_is_refused_without_repeating_it(spec):
    with pytest.raises(TargetError) as caught:
        resolve_target(spec)
    message = str(caught.value)
    assert SECRET not in message and "\n" not in message
    assert "_file=PATH" in message and "_env=NAME" in message


@pytest.mark.parametrize("options, fragment", [
    ("sasl=plain,user=u", "needs user= and password_file= or password_env="),
    ("sasl=plain,password_file={pw}", "needs user="),
    ("user=u,password_file={pw}", "need sasl="),
    ("sasl=plain,user=u,password_file={pw},password_env=HOME", "not both"),
    ("sasl=plain,user=u,password_file=/nonexistent/pw", "cannot read password_file"),
    ("sasl=plain,user=u,password_env=STREAMBENCH_TEST_UNSET", "STREAMBENCH_TEST_UNSET"),
    ("ca=/nonexistent/ca.pem", "ca=/nonexistent/ca.pem: no such file"),
    ("ca={pw}", "do not load"),
    ("tls=false,ca={pw}", "tls=false"),
    ("key={pw}", "key= needs cert="),
])
def test_inconsistent_settings_are_refused_naming_the_target(options, fragment, password_file,
                                                              monkeypatch):
    monkeypatch.delenv("STREAMBENCH_TEST_UNSET", raising=False)
    spec = f"kafka:{options.format(pw=password_file)}@127.0.0.1:9092"
    with pytest.raises(TargetError) as caught:
        resolve_target(spec)
    assert fragment in str(caught.value) and spec in str(caught.value)
    assert SECRET not in str(caught.value)


def test_settings_apply_to_existing_clusters_only(password_file):
    with pytest.raises(TargetError, match="apply to an existing cluster"):
        resolve_target(f"redis:user=u,password_file={password_file},runtime=local")


def test_pulsar_tls_options_need_tls_addresses(tmp_path):
    with pytest.raises(TargetError, match="need TLS addresses"):
        resolve_target("pulsar:tls_verify_hostname=false@pulsar://127.0.0.1:6650")


def test_the_password_is_read_for_the_client_and_hidden_elsewhere(password_file, monkeypatch):
    target = resolve_target(f"kafka:sasl=scram-sha-256,user=u,password_file={password_file}"
                            "@127.0.0.1:9092")
    opts = KafkaClientOptions.of(target)
    kwargs = opts.client()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-256" and kwargs["sasl_plain_username"] == "u"
    assert kwargs["sasl_plain_password"] == SECRET
    # the options keep the path only; the typed records never show the secret
    assert SECRET not in repr(target) and SECRET not in repr(opts)
    assert opts.security.describe() == {"sasl": "SCRAM-SHA-256", "user": "u"}
    with pytest.raises(TypeError):
        pickle.dumps(opts.security)
    monkeypatch.setenv("SB_PW", SECRET)
    redis = ClientSecurity.of(resolve_target("redis:user=u,password_env=SB_PW,tls@h:6379"))
    assert redis.redis_auth() == ["AUTH", "u", SECRET]
    assert redis.redis_kwargs()["ssl"] is True and SECRET not in repr(redis)
    assert str(Secret(SECRET)) == "Secret(***)"


def test_a_refusal_is_the_refusing_platforms_own():
    from loadgen.core.target import OptionSpec, parse_target

    tables = {"own": {"password": OptionSpec("a platform's own password option")},
              "careful": {"password": OptionSpec("", refuse="use password_file=PATH")}}
    assert parse_target("own:password=x", tables).options["password"] == "x"
    with pytest.raises(TargetError, match="password_file=PATH"):
        parse_target("careful:password=x", tables)
    with pytest.raises(TargetError, match="password_file=PATH"):  # unknown platform
        parse_target("carefull:password=x", tables)
