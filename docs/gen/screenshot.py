"""Copies the dashboard's picture for the README and the docs from the SVG snapshot tests
(tests/tui/__snapshots__), so it shows what the tests check: `python docs/gen/screenshot.py`
after the snapshots change (`pytest tests/tui --snapshot-update`)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = ROOT / "tests" / "tui" / "__snapshots__"
# picture in docs/images <- the snapshot it is copied from
PICTURES = {
    "dashboard.svg": SNAPSHOTS / "test_snapshot" / "test_dashboard[120x40].svg",
    "detail.svg": SNAPSHOTS / "test_snapshot" / "test_detail_screen[120x40].svg",
    "compare.svg": SNAPSHOTS / "test_compare" / "test_compare_view[120x40].svg",
}
IMAGES = ROOT / "docs" / "images"


def main() -> int:
    IMAGES.mkdir(exist_ok=True)
    for name, source in PICTURES.items():
        shutil.copyfile(source, IMAGES / name)
        print(f"{source.relative_to(ROOT)} -> {(IMAGES / name).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
