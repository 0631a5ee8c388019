"""The setting names each platform knows, one module per platform, for checking a TARGET's
namespaced settings offline (with a "did you mean"): kafka, pulsar, redis, nats, pravega,
rabbitmq. Every table is extracted from the broker's own jars, source, schema or running server
by `python -m loadgen.platforms.setting_names.generate [PLATFORM…]`, which rewrites the modules;
they are not edited by hand."""
