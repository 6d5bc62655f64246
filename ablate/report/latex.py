"""The paper tables as LaTeX (booktabs): text escaped for LaTeX, and a table of cells with
``\\toprule`` / ``\\midrule`` / ``\\bottomrule``, bold cells and claim marks, that pdflatex
compiles with ``\\usepackage{booktabs}`` alone. The output is ASCII: every character the
tables print that LaTeX would need a package for is written as a command."""

from __future__ import annotations

import re

SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}
UNICODE = {
    "±": r"$\pm$",
    "−": "$-$",
    "–": "--",
    "—": "---",
    "≈": r"$\approx$",
    "×": r"$\times$",
    "∝": r"$\propto$",
    "α": r"$\alpha$",
    "†": r"$^{\dagger}$",
    "·": r"$\cdot$",
    "√": r"$\surd$",
    "…": r"\ldots{}",
    "→": r"$\to$",
    "≤": r"$\le$",
    "≥": r"$\ge$",
    "≠": r"$\neq$",
    "‖": r"$\|$",
}


def tex(text: str) -> str:
    """``text`` with LaTeX's special characters escaped and its non-ASCII symbols as commands
    (any other non-ASCII character is dropped: the table stays compilable)."""
    out = []
    for ch in str(text):
        if ch in SPECIAL:
            out.append(SPECIAL[ch])
        elif ch in UNICODE:
            out.append(UNICODE[ch])
        elif ord(ch) < 128:
            out.append(ch)
    return "".join(out)


def marks(text: str) -> str:
    """Claim marks as superscripts: ``1*†, 3*`` -> ``1$^{*\dagger}$, 3$^{*}$``."""
    out = []
    for part in re.split(r"(\d+[*†]+)", str(text)):
        m = re.fullmatch(r"(\d+)([*†]+)", part)
        if m:
            out.append(f"{m[1]}$^{{{m[2].replace('†', chr(92) + 'dagger ')}}}$")
        else:
            out.append(tex(part))
    return "".join(out)


def booktabs(
    header: list[str],
    rows: list[list[str] | None],
    *,
    align: str,
    caption: str,
    label: str,
    bold: set[tuple[int, int]] = frozenset(),
    raw: set[int] = frozenset(),
) -> str:
    """A ``table`` environment: ``header`` and ``rows`` (plain text, escaped here; columns in
    ``raw`` are LaTeX already; a row None is a ``\midrule``), ``bold`` cells as ``(row,
    column)``, ``align`` the tabular's column spec (one letter or ``p{..}`` per column)."""

    def cell(i: int, j: int, v: str) -> str:
        text = v if j in raw else tex(v)
        return f"\\textbf{{{text}}}" if (i, j) in bold else text

    lines = [
        "% written by `ablate report` from the run store: rebuild it, do not edit it",
        "\\begin{table}[t]",
        "\\centering",
        "\\small",
        f"\\begin{{tabular}}{{{align}}}",
        "\\toprule",
        " & ".join(tex(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    lines += [
        "\\midrule" if r is None else " & ".join(cell(i, j, v) for j, v in enumerate(r)) + " \\\\"
        for i, r in enumerate(rows)
    ]
    lines += [
        "\\bottomrule",
        "\\end{tabular}",
        f"\\caption{{{tex(caption)}}}",
        f"\\label{{{label}}}",
        "\\end{table}",
    ]
    return "\n".join(lines) + "\n"
