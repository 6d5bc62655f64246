"""Write a report's blocks out: as ``report.md`` and ``provenance.md`` next to their PNGs, and
as one self-contained ``report.html`` with the figures embedded as base64 PNG and the
provenance in a collapsed section at its end (a link to ``provenance.md#x`` becomes ``#x``
there, and opens the section).

A :class:`Block` is one heading, paragraph, note, list, table or figure; the lists of blocks, in
the report's order, come from :func:`ablate.report.blocks.build_blocks` and
:func:`ablate.report.provenance.provenance_blocks`.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ablate.report.plots import FigureFile

PROVENANCE = "provenance.md"
"""The file beside ``report.md`` with each claim's registration proof, attempts and tests, the
reproducibility checks and every run."""


@dataclass
class Block:
    kind: str  # h1 h2 h3 p note ul table fig
    content: Any
    caption: str = ""
    tag: str = ""
    """What a table is, for the views that show it live (``answer``, ``verdicts``, ``runs``:
    :mod:`ablate.report.dashboards`); "" for any other block."""


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it (lower case, spaces to ``-``, other punctuation
    but ``-`` and ``_`` dropped); the HTML page gives its headings the same ids."""
    return re.sub(r"[^a-z0-9_ -]", "", text.lower()).replace(" ", "-")


# --- markdown ----------------------------------------------------------------------------------


def cell_text(x: Any) -> str:
    """A table cell as text; a whole float as an integer (``1.0`` -> ``'1'``)."""
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def _md_cell(x: Any) -> str:
    return cell_text(x).replace("|", "\\|").replace("\n", " ")


def md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(_md_cell(c) for c in cols) + " |"]
    lines.append("| " + " | ".join("---" for _ in cols) + " |")
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    return "\n".join(lines)


def to_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    n_fig = 0
    for b in blocks:
        if b.kind == "h1":
            out.append(f"# {b.content}")
        elif b.kind == "h2":
            out.append(f"## {b.content}")
        elif b.kind == "h3":
            out.append(f"### {b.content}")
        elif b.kind == "p":
            out.append(str(b.content))
        elif b.kind == "note":
            out.append(f"> {b.content}")
        elif b.kind == "ul":
            out.append("\n".join(f"- {item}" for item in b.content))
        elif b.kind == "table":
            out.append(md_table(b.content) if len(b.content) else "(no rows)")
            if b.caption:
                out.append(f"*{b.caption}*")
        elif b.kind == "fig":
            n_fig += 1
            f: FigureFile = b.content
            out.append(f"![{f.title}]({f.path.name})\n\n*Figure {n_fig}: {b.caption}*")
    return "\n\n".join(out) + "\n"


# --- html --------------------------------------------------------------------------------------

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1400px;
margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
p,ul,figure{max-width:1000px}
h1{font-size:1.6em}
h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.table-wrap{overflow-x:auto;margin:.6em 0;max-width:100%}
table{border-collapse:collapse;font-size:.8em}
th,td{border:1px solid #ddd;padding:.3em .4em;text-align:left;vertical-align:top}
th{background:#f4f4f4}tr:nth-child(even) td{background:#fafafa}
th[title]{text-decoration:underline dotted;cursor:help}
td.num{font-variant-numeric:tabular-nums}td.text{min-width:6em;max-width:28em}
.legend{font-size:.8em;color:#555;margin:.2em 0 1em}
.caption,figcaption{font-size:.85em;color:#555;font-style:italic;margin-bottom:1em}
.note{background:#fff4d6;border-left:4px solid #e0a800;padding:.5em .8em}
figure{margin:1.2em 0}img{max-width:100%;height:auto}code{background:#f2f2f2;padding:0 .2em}
h3{font-size:1.05em;margin-top:1.2em}a{color:#0b57d0}
details{margin-top:2em;border-top:2px solid #ddd;padding-top:.6em}
summary{cursor:pointer;font-weight:600;font-size:1.1em}
"""
"""Tables fit the page: cells wrap only where :func:`_html_cell` allows (between the parts of
``mean ± sd [lo, hi]``, after a comma in a label), never inside a number; the wrapper's
scrollbar is a last resort for a page narrower than ~1000 px."""


def inline_html(text: str) -> str:
    """Markdown's inline marks as HTML: ``code``, **strong**, *emphasis* (around code spans
    too, never inside one) and ``[links](url)``."""
    codes: list[str] = []

    def stash(m: re.Match) -> str:
        codes.append(f"<code>{html.escape(m.group(0)[1:-1])}</code>")
        return f"\x00{len(codes) - 1}\x00"

    s = html.escape(re.sub(r"`[^`]+`", stash, str(text)))
    s = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", s)
    s = re.sub(r"(?<![\w*])\*(?=\S)([^*]+?)(?<=\S)\*(?![\w*])", r"<em>\1</em>", s)
    s = re.sub(r"\[([^\]]+)\]\(([^)\s]+)\)", lambda m: f'<a href="{_href(m[2])}">{m[1]}</a>', s)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], s)


def _href(url: str) -> str:
    """A Markdown link's target in the HTML page: ``provenance.md#x`` is ``#x`` there."""
    if url.startswith(f"{PROVENANCE}#"):
        return url.removeprefix(PROVENANCE)
    return "#provenance" if url == PROVENANCE else url


# long column names -> what the HTML header shows; the full name is its tooltip and legend
_HTML_ABBREV = {
    "final val loss": "final loss",
    "best val loss": "best loss",
    "final val bpc": "bpc",
    "final val ppl": "ppl",
    "non-embedding params": "non-emb params",
    "95% bootstrap CI": "boot. CI",
    "Welch t (df)": "Welch t",
    "not finished": "unfinished",
    "n (diverged)": "n (div.)",
    "wall time": "wall",
}
# a cell that starts like a number (mean ± std [lo, hi], 1.23e-3, −0.05) never wraps
_NUMERIC_CELL = re.compile(r"^\[?[-+−]?(\d|\.\d|nan|inf|—$|-$)")


NBSP = "\u00a0"


def _html_cell(v: Any) -> str:
    """A cell that wraps only between whole parts: ``mean ± sd`` | ``[lo, hi]`` of a number
    cell; after a comma or ``=`` before a letter in a label (``norm=<wbr>post,<wbr>warm=0``)."""
    text = cell_text(v)
    numeric = bool(_NUMERIC_CELL.match(text))
    cls = "num" if numeric or len(text) <= 24 else "text"
    out = html.escape(text)
    if numeric:  # each number and each interval whole
        out = out.replace(" ± ", f"{NBSP}±{NBSP}")
        out = re.sub(r", (?=[-+−]?\d)", f",{NBSP}", out)
    out = re.sub(r"([,=])(?=[^\d\s])", r"\1<wbr>", out)
    return f'<td class="{cls}">{out}</td>'


def html_table(df: pd.DataFrame, tag: str = "") -> str:
    """A table that fits: short headers (full names in a tooltip and a legend), numbers on one
    line, and a horizontal scroll inside its own box when the page is narrower than the table;
    ``tag`` (what it is, e.g. ``answer``) as the box's ``data-table``."""
    if not len(df):
        return "<p>(no rows)</p>"
    heads, legend = [], []
    for c in map(str, df.columns):
        short = _HTML_ABBREV.get(c)
        if short is None:  # an axis's snake_case name may break after each underscore
            heads.append(f"<th>{html.escape(c).replace('_', '_<wbr>')}</th>")
        else:
            heads.append(f'<th title="{html.escape(c)}">{html.escape(short)}</th>')
            legend.append(f"{html.escape(short)} = {html.escape(c)}")
    body = "".join(
        "<tr>" + "".join(_html_cell(v) for v in row) + "</tr>" for row in df.itertuples(index=False)
    )
    table = f"<table><thead><tr>{''.join(heads)}</tr></thead><tbody>{body}</tbody></table>"
    note = f'<p class="legend">{"; ".join(legend)}</p>' if legend else ""
    what = f' data-table="{html.escape(tag)}"' if tag else ""
    return f'<div class="table-wrap"{what}>{table}</div>{note}'


def _html_parts(blocks: list[Block], n_fig: int = 0) -> tuple[list[str], int]:
    """The blocks as HTML elements, figures numbered on from ``n_fig``."""
    parts = []
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            ident = f' id="{slug(str(b.content))}"' if b.kind != "h1" else ""
            parts.append(f"<{b.kind}{ident}>{inline_html(b.content)}</{b.kind}>")
        elif b.kind == "p":
            paras = str(b.content).split("\n\n")
            parts.extend(f"<p>{inline_html(p)}</p>" for p in paras)
        elif b.kind == "note":
            parts.append(f'<p class="note">{inline_html(b.content)}</p>')
        elif b.kind == "ul":
            parts.append(
                "<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in b.content) + "</ul>"
            )
        elif b.kind == "table":
            parts.append(html_table(b.content, b.tag))
            if b.caption:
                parts.append(f'<p class="caption">{inline_html(b.caption)}</p>')
        elif b.kind == "fig":
            n_fig += 1
            f: FigureFile = b.content
            data = base64.b64encode(f.path.read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img alt="{html.escape(f.title)}" src="data:image/png;base64,{data}">'
                f"<figcaption>Figure {n_fig}: {inline_html(b.caption)}</figcaption></figure>"
            )
    return parts, n_fig


OPEN_TARGET = (
    "<script>function openTarget(){var t=location.hash&&document.getElementById("
    "decodeURIComponent(location.hash.slice(1)));if(!t)return;var d=t.closest('details');"
    "if(d&&!d.open){d.open=true;t.scrollIntoView();}}"
    "addEventListener('hashchange',openTarget);addEventListener('load',openTarget);</script>"
)
"""A link into the collapsed provenance section opens it (where the browser does not)."""


def to_html(blocks: list[Block], title: str, collapsed: list[Block] | None = None) -> str:
    """The page: ``blocks``, then ``collapsed`` (the provenance) in a closed ``<details>``."""
    parts, n_fig = _html_parts(blocks)
    if collapsed:
        inner, _ = _html_parts(collapsed, n_fig)
        parts.append(
            '<details id="provenance"><summary>Provenance: registration proofs, attempts, '
            "the tests in full, reproducibility and every run (provenance.md)</summary>"
            + "\n".join(inner)
            + "</details>"
        )
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{body}\n{OPEN_TARGET if collapsed else ''}</body></html>\n"
    )
