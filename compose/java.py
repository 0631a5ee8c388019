"""Finding a Java runtime for the brokers that run on the JVM (Kafka, ZooKeeper, Pulsar)."""

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
