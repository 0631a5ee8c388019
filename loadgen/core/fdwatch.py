"""Watching a descriptor for input without changing how it reads.

uvloop (libuv) switches a descriptor to non-blocking mode when it is watched with add_reader()
and leaves it so; the standard loop does not. Code that watches a multiprocessing pipe and then
reads a whole message with a blocking recv() (or sends from another thread) would then see
BlockingIOError mid-message, and a terminal's standard input left non-blocking breaks the shell
that shares it. watch_readable() puts the descriptor's mode back as it was."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable


def watch_readable(loop: asyncio.AbstractEventLoop, fd: int, callback: Callable[[], object]) -> None:
    """loop.add_reader(fd, callback), the descriptor's blocking mode unchanged."""
    blocking = os.get_blocking(fd)
    loop.add_reader(fd, callback)
    if os.get_blocking(fd) != blocking:
        os.set_blocking(fd, blocking)
