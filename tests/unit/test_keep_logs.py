"""Broker logs copied into the run's log dir when a local stack goes down."""

from __future__ import annotations

from compose import process


def test_logs_named_by_their_path_and_cut_to_their_end(tmp_path, monkeypatch):
    monkeypatch.setattr(process, "LOG_LIMIT_BYTES", 10)
    root = tmp_path / "data"
    (root / "broker-1").mkdir(parents=True)
    (root / "broker-1" / "broker.log").write_bytes(b"0123456789abcdef")
    (root / "empty.log").write_bytes(b"")
    (root / "small.log").write_bytes(b"ready\n")
    out = tmp_path / "run" / "logs" / "0-kafka"
    process.keep_logs([root / "broker-1" / "broker.log", root / "empty.log", root / "small.log",
                       root / "missing.log"], root, out)
    assert sorted(p.name for p in out.iterdir()) == ["broker-1-broker.log", "small.log"]
    assert (out / "broker-1-broker.log").read_bytes() == b"6789abcdef"
    assert (out / "small.log").read_bytes() == b"ready\n"


def test_nowhere_to_keep_them_is_not_an_error(tmp_path):
    (tmp_path / "x.log").write_text("line\n")
    process.keep_logs([tmp_path / "x.log"], tmp_path, None)
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the log dir should be: skipped, never raised
    process.keep_logs([tmp_path / "x.log"], tmp_path, blocked / "logs")
    assert blocked.is_file() and blocked.read_text() == ""
