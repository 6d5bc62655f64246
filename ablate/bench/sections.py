"""Running the sections of a bench: each one timed, under the machine's load, and a failure
recorded in the results (the report shows it) instead of ending the bench."""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from typing import Any

from ablate.bench.machine import load_avg


def console():
    from rich.console import Console

    return Console(highlight=False)


class Sections:
    """Runs sections into ``results``: ``results[key]``, or ``results["errors"][key]``; the
    seconds each took in ``results["section_s"]``, the load average before and after in
    ``results["load"]``. ``after``: called after every section (write the report so far)."""

    def __init__(self, results: dict[str, Any], after: Callable[[], None] | None = None):
        self.results, self.after = results, after
        self.console = console()
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
