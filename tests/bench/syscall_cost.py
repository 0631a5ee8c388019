"""What one paced message's system calls cost this machine: the part of the load generator's
CPU that no client of the paced design can avoid, whatever its language.

A paced Redis producer and consumer (tests/bench/paced_cost.py's design, and that of its C
client, c_floor.c) need, per message at 1,000 msg/s: a timer armed for the slot and a wake-up
from it; the XADD written to a redis-server that has gone to sleep since the last one; a
wake-up for its reply and the delivery to the blocked consumer, both read; the next
XREADGROUP and the XACK written to the server, asleep again by then (the XACK's reply comes
with the next delivery). This bench makes exactly those calls, one message at a time, from
one thread on an epoll loop (as uvloop does), and times each with the thread's own CPU clock
(the cost of reading that clock taken off). Nothing else runs between them: no interpreter
work worth counting, no recording.

It prints each call's CPU per message (median and mean over the run), their sum, and that sum
as % of a core at 1,000 msg/s beside the whole thread's CPU over the run (which adds the
loop's own few instructions). That sum is a floor for any client of this design on this
machine: paced_cost.py's goal of 8 % of a core at 1,000 msg/s is out of reach where the
floor alone is above it.

Usage: syscall_cost.py [--count N] [--rate R] (starts its own redis-server on a free
loopback port)."""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import select
import shutil
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import hiredis

from compose.process import free_port, start_process, stop_process
from loadgen.pacing import _Itimerspec, tune_process

STREAM, GROUP = b"syscall-cost", b"cost"
T = TypeVar("T")
_CLOCK_MONOTONIC, _TFD_TIMER_ABSTIME = 1, 1


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def call(s: socket.socket, payload: bytes, replies: int) -> list[object]:
    """A blocking request, for the setup."""
    s.sendall(payload)
    reader, out = hiredis.Reader(), list[object]()
    while len(out) < replies:
        reader.feed(s.recv(1 << 20))
        while (reply := reader.gets()) is not False:
            out.append(reply)
    return out


STEPS = ("arm the timer (timerfd_settime)", "wait for the timer (epoll)",
         "write the XADD (server asleep)", "wait for reply + delivery (epoll)",
         "read the XADD's reply", "read the delivery", "write XREADGROUP + XACK (server asleep)")


def measure(port: int, count: int, rate: float) -> tuple[dict[str, list[int]], float, float]:
    """`count` messages at `rate`: each step's CPU (ns) per message, the thread's CPU over the
    run (s) and its wall time (s)."""
    libc = ctypes.CDLL(None, use_errno=True)
    tfd = libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
    if tfd < 0:
        raise SystemExit("timerfd_create failed (Linux only)")
    spec = _Itimerspec()
    spec_ref = ctypes.byref(spec)
    producer, consumer = connect(port), connect(port)
    call(producer, command(b"DEL", STREAM) + command(b"XGROUP", b"CREATE", STREAM, GROUP, b"$",
                                                      b"MKSTREAM"), 2)
    read = command(b"XREADGROUP", b"GROUP", GROUP, b"c", b"COUNT", b"1000", b"BLOCK", b"0",
                   b"STREAMS", STREAM, b">")
    consumer.sendall(read)
    time.sleep(0.1)
    producer.setblocking(False)
    consumer.setblocking(False)
    ep = select.epoll()
    ep.register(tfd, select.EPOLLIN)
    ep.register(producer.fileno(), select.EPOLLIN)
    ep.register(consumer.fileno(), select.EPOLLIN)
    p_reader, c_reader = hiredis.Reader(), hiredis.Reader()
    payload = os.urandom(1024)
    # replies are read into one buffer, as streambench's connections read theirs
    buffer = bytearray(256 * 1024)
    view = memoryview(buffer)
    clock = time.thread_time_ns
    # reading the clock twice back to back: taken off every figure
    overhead = int(statistics.median(-(clock() - clock()) for _ in range(10_000)))
    steps: dict[str, list[int]] = {name: [] for name in STEPS}
    arm, wait_t, w_xadd, wait_r, r_reply, r_deliv, w_ack = (steps[name] for name in STEPS)
    step_ns = round(1e9 / rate)
    t0 = time.monotonic_ns() + 20_000_000

    def timed(fn: Callable[..., T], *args: object) -> tuple[T, int]:
        """fn(*args) and the CPU it took (ns)."""
        a = clock()
        result = fn(*args)
        return result, clock() - a - overhead

    def read_from(sock: socket.socket, reader: hiredis.Reader, into: list[int]) -> list[object]:
        got, cpu = timed(sock.recv_into, buffer)
        into.append(cpu)
        reader.feed(bytes(view[:got]))
        return list(iter(reader.gets, False))

    cpu0, wall0 = resource.getrusage(resource.RUSAGE_THREAD), time.monotonic()
    for i in range(count):
        at = t0 + i * step_ns
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(at, 1_000_000_000)
        arm.append(timed(libc.timerfd_settime, tfd, _TFD_TIMER_ABSTIME, spec_ref, None)[1])
        waited = 0
        while True:
            ready, cpu = timed(ep.poll)
            waited += cpu
            if any(fd == tfd for fd, _ in ready):
                break
        wait_t.append(waited)
        # arming the timer again clears it; this run disarms it instead, outside the figures
        spec.it_value.tv_sec = spec.it_value.tv_nsec = 0
        libc.timerfd_settime(tfd, _TFD_TIMER_ABSTIME, spec_ref, None)
        xadd = command(b"XADD", STREAM, b"MAXLEN", b"~", b"10000", b"*", b"t",
                       b"%d" % time.time_ns(), b"p", payload)
        w_xadd.append(timed(producer.send, xadd)[1])
        replied = delivered = False
        waited = 0
        while not (replied and delivered):
            ready, cpu = timed(ep.poll)
            waited += cpu
            for fd, _ in ready:
                if fd == producer.fileno():
                    replied = bool(read_from(producer, p_reader, r_reply)) or replied
                elif fd == consumer.fileno():
                    for reply in read_from(consumer, c_reader, r_deliv):
                        if isinstance(reply, list):  # else the previous XACK's count
                            ids = [entry[0] for entry in reply[0][1]]
                            delivered = True
        wait_r.append(waited)
        # the next read first, the XACK behind it: the server runs it once the read is
        # answered and sends both replies together, as streambench's consumer does
        w_ack.append(timed(consumer.send, read + command(b"XACK", STREAM, GROUP, *ids))[1])
    cpu1, wall1 = resource.getrusage(resource.RUSAGE_THREAD), time.monotonic()
    thread_cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
    ep.close()
    os.close(tfd)
    producer.close()
    consumer.close()
    return steps, thread_cpu, wall1 - wall0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=10_000, help="messages (default 10,000)")
    parser.add_argument("--rate", type=float, default=1000.0, help="msg/s (default 1,000)")
    args = parser.parse_args()
    if args.count < 100 or not 0 < args.rate <= 10_000:
        print("--count must be at least 100 and --rate within (0, 10,000]")
        return 2
    if shutil.which("redis-server") is None:
        print("redis-server is needed (apt-get install redis-server)")
        return 2
    tune_process()  # timer slack and allocator settings, as in a load process
    work = Path(tempfile.mkdtemp(prefix="streambench-bench-"))
    port = free_port()
    server = start_process(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--dir", str(work)],
                           work / "redis.log")
    try:
        time.sleep(0.5)
        steps, thread_cpu, wall = measure(port, args.count, args.rate)
    finally:
        stop_process(server)
        shutil.rmtree(work, ignore_errors=True)
    n = args.count
    print(f"{n:,} paced messages at {args.rate:,.0f} msg/s, 1 KiB, one local redis-server, "
          f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.2f}); CPU of each call, µs")
    print(f"{'call':<44}{'per msg':>8}{'p50':>8}{'mean':>8}{'µs/msg':>9}")
    total = 0.0
    for name, values in steps.items():
        per_msg = len(values) / n
        mean = statistics.fmean(values) / 1e3
        total += mean * per_msg
        print(f"{name:<44}{per_msg:>8.2f}{statistics.median(values) / 1e3:>8.1f}{mean:>8.1f}"
              f"{mean * per_msg:>9.1f}")
    print(f"{'sum: the system calls of one message':<68}{total:>9.1f}")
    print(f"that sum as % of a core at 1,000 msg/s: {total / 10:.1f} %")
    print(f"the whole thread over the run: {thread_cpu / n * 1e6:.1f} µs a message, "
          f"{thread_cpu / wall * 100:.1f} % of a core at {args.rate:,.0f} msg/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
