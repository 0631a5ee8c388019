"""A load process prints a library's asyncio log records (a future whose exception nobody read,
after a broker died) as one line each, without the library's traceback."""

from __future__ import annotations

import logging
import sys

from loadgen.worker import _OneLine


def test_a_record_with_an_exception_is_one_line() -> None:
    try:
        raise ConnectionError("Attempt to send a request to node which is not ready (node id 0).")
    except ConnectionError:
        exc_info = sys.exc_info()
    record = logging.LogRecord("asyncio", logging.ERROR, __file__, 1,
                               "Future exception was never retrieved\nfuture: <Future finished>",
                               (), exc_info)
    line = _OneLine().format(record)
    assert "\n" not in line and "Traceback" not in line
    assert line == ("Future exception was never retrieved future: <Future finished> "
                    "(ConnectionError: Attempt to send a request to node which is not ready "
                    "(node id 0).)")
