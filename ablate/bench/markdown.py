"""The one writer of every bench report (``bench.md``, ``bench_gpu.md``, ``bench_chaos.md``, each
with its JSON beside it), and the runner of a bench's sections: a failed section shows its
error, one never measured says "not run", and a rendering bug says so (the JSON keeps it all)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.bench.machine import load_avg
from ablate.execution.progress import fmt_duration

# (results key, heading, body from the section's results)
Section = tuple[str, str, Callable[[Any], str]]
# (column header, cell from a row)
Columns = list[tuple[str, Callable[[Any], Any]]]


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def columns(cols: Columns, items: list[Any], extra: list[list[Any]] = ()) -> str:
    """A table with one row per item, each column's cell from its function (``extra``: rows
    written out, appended)."""
    return table([h for h, _ in cols], [[f(i) for _, f in cols] for i in items] + list(extra))


def pairs(rows: list[tuple[str, Any]]) -> str:
    """A two-column table of names and values."""
    return table(["", ""], [list(r) for r in rows])


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def num(value: Any, fmt: str = "{:,.0f}") -> str:
    """``value`` in ``fmt``; n/a when missing."""
    return "n/a" if missing(value) else fmt.format(value)


def x(ratio: float | None, digits: int = 3) -> str:
    """A ratio: ``1.023``; n/a when missing."""
    return num(ratio, f"{{:.{digits}f}}")


def bold(ratio: float | None, digits: int = 3) -> str:
    return f"**{x(ratio, digits)}**"


def si(value: float | None, unit: str = "") -> str:
    if missing(value):
        return "n/a"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.2f} {unit}".rstrip()


def seconds(s: float | None) -> str:
    """A duration as the live progress lines show it (``42s``, ``7m05s``); n/a when missing."""
    return "n/a" if missing(s) else fmt_duration(s)


def document(head: list[str], sections: list[Section], r: dict[str, Any]) -> str:
    """``head``, then each section: heading, ``r["notes"]``'s note, body from ``r[key]`` (or
    its error, or "not run"), and its time."""
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


def write(out: Path, text: str, results: dict[str, Any]) -> None:
    """``out`` (markdown) and ``out.with_suffix('.json')`` (the results)."""

    def jsonable(obj: Any) -> Any:
        return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else str(obj)

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=jsonable) + "\n")
    out.write_text(text)


def upsert(md: Path, text: str) -> None:
    """Put ``text`` (a heading line, then its body) into ``md``, replacing that heading's section
    (up to the next ``## ``) if present."""
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


class Sections:
    """Runs a bench's sections into ``results[key]`` or ``results["errors"][key]`` (the others
    still run), with their seconds (``section_s``) and load average before and after (``load``);
    ``after`` is called after every section (to write the report so far)."""

    def __init__(self, results: dict[str, Any], after: Callable[[], None] | None = None):
        from rich.console import Console

        self.results, self.after = results, after
        self.console = Console(highlight=False)
        self.say = self.console.print
        self.t_start = time.perf_counter()
        os.environ.setdefault("WANDB_SILENT", "true")
        for key in ("errors", "section_s", "load"):
            results.setdefault(key, {})

    def run(self, key: str, title: str, fn: Callable[[], Any]) -> None:
        r = self.results
        self.console.rule(f"[bold]{title}")
        t, load0 = time.perf_counter(), load_avg()
        try:
            r[key] = fn()
            r["errors"].pop(key, None)
        except Exception as err:  # noqa: BLE001 - report it, run the other sections
            self.say(traceback.format_exc())
            r["errors"][key] = f"{type(err).__name__}: {err}"
        r["load"][key] = [load0, load_avg()]
        r["section_s"][key] = time.perf_counter() - t
        r["wall_s"] = time.perf_counter() - self.t_start
        if self.after is not None:
            self.after()
        self.say(f"[dim]{title}: {r['section_s'][key]:.0f} s (total {r['wall_s']:.0f} s)[/]")
