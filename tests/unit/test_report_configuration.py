"""The report's configuration tables from run.json settings: what a target runs with beyond the
platform's defaults, and the settings in which targets differ."""

from __future__ import annotations

from analysis.configuration import differences, target_table


def _e(value: str, source: str, read_back: bool = True) -> dict:
    return {"value": value, "source": source, "read_back": read_back}


DEFAULT = {
    "broker.managedLedgerNewEntriesCheckDelayInMillis": _e("10", "platform default"),
    "broker.journalSyncData": _e("true", "streambench default", read_back=False),
    "broker.brokerServicePort": _e("41001", "streambench default"),
    "producer.batching_enabled": _e("true", "streambench default", read_back=False),
    "broker.numIOThreads": _e("8", "platform default"),
}
LATENCY = {
    "broker.managedLedgerNewEntriesCheckDelayInMillis": _e("0", "profile"),
    "broker.journalSyncData": _e("true", "streambench default", read_back=False),
    "broker.brokerServicePort": _e("42002", "streambench default"),
    "producer.batching_enabled": _e("false", "profile", read_back=False),
    "broker.numIOThreads": _e("8", "platform default"),
    "consumer.receiver_queue_size": _e("10", "user", read_back=False),
}


def test_target_table_leaves_out_platform_defaults() -> None:
    table = target_table(LATENCY)
    assert [r[0] for r in table.rows] == ["broker.brokerServicePort", "broker.journalSyncData",
                                          "broker.managedLedgerNewEntriesCheckDelayInMillis",
                                          "consumer.receiver_queue_size",
                                          "producer.batching_enabled"]
    assert ["producer.batching_enabled", "false", "profile (as set)"] in table.rows


def test_differences_name_each_setting_that_differs() -> None:
    rows = differences([DEFAULT, LATENCY])
    assert rows == [
        ["broker.managedLedgerNewEntriesCheckDelayInMillis", "10 (platform default)", "0 (profile)"],
        ["consumer.receiver_queue_size", "—", "10 (user)"],
        ["producer.batching_enabled", "true (streambench default)", "false (profile)"],
    ]  # the ports streambench chose differ too, and are left out
    assert differences([DEFAULT, dict(DEFAULT)]) == []
    # a port the user chose is a difference
    chosen = {**DEFAULT, "broker.brokerServicePort": _e("6650", "user")}
    assert differences([DEFAULT, chosen])[0][0] == "broker.brokerServicePort"
