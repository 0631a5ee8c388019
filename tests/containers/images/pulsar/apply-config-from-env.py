#!/usr/bin/env python3
"""Set keys of Pulsar configuration files from the environment, the public image's way:

- a variable named like a key the file has (`brokerServicePort=6651`) replaces its value;
- a variable `PULSAR_PREFIX_<key>` does the same for any key, and a key the file lacks is
  appended to it.

Usage: apply-config-from-env.py FILE [FILE...]"""

import os
import re
import sys

PREFIX = "PULSAR_PREFIX_"
KEY_LINE = re.compile(r"^([A-Za-z0-9_.-]+)=")


def apply(path: str) -> None:
    with open(path) as f:
        lines = f.read().splitlines()
    where = {}
    for i, line in enumerate(lines):
        m = KEY_LINE.match(line)
        if m:
            where[m.group(1)] = i
    wanted = {}
    for name in sorted(os.environ):
        if name.startswith(PREFIX):
            wanted[name[len(PREFIX):]] = os.environ[name].strip()
        elif name in where:
            wanted.setdefault(name, os.environ[name].strip())
    for key, value in wanted.items():
        shown = "(hidden)" if "password" in key.lower() else value
        print(f"[{path}] {key} = {shown}")
        if key in where:
            lines[where[key]] = f"{key}={value}"
        else:
            lines.append(f"{key}={value}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: apply-config-from-env.py FILE [FILE...]")
    for conf in sys.argv[1:]:
        apply(conf)
