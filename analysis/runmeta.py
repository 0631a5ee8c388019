"""Reading a run directory's run.json and checking its versions (docs/run-format.md,
"Versioning"), without Spark: the report and `streambench replay` both start here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.schema import SCHEMA_VERSION
from loadgen.core.errors import StreambenchError


def read_run_meta(path: Path, error: type[StreambenchError]) -> dict[str, Any]:
    """run.json of the run directory `path`; `error` (one line) when it is missing, unreadable,
    not an object, or needs a newer reader than this version."""
    run_json = path / "run.json"
    if not run_json.is_file():
        raise error(f"{path} is not a run directory (no run.json)")
    try:
        meta = json.loads(run_json.read_text(encoding="utf-8"))
    except RecursionError:
        raise error(f"{run_json} cannot be read: JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise error(f"{run_json} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                    f"{exc.msg.lower()}): the file was cut short or edited") from None
    except UnicodeDecodeError:
        raise error(f"{run_json} is not UTF-8 text: not a run.json streambench wrote") from None
    except (OSError, ValueError) as exc:  # ValueError: a 5,000-digit number
        raise error(f"{run_json} cannot be read: {str(exc)[:200]}") from None
    if not isinstance(meta, dict):
        raise error(f"{run_json} is not a run description (expected a JSON object)")
    version = meta.get("schema_version")
    needs = meta.get("min_reader_version", version)
    if not isinstance(version, int) or not isinstance(needs, int) or needs > SCHEMA_VERSION:
        raise error(
            f"{path} has run-file schema version {version!r} (readable from version "
            f"{needs!r}); this streambench reads version {SCHEMA_VERSION}: upgrade streambench"
        )
    return meta
