"""A run table's journal: the rows since its last Parquet file, as an Arrow IPC stream.

The sink appends each tick's rows of a table to `_journal-NNNNN.arrows`, NNNNN being the
number of the Parquet file those rows go into at the next rotation; once `part-NNNNN.parquet`
is in place the journal is removed. A journal whose Parquet file is not there was left by a
killed process: its rows are nowhere else. A process killed while writing leaves the stream
cut inside a batch; it is read up to its last whole batch. Only pyarrow here: the report
(Spark) and replay (pyarrow) both read a run's files through this module.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa

PART_RE = re.compile(r"^part-(\d+)\.parquet$")
JOURNAL_RE = re.compile(r"^_journal-(\d+)\.arrows$")


def part_name(part: int) -> str:
    return f"part-{part:05d}.parquet"


def journal_name(part: int) -> str:
    # "_" first: Spark and pyarrow datasets skip it when they list a table's Parquet files
    return f"_journal-{part:05d}.arrows"


def used_parts(table_dir: Path) -> list[int]:
    """The numbers taken in a table directory, by a Parquet file or a journal."""
    try:
        names = os.listdir(table_dir)
    except OSError:
        return []
    return [int(m.group(1)) for n in names if (m := PART_RE.match(n) or JOURNAL_RE.match(n))]


def table_files(table_dir: Path) -> tuple[list[Path], list[Path]]:
    """A table's closed Parquet files and the journals left beside them (those whose Parquet
    file was never written), each in number order."""
    try:
        names = sorted(os.listdir(table_dir))
    except OSError:
        return [], []
    parts = {n for n in names if PART_RE.match(n)}
    journals = [table_dir / n for n in names
                if (m := JOURNAL_RE.match(n)) and part_name(int(m.group(1))) not in parts]
    return [table_dir / n for n in sorted(parts)], journals


def read_journal(path: Path, schema: pa.Schema) -> pa.Table:
    """A journal's whole batches with the columns of `schema` (by name; a column the journal
    lacks reads as null). A stream cut inside a batch ends before it; one cut inside its
    schema, or a file gone meanwhile (its Parquet file has just been written), has no rows."""
    batches = []
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (OSError, pa.ArrowInvalid):  # cut: the writer was killed inside it
                    break
    except (OSError, pa.ArrowInvalid):
        return schema.empty_table()
    if not batches:
        return schema.empty_table()
    got = pa.Table.from_batches(batches)
    columns = [got[f.name].cast(f.type) if f.name in got.column_names
               else pa.nulls(got.num_rows, f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema)


def journal_rows(table_dir: Path, schema: pa.Schema) -> pa.Table:
    """The rows of a table's leftover journals, in order (no rows when there is none)."""
    tables = [read_journal(p, schema) for p in table_files(table_dir)[1]]
    return pa.concat_tables(tables) if tables else schema.empty_table()
