"""The log pane's reading: the last lines of a file, which of them are new, the filter."""

from __future__ import annotations

from pathlib import Path

from tui.logs import TAIL_BYTES, appended, matching, tail_lines


def test_tail_lines_of_a_file_longer_than_what_is_read(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    lines = [f"line {i:06d} " + "x" * 90 for i in range(2 * TAIL_BYTES // 100)]
    log.write_text("\n".join(lines) + "\n")
    assert tail_lines(log, 200) == lines[-200:]
    assert tail_lines(log, 10_000)[0] in lines  # the line cut by the read is left out
    assert tail_lines(tmp_path / "missing.log", 200) == []


def test_appended_finds_the_new_lines_of_a_moving_window() -> None:
    old = ["a", "b", "c", "d"]
    assert appended(old, ["c", "d", "e", "f"]) == ["e", "f"]
    assert appended(old, old) == []
    assert appended(old, ["x", "y"]) is None  # another log: shown again whole
    assert appended([], ["a"]) is None


def test_the_filter_ignores_case() -> None:
    lines = ["* Ready to accept connections", "# Server initialized"]
    assert matching(lines, "READY") == lines[:1]
    assert matching(lines, "") == lines
