"""Only `tui` may import Textual: the engine must run headless (--headless, CI, Spark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADLESS_PACKAGES = ("loadgen", "collectors", "analysis", "compose")

PROBE = """
import importlib, pkgutil, sys
imported = []
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    imported.append(name)
    for info in pkgutil.walk_packages(package.__path__, prefix=name + "."):
        importlib.import_module(info.name)
        imported.append(info.name)
leaked = sorted(m for m in sys.modules if m == "textual" or m.startswith("textual."))
print(len(imported))
if leaked:
    sys.exit("textual imported: " + ", ".join(leaked[:5]))
"""


def test_engine_packages_do_not_import_textual() -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, *HEADLESS_PACKAGES], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) > len(HEADLESS_PACKAGES)  # the walk found the modules
