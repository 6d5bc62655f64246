"""The report's reproducibility section: where the runs trained, and which variants are chaotic.

Float reductions differ with the thread count and worker layout; a stable run absorbs that in
the 4th decimal, an unstable one amplifies it. The store keeps one result per run, so the
report cannot compare reruns; it flags variants whose seed spread is far above the others'.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ablate.claims.stats import mean_std
from ablate.names import format_value, variant_order
from ablate.results import StudyData

ENV_COLUMNS = ["torch", "lightning", "numpy", "python", "device", "torch_threads", "workers"]
CHAOS_FACTOR = 5.0
"""A variant is flagged when its seed sd exceeds this many times the median variant's sd."""


def environment_table(study: StudyData) -> pd.DataFrame | None:
    """One row per distinct environment (versions, device, threads, workers): its run count."""
    cols = [f"env.{c}" for c in ENV_COLUMNS if f"env.{c}" in study.runs]
    if not cols:
        return None
    runs = study.runs[study.runs[cols].notna().any(axis=1)]
    if runs.empty:
        return None
    g = runs.groupby(cols, dropna=False).size().reset_index(name="runs")
    g.columns = [c.removeprefix("env.") for c in g.columns]
    return g.map(format_value)  # threads and workers are read as floats: 1, not 1.0


def chaotic_variants(
    study: StudyData, metric: str = "final_val_loss", factor: float = CHAOS_FACTOR
) -> list[tuple[str, float, float]]:
    """``(variant, seed sd, median sd)`` for variants whose sd over completed seeds is more
    than ``factor`` × the median variant sd (variants with at least 2 completed seeds)."""
    runs = study.runs[study.runs["status"] == "completed"]
    if metric not in runs:
        return []
    sds = {}
    for v in variant_order(study.runs):
        _, s, n = mean_std(runs.loc[runs["variant"] == v, metric])
        if n >= 2 and math.isfinite(s):
            sds[v] = s
    if len(sds) < 3:
        return []
    med = float(pd.Series(list(sds.values())).median())
    return [(v, s, med) for v, s in sds.items() if s > factor * med and s > 0]


def reproducibility_text(study: StudyData) -> str:
    chaos = chaotic_variants(study)
    if chaos:
        flagged = "; ".join(f"{v} (seed sd {s:.3g} vs median {m:.3g})" for v, s, m in chaos)
        text = (
            f"**Chaotic variants** (seed spread more than {CHAOS_FACTOR:g}× the median "
            f"variant's): {flagged}. Their runs amplify float-reduction differences (thread "
            "count, worker layout), so a rerun may not reproduce their digits: trust their "
            "mean and spread, not single runs."
        )
    else:
        text = (
            f"No variant's seed spread is more than {CHAOS_FACTOR:g}× the median variant's, "
            "so no variant is flagged as chaotic."
        )
    if environment_table(study) is None:
        text += " These runs record no environment (made before ablate recorded it)."
    return text


REPRODUCE_CSV = ("reproduce", "runs.csv")
"""``reports/<study>/reproduce/runs.csv``: written by ``ablate reproduce`` (archived runs
retrained with newer code), kept by a rebuild."""


def reproduced(folder: Path) -> pd.DataFrame | None:
    """The rows ``ablate reproduce`` wrote for this report's study (None when it never ran)."""
    path = folder.joinpath(*REPRODUCE_CSV)
    if not path.is_file():
        return None
    try:
        rows = pd.read_csv(path, keep_default_na=False)
    except (OSError, ValueError):
        return None
    return rows if len(rows) else None


def reproduced_line(rows: pd.DataFrame, fingerprint: str) -> str:
    """``ablate reproduce`` retrained k runs: how many identical, within tolerance, different,
    and with which code (its fingerprint, against the current one)."""
    counts = rows["verdict"].value_counts()
    order = ["identical", "within tolerance", "different", "not retrainable"]
    tally = ", ".join(f"{int(counts[v])} {v}" for v in order if v in counts)
    prints = sorted(set(rows["today_fingerprint"].astype(str)))
    when = sorted(set(rows["retrained"].astype(str)))
    code = "today's code" if prints == [fingerprint] else "earlier code"
    current = "" if prints == [fingerprint] else f"; the current code is {fingerprint}"
    tol = float(pd.to_numeric(rows["tolerance"], errors="coerce").max())
    different = rows[rows["verdict"] == "different"]
    worst = ""
    if len(different):
        r = different.iloc[0]
        worst = (
            f"; different: {r['variant']} seed {format_value(r['seed'])} (final val loss "
            f"{_loss(r['archived_final_val_loss'], 4)} archived, "
            f"{_loss(r['today_final_val_loss'], 4)} today)"
        )
    return (
        f"`ablate reproduce` retrained {len(rows)} of these runs with {code} (fingerprint "
        f"{', '.join(prints)}, {when[-1]}{current}): {tally} (tolerance {tol:g} nats){worst}."
    )


def reproduced_table(rows: pd.DataFrame, chaotic: list[str]) -> pd.DataFrame:
    """One row per retrained run: archived and today's final loss, the difference, in seed
    standard deviations, and the verdict."""
    out = []
    for _, r in rows.iterrows():
        diff = pd.to_numeric(pd.Series([r["diff_final_val_loss"]]), errors="coerce").iloc[0]
        sd = pd.to_numeric(pd.Series([r["variant_seed_sd"]]), errors="coerce").iloc[0]
        ratio = f"{abs(diff) / sd:.2g}" if math.isfinite(diff) and sd and math.isfinite(sd) else "—"
        out.append(
            {
                "run": r["run_id"],
                "variant": r["variant"] + (" (chaotic)" if r["variant"] in chaotic else ""),
                "seed": format_value(r["seed"]),
                "archived final val loss": _loss(r["archived_final_val_loss"]),
                "today": _loss(r["today_final_val_loss"]),
                "difference": f"{diff:+.2e}" if math.isfinite(diff) else "—",
                "in seed sd": ratio,
                "verdict": r["verdict"],
                "threads": format_value(r["threads"]),
            }
        )
    return pd.DataFrame(out)


def _loss(v, digits: int = 8) -> str:
    x = pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0]
    return f"{x:.{digits}f}" if math.isfinite(x) else "—"
