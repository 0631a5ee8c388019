"""mkdocs hooks (mkdocs.yml `hooks:`): the pages generated from the code (the option, platform
and key references) and CONTRIBUTING.md, added to the site at every build, in memory."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

GEN = Path(__file__).resolve().parent
ROOT = GEN.parents[1]


def _options() -> Any:
    """docs/gen/options.py (docs/gen is no package)."""
    spec = importlib.util.spec_from_file_location("streambench_docs_options", GEN / "options.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _contributing() -> str:
    """CONTRIBUTING.md as a page of the site: its links into docs/ made relative to docs/."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files: Files, config: Any) -> Files:
    generated = {**_options().pages(), "contributing.md": _contributing()}
    for src, content in generated.items():
        existing = files.get_file_from_path(src)
        if existing is not None:  # written out by `python docs/gen/options.py`: the build's own wins
            files.remove(existing)
        files.append(File.generated(config, src, content=content))
    return files
