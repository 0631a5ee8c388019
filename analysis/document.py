"""The report as a document: titled sections of paragraphs, tables and chart references, which
report.md and report.html both render (analysis.markdown, analysis.html), so the two never
disagree. analysis.sections and analysis.configuration write the sections."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    text_columns: int = 1  # left-aligned leading columns; the rest are numbers


@dataclass
class Chart:
    name: str  # file stem in charts/
    title: str


Block = str | Table | Chart


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Document:
    title: str
    sections: list[Section]
