"""report.md: the report document as GitHub-flavoured markdown, charts linked from charts/."""

from __future__ import annotations

from analysis.document import Chart, Document, Table


def _table(table: Table) -> str:
    """A markdown table; the leading text columns left-aligned, the rest right."""

    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    align = ["---" if i < table.text_columns else "---:" for i in range(len(table.headers))]
    lines = [
        "| " + " | ".join(esc(h) for h in table.headers) + " |",
        "| " + " | ".join(align) + " |",
    ]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines)


def render_markdown(doc: Document, charts_dir: str = "charts") -> str:
    out = [f"# {doc.title}", ""]
    for section in doc.sections:
        out += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                out.append(_table(block))
            elif isinstance(block, Chart):
                out.append(f"![{block.title}]({charts_dir}/{block.name}.png)")
            else:
                out.append(block)
            out.append("")
    return "\n".join(out)
