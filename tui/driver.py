"""A terminal driver whose input thread sleeps until there is input.

Textual's Linux driver reads the keyboard in a thread that wakes ten times a second, whether a
key came or not, to see if it should stop and to time out a lone ESC. streambench shares its
server with the brokers it measures, and on a virtual machine every wake-up costs CPU of its
own: this driver's input thread blocks in select() until a key arrives or the driver stops
(a pipe wakes it then), and waits with a timeout only while input may still be the start of an
escape sequence (ESC alone is the escape key once ESCDELAY passes with nothing after it).

Everything else (terminal modes, output, resize, suspend and resume) is Textual's driver.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
from codecs import getincrementaldecoder
from typing import TYPE_CHECKING, Any

from textual import constants
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

if TYPE_CHECKING:
    from textual.app import App

# After input, wait this long for more before the parser's timeout is due (a lone ESC, an
# unfinished sequence): the parser decides with its own clock, so a margin on top of it.
_ESCAPE_WAIT_S = constants.ESCAPE_DELAY + 0.02


class _WakingEvent(threading.Event):
    """The driver's stop flag: setting it also wakes the input thread's select()."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):  # full (already woken) or closed
            os.write(self._wake_fd, b"!")


class QuietLinuxDriver(LinuxDriver):
    """Textual's Linux driver with an input thread that wakes only for input and its stop."""

    def __init__(self, app: App[Any], **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._wake_read, self._wake_write = os.pipe()  # not inherited by child processes
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.exit_event = _WakingEvent(self._wake_write)

    def run_input_thread(self) -> None:
        selector = selectors.SelectSelector()  # as Textual's: other selectors miss ttys on macOS
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(self._wake_read, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode

        def dispatch(messages: Any) -> None:
            for message in messages:
                self.process_message(message)

        try:
            timeout: float | None = None
            while not self.exit_event.is_set():
                got_input = False
                for key, _mask in selector.select(timeout):
                    if key.fd == self._wake_read:
                        self._drain_wake()
                        continue
                    data = decode(os.read(self.fileno, 4096))
                    if data:
                        got_input = True
                        dispatch(parser.feed(data))
                    else:  # end of file (stdin not a terminal): wait for the stop alone
                        selector.unregister(self.fileno)
                dispatch(parser.tick())  # a lone ESC whose wait is over becomes the escape key
                timeout = _ESCAPE_WAIT_S if got_input else None
            dispatch(parser.tick())
        finally:
            selector.close()
            with contextlib.suppress(EOFError, ParseError):
                for _ in parser.feed(""):
                    pass

    def _drain_wake(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self._wake_read, 64):
                pass

    def close(self) -> None:
        super().close()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)


def quiet_driver_class(default: type[Driver]) -> type[Driver]:
    """The driver to use where Textual picked `default`: this one instead of Textual's Linux
    driver; any other (a driver named in TEXTUAL_DRIVER, another platform's) as it is."""
    return QuietLinuxDriver if default is LinuxDriver else default
