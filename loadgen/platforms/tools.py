"""The programs several platforms' local runtimes need (`streambench doctor` looks for them):
a Java 17 runtime for the JVM brokers, Maven to assemble their jars from Maven Central."""

from __future__ import annotations

import shutil

from compose.java import find_java
from loadgen.core.errors import StackError
from loadgen.core.platform import Prerequisite, tool_version


def _java() -> str | None:
    try:
        return find_java()
    except StackError:
        return None


JAVA = Prerequisite("java", ("local",), _java,
                    lambda path: tool_version([path, "-version"], r'version "(?:1\.)?(\d+)'),
                    "Java 17: Debian/Ubuntu: apt-get install openjdk-17-jre-headless, or set "
                    "JAVA_HOME")
MAVEN = Prerequisite("maven", ("local",), lambda: shutil.which("mvn"),
                     lambda path: tool_version([path, "--version"], r"Apache Maven ([0-9.]+)"),
                     "Debian/Ubuntu: apt-get install maven (the jars are assembled on first use)")
