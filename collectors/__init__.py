"""Telemetry collectors: broker resources, consumer lag, broker-native counters."""
