"""The one markdown writer of every bench report: number formats, tables, and a document of
sections written with its results as JSON beside it (``bench.md``, ``bench_gpu.md``,
``bench_chaos.md``).

A section whose measurement failed shows its error in place of its body, one never measured
says so, and one whose rendering fails says that (the JSON keeps the numbers either way).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.execution.progress import fmt_duration

# (results key, heading, body from the section's results)
Section = tuple[str, str, Callable[[Any], str]]


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def num(value: Any, fmt: str = "{:,.0f}") -> str:
    """``value`` in ``fmt``; n/a when missing."""
    return "n/a" if missing(value) else fmt.format(value)


def x(ratio: float | None, digits: int = 3) -> str:
    """A ratio: ``1.023``; n/a when missing."""
    return num(ratio, f"{{:.{digits}f}}")


def si(value: float | None, unit: str = "") -> str:
    if missing(value):
        return "n/a"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.2f} {unit}".rstrip()


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.1f}"


def seconds(s: float | None) -> str:
    """A duration as the live progress lines show it (``42s``, ``7m05s``); n/a when missing."""
    return "n/a" if missing(s) else fmt_duration(s)


def document(head: list[str], sections: list[Section], r: dict[str, Any]) -> str:
    """``head`` paragraphs, then each section: its heading, its body from ``r[key]`` (or its
    error, or "not run"), a note on how it was measured when ``r["notes"]`` has one, and its
    time when ``r["section_s"]`` has it."""
    out = list(head)
    errors, notes, took = r.get("errors", {}), r.get("notes", {}), r.get("section_s", {})
    for key, heading, body in sections:
        out.append(heading)
        if key in notes:
            out.append(notes[key])
        if key in errors:
            out.append(f"**FAILED**: `{errors[key]}`")
        elif key in r:
            try:
                out.append(body(r[key]))
            except Exception as err:  # noqa: BLE001 - a rendering bug must not lose the json
                out.append(f"(could not render: {type(err).__name__}: {err}; see the .json)")
        else:
            out.append("not run")
        if key in took:
            out.append(f"_{seconds(took[key])}_")
    return "\n\n".join(out) + "\n"


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return str(obj)  # paths, dtypes


def write(out: Path, text: str, results: dict[str, Any]) -> None:
    """``out`` (markdown) and ``out.with_suffix('.json')`` (the results)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=_jsonable) + "\n")
    out.write_text(text)


def upsert(md: Path, text: str) -> None:
    """Put ``text`` (a section: its heading line, then its body) into ``md``: replace the
    section of that heading if present (up to the next ``## ``), else append it."""
    heading = text.split("\n", 1)[0]
    old = md.read_text() if md.exists() else ""
    start = old.find(heading)
    if start < 0:
        new = old.rstrip("\n") + ("\n\n" if old else "") + text
    else:
        end = old.find("\n## ", start + len(heading))
        rest = old[end + 1 :] if end >= 0 else ""
        new = old[:start] + text + ("\n" + rest if rest else "")
    md.write_text(new)
