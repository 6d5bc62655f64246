"""A scale ladder's rungs as ``ablate plan`` shows them: per rung, the keys it sets, its
non-embedding parameters, training tokens and training FLOPs per run (the model's own
accounting, :func:`ablate.execution.flops.run_flops`), its runs, and the step rule in words.
"""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.execution.flops import RunFlops, run_flops
from ablate.names import fmt_value
from ablate.study import Study
from ablate.study.ladder import RUNG

COLUMNS = ("rung", "sets", "params (non-emb)", "tokens/run", "train FLOPs/run", "decades", "runs")


def rung_costs(study: Study) -> dict[str, list[RunFlops]]:
    """Rung name -> the cost of each of its planned runs, in ladder order."""
    out: dict[str, list[RunFlops]] = {name: [] for name in study.ladder.names}
    for run in study.runs:
        out[run.axes[RUNG]].append(run_flops(run.config))
    return out


def _span(values: list[float], fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def print_ladder(study: Study, console: Console) -> None:
    """The ladder table under the plan, and its rule (module doc)."""
    ladder = study.ladder
    costs = rung_costs(study)
    sets = {name: layer.values for name, layer in ladder.rungs}
    first = min(c.train_flops for c in costs[ladder.names[0]])
    table = Table(
        title=escape(f"Ladder: {len(ladder.rungs)} rungs ({ladder.where}); {ladder.rule_text()}"),
        title_justify="left",
    )
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("rung", "sets") else "right")
    for name, runs in costs.items():
        flops = [c.train_flops for c in runs]
        shown = ", ".join(f"{k.split('.')[-1]}={fmt_value(v)}" for k, v in sets[name].items())
        table.add_row(
            *[
                escape(name),
                escape(shown),
                _span([c.non_embedding_params for c in runs], "{:,}".format),
                _span([c.train_tokens for c in runs], "{:,}".format),
                _span(flops, "{:.3g}".format),
                f"+{math.log10(min(flops) / first):.2f}",
                str(len(runs)),
            ]
        )
    console.print(table)
    console.print(
        escape(
            "decades: log10 of the rung's training FLOPs over the first rung's, the x of a "
            "trend claim (its gap regressed on log10 FLOPs per seed); FLOPs are the model's "
            "flops_per_token x tokens, evaluation left out"
        ),
        soft_wrap=True,
    )
