"""Finding a Java runtime for the brokers that run on the JVM (Kafka, ZooKeeper, Pulsar,
Pravega), and their heap sizes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from loadgen.core.errors import StackError


def find_java() -> str:
    """java from JAVA_HOME, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise StackError("java not found: install a Java 17 runtime (Debian/Ubuntu: apt-get install "
                         "openjdk-17-jre-headless) or set JAVA_HOME")
    return found


def java_major(java: str) -> int:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StackError(f"{java} does not run: {exc}") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m is None:
        raise StackError(f"cannot tell the Java version of {java}: {out.stderr.strip()[:200]}")
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


_HEAP = re.compile(r"(\d+)([kKmMgG])")
_HEAP_UNIT_MB = {"k": 1 / 1024, "m": 1, "g": 1024}


def parse_heap(text: str) -> str:
    """A JVM heap size as -Xmx takes it (`1G`, `512m`, `262144k`), kept as written."""
    m = _HEAP.fullmatch(text)
    if m is None or int(m.group(1)) == 0:
        raise ValueError("expected a JVM heap size like 1G or 512M")
    return text


def heap_megabytes(heap: str) -> int:
    """The size of a heap that parse_heap accepted, in whole MiB (at least 1)."""
    m = _HEAP.fullmatch(heap)
    if m is None:
        raise ValueError(f"not a JVM heap size: {heap!r}")
    return max(1, int(int(m.group(1)) * _HEAP_UNIT_MB[m.group(2).lower()]))
