"""report.html: the report document as one self-contained HTML page. Charts are embedded as
base64 PNG and the style sheet is inline, so the file opens anywhere, offline, on its own."""

from __future__ import annotations

import base64
from html import escape

from analysis.document import Chart, Document, Table

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #1a1a1a; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #fafafa; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #555; }
img { max-width: 100%; height: auto; }
"""


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.headers)
    body = []
    for row in table.rows:
        cells = "".join(
            f"<td>{escape(c)}</td>" if i < table.text_columns else
            f'<td class="num">{escape(c)}</td>'
            for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(doc: Document, charts: dict[str, bytes]) -> str:
    """The page; `charts` maps each chart name to its PNG bytes."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(doc.title)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>{escape(doc.title)}</h1>",
    ]
    for section in doc.sections:
        parts.append(f"<section><h2>{escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Table):
                parts.append(_table(block))
            elif isinstance(block, Chart):
                png = base64.b64encode(charts[block.name]).decode("ascii")
                parts.append(
                    f'<figure><img alt="{escape(block.title)}" '
                    f'src="data:image/png;base64,{png}">'
                    f"<figcaption>{escape(block.title)}</figcaption></figure>"
                )
            else:
                parts.append(f"<p>{escape(block)}</p>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
