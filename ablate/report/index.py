"""``<reports>/claims.md``: every claim of every report in a reports folder, in one page.

Read from each ``<study>/claims.csv`` (written by :func:`ablate.report.build.build_report` from
the store), never from a store: the page can list reports whose stores are elsewhere, and it
states no number its reports did not compute. Rebuilt whenever ``ablate report`` builds one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd

INDEX = "claims.md"
CLAIMS_CSV = "claims.csv"

INTRO = (
    "Every claim of every study report in this folder, as its report decided it: read from each "
    "`<study>/claims.csv`, which `ablate report` computes from the study's store and rewrites "
    "with this page. A verdict is confirmatory only where its registration line shows the "
    "registration committed before the first confirmation run that decides it; every other "
    "verdict is exploratory. Each study's scale is computed from its runs: no verdict here "
    "speaks for another scale."
)


def _tally(claims: pd.DataFrame) -> str:
    counts = claims["outcome"].value_counts()
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.items())


def _flag(value) -> bool:
    return str(value).strip().lower() == "true"


def index_markdown(frames: dict[str, pd.DataFrame]) -> str:
    """The page for ``{study: claims frame}``: a summary table, then each study's claims."""
    rows = []
    for name, c in frames.items():
        confirmed = sum(_flag(v) for v in c["confirmatory"])
        rows.append(
            f"| [{name}]({name}/report.md) | {len(c)} | {_tally(c)} | {confirmed} of {len(c)} "
            f"| {c['scale'].iloc[0] if len(c) else ''} |"
        )
    lines = ["# Claims", "", INTRO, ""]
    lines += ["| study | claims | outcomes | confirmatory | scale |", "|" + " --- |" * 5, *rows]
    for name, c in frames.items():
        lines += ["", f"## [{name}]({name}/report.md)", ""]
        for r in c.to_dict("records"):
            kind = "confirmatory" if _flag(r["confirmatory"]) else "exploratory"
            need = f" Seeds needed: {r['seeds needed']}." if r["seeds needed"] else ""
            lines.append(
                f"- **{r['id']}** ({kind}): {r['claim']} → **{r['outcome']}**: {r['numbers']}. "
                f"*{r['registration']}; {r['decided on']}.*{need}"
            )
    return "\n".join(lines) + "\n"


def write_index(out: Path) -> Path | None:
    """Write ``out/claims.md`` from every ``out/*/claims.csv`` (atomically); None when none."""
    out = Path(out)
    frames = {
        p.parent.name: pd.read_csv(p, keep_default_na=False)
        for p in sorted(out.glob(f"*/{CLAIMS_CSV}"))
        if not p.parent.name.startswith(".")
    }
    if not frames:
        return None
    fd, tmp = tempfile.mkstemp(prefix=f".{INDEX}.", dir=out)
    with os.fdopen(fd, "w") as f:
        f.write(index_markdown(frames))
    os.chmod(tmp, 0o644)
    os.replace(tmp, out / INDEX)
    return out / INDEX
