"""Benchmark of the machine, not of streambench: how long memory takes to reach again after it
was left alone for a while.

On bare metal, touching a page of memory that is still mapped costs nanoseconds whether it was
touched a millisecond or a minute ago. On some virtual machines it does not: the host may take
back the guest's pages it sees unused (to track, share or reclaim memory), and the guest's
next touch of such a page goes through the host, at tens of microseconds a page, without a
page fault the guest could count. streambench's processes do most of their work once a tick
(every second): the load process's tick, the dashboard's repaint, the Parquet sink's writer
every few seconds; each of them runs code and reads data that nothing touched since the last
time. Where this costs tens of microseconds a page, a tick costs several times its CPU on
warm memory, and a load process's tick holds its next sends for as long: CPU figures measured
on such a machine include it. The CPU benches print `recall_us()` beside their figures.

Prints, for memory left alone 0.01, 0.1, 1 and 4 s (the process busy in between, then idle
in between), the time to touch it again per 4 KiB page (the median of several probes over
256 pages each)."""

from __future__ import annotations

import statistics
import time

PAGE = 4096
PAGES = 256


def _touch(buf: bytearray, first: int) -> float:
    """Writes one byte in each of PAGES pages from page `first`; seconds taken."""
    start = time.perf_counter()
    for at in range(first * PAGE, (first + PAGES) * PAGE, PAGE):
        buf[at] ^= 1
    return time.perf_counter() - start


def recall_us(after_s: float = 1.0, probes: int = 3, busy: bool = True) -> float:
    """µs to touch a 4 KiB page again that was left alone for `after_s` (median of `probes`;
    the process spins meanwhile when `busy`, sleeps otherwise)."""
    buf = bytearray(PAGE * PAGES * probes)
    for i in range(probes):
        _touch(buf, i * PAGES)  # every page mapped and touched once
    per_page = []
    for i in range(probes):
        if busy:
            until = time.monotonic() + after_s
            while time.monotonic() < until:
                pass
        else:
            time.sleep(after_s)
        per_page.append(_touch(buf, i * PAGES) / PAGES * 1e6)
        # the other probes' pages were left alone longer: touched again, so each probe waits
        # after_s only
        for j in range(i + 1, probes):
            _touch(buf, j * PAGES)
    return statistics.median(per_page)


def main() -> None:
    print("time to touch a 4 KiB page again after it was left alone (µs a page, median of 3 "
          f"probes of {PAGES} pages)")
    print(f"{'left alone':>12}{'process busy':>16}{'process idle':>16}")
    for after in (0.01, 0.1, 1.0, 4.0):
        print(f"{after:>10g} s{recall_us(after):>16.2f}{recall_us(after, busy=False):>16.2f}")


if __name__ == "__main__":
    main()
