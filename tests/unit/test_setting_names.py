"""The committed setting-name tables are what their generator extracts from the real sources
(the Debian rabbitmq-server package's schemas, nats-server's server/opts.go from the Go module
cache, a redis-server started for the purpose), so a table cannot drift from its generator nor
be edited by hand. Kafka, Pravega and Pulsar, which need the jars or the distribution, are
checked in tests/integration/test_setting_names_sources.py."""

from __future__ import annotations

import pytest

from loadgen.platforms.setting_names import generate, nats, rabbitmq, redis

OPTS_GO = """
func (o *Options) processConfigFileLine(k string, v any) {
	switch strings.ToLower(k) {
	case "port":
		o.Port = int(v.(int64)) // a brace in a comment {
	case "tls", "ssl":
		tc, err := parseTLS(tk, true)
	case "ocsp":
		switch vv := v.(type) {
		case bool:
			o.OCSP = vv
		case map[string]any:
			o.Map = "}"
		}
	case "name":
		o.Name = v.(string)
	default:
		o.Unknown = true
	}
}
func parseJetStream(v any) {
	for mk, mv := range vv {
		switch strings.ToLower(mk) {
		case "store", "store_dir":
			switch strings.ToLower(mv.(string)) {
			case "inner":
			}
		case "sync":
		}
	}
}
"""


def test_nats_parser_sorts_cases_of_one_value_from_blocks():
    single, blocks, jetstream = generate.nats_tables(OPTS_GO)
    assert single == {"port", "name"}
    assert blocks == {"tls", "ssl", "ocsp"}
    assert jetstream == {"store", "store_dir", "sync"}  # not the inner switch's "inner"


def test_nats_tables_are_what_opts_go_reads():
    server, blocks, jetstream = generate.nats_tables(generate.nats_source().read_text())
    assert (server, blocks, jetstream) == (nats.NATS_SERVER, nats.NATS_SERVER_BLOCKS,
                                           nats.NATS_JETSTREAM)
    assert not server & blocks
    assert {"max_payload", "port", "allow_non_tls"} <= server and "cluster" in blocks
    assert generate.render(generate.nats()) == (generate.HERE / "nats.py").read_text()


def test_rabbitmq_tables_are_the_package_schemas():
    conf, others = generate.rabbitmq_tables(generate.rabbitmq_server())
    assert conf == rabbitmq.RABBITMQ_CONF
    assert others == rabbitmq.RABBITMQ_OTHER_PLUGINS
    assert conf["stream.frame_max"] == "rabbitmq_stream.frame_max"
    assert "rabbitmq_mqtt" in others and not set(conf) & set().union(*others.values())
    assert generate.render(generate.rabbitmq()) == (generate.HERE / "rabbitmq.py").read_text()


def test_rabbitmq_loaded_plugins_follow_the_app_files():
    plugins = generate.rabbitmq_server() / "plugins"
    loaded = generate._loaded(plugins, ["rabbitmq_stream_management"])
    assert {"rabbit", "rabbitmq_stream", "rabbitmq_management", "rabbitmq_management_agent"} <= loaded
    assert "rabbitmq_mqtt" not in loaded


def test_redis_directives_are_config_get_of_redis_server():
    version, names = generate.redis_directives()
    assert names == redis.REDIS_DIRECTIVES
    assert f"redis-server {version}" in (generate.HERE / "redis.py").read_text()
    assert generate.render(generate.redis()) == (generate.HERE / "redis.py").read_text()


def test_pulsar_keys_take_set_spaced_and_commented_keys_not_prose():
    text = ("# The broker's port\nbrokerServicePort=6650\n#webServicePortTls=\n"
            "maxUnloadPercentage = 0.2\n# throttle-dispatch-rate = (publish-rate + x)\n"
            "#   e.g. 2\n")
    assert generate.pulsar_keys([text]) == {"brokerServicePort", "webServicePortTls",
                                           "maxUnloadPercentage"}


def test_rendered_tables_pass_the_line_limit():
    text = generate.render(generate.Module("x", "doc", (
        generate.Table("NAMES", frozenset(f"name.{i:03}" for i in range(60)), "names"),
        generate.Table("MAP", {"k" * 60: "v" * 60, "a": "b"}),
        generate.Table("NESTED", {"c": frozenset({"x", "y"})}))))
    assert max(len(line) for line in text.splitlines()) <= generate.WIDTH
    space: dict[str, object] = {}
    exec(compile(text, "x.py", "exec"), space)
    assert space["NAMES"] == frozenset(f"name.{i:03}" for i in range(60))
    assert space["MAP"] == {"k" * 60: "v" * 60, "a": "b"}
    assert space["NESTED"] == {"c": frozenset({"x", "y"})}


def test_unknown_platform_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]):
    assert generate.main(["kafak"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown platform 'kafak'" in err
