"""``<reports>/claims.md``: every claim of every report in a reports folder, in one page, with
each claim's outcome at another scale beside it when a subfolder holds those reports
(``reports/gpu/<study>/``: the gpu profiles).

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
    "with this page. A verdict is confirmatory only where it was decided on the registered "
    "confirmation seeds of its profile and its registration line shows that registration "
    "committed before the first of them; every other verdict is exploratory, and a claim "
    "whose registered runs are unfinished is pending. An outcome is plain only where both of "
    "its tests (the t-test and an exact test that needs no normality, each Holm over the "
    "study's claims) give it; otherwise it names the one test that does (\"reproduces by "
    't-test only"), and the counts below count it so. A claim whose margin or metric changed '
    "after data is counted at the one first committed. Each study's scale is computed from "
    "its runs: no verdict here speaks for another scale."
)


def _tally(claims: pd.DataFrame) -> str:
    counts = claims["outcome"].value_counts()
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.items())


def _flag(value) -> bool:
    return str(value).strip().lower() == "true"


def _frames(folder: Path) -> dict[str, pd.DataFrame]:
    return {
        p.parent.name: pd.read_csv(p, keep_default_na=False)
        for p in sorted(folder.glob(f"*/{CLAIMS_CSV}"))
        if not p.parent.name.startswith(".")
    }


def said(row: dict) -> str:
    """A claim's text and what its paper reports (its ``paper`` column: numbers, setting,
    source), or that the study gives the paper no number."""
    paper = row.get("paper") or "no paper number in the study"
    return f"{row['claim']} ({paper})".replace("|", "/")


UNDECIDED = ("inconclusive", "pending", "not run")


def agreement(here: str, there: str, sub: str) -> str:
    """Whether two scales' outcomes of one claim agree: by what they say (``reproduces by
    t-test only`` says what ``reproduces`` says, on weaker evidence); where one scale decided
    it and the other did not, which one did; blank when either has not run or is pending."""
    if any(o == "not run" or o.startswith("pending") for o in (here, there)):
        return ""
    said = [o.split(" by ")[0] for o in (here, there)]
    if here in UNDECIDED and there in UNDECIDED:
        return ""
    if here in UNDECIDED:
        return f"decided in {sub}/ only"
    if there in UNDECIDED:
        return "decided here only"
    return "yes" if said[0] == said[1] else "**no**"


def metric_note(here: dict, there: dict, sub: str) -> str:
    """Words when the two scales test a claim on different metrics (a gpu profile may decide
    on the best validation loss where the cpu one used the final): their outcomes then answer
    different questions, whatever the agree column says; "" when the metrics are the same or
    one scale has no row."""
    a, b = here.get("metric"), there.get("metric")
    if not a or not b or a == b:
        return ""
    return f"the scales test different metrics: {a} here, {b} in {sub}/"


def scales_table(
    frames: dict[str, pd.DataFrame], other: dict[str, pd.DataFrame], sub: str
) -> list[str]:
    """Per claim, its outcome here and in the reports of folder ``sub`` (e.g. ``gpu/``: the
    same studies at another scale), flagged where both decided it and they disagree, and
    where the two scales test it on different metrics (:func:`metric_note`)."""
    lines = [
        f"| study | claim | what it says, and the paper's number | here | in {sub}/ | agree |",
        "|" + " --- |" * 6,
    ]
    for name in sorted(set(frames) | set(other)):
        here = {r["id"]: r for r in frames.get(name, pd.DataFrame()).to_dict("records")}
        there = {r["id"]: r for r in other.get(name, pd.DataFrame()).to_dict("records")}
        for cid in list(dict.fromkeys([*here, *there])):
            a = here.get(cid, {}).get("outcome", "not run")
            b = there.get(cid, {}).get("outcome", "not run")
            note = metric_note(here.get(cid, {}), there.get(cid, {}), sub)
            agree = "; ".join(x for x in (agreement(a, b, sub), note) if x)
            link = f"[{name}]({name}/report.md)" if name in frames else name
            lines.append(
                f"| {link} | {cid} | {said(here.get(cid) or there[cid])} | {a} | {b} | {agree} |"
            )
    return lines


def index_markdown(
    frames: dict[str, pd.DataFrame], others: dict[str, dict[str, pd.DataFrame]] | None = None
) -> str:
    """The page for ``{study: claims frame}``: a summary table, each other scale's outcomes
    side by side (``others``: ``{subfolder: frames}``), then each study's claims."""
    rows = []
    for name, c in frames.items():
        confirmed = sum(_flag(v) for v in c["confirmatory"])
        rows.append(
            f"| [{name}]({name}/report.md) | {len(c)} | {_tally(c)} | {confirmed} of {len(c)} "
            f"| {c['scale'].iloc[0] if len(c) else ''} |"
        )
    lines = ["# Claims", "", INTRO, ""]
    lines += ["| study | claims | outcomes | confirmatory | scale |", "|" + " --- |" * 5, *rows]
    for sub, other in (others or {}).items():
        lines += ["", f"## Against the reports in [{sub}/]({sub}/{INDEX})", ""]
        lines += scales_table(frames, other, sub)
    for name, c in frames.items():
        lines += ["", f"## [{name}]({name}/report.md)", ""]
        for r in c.to_dict("records"):
            kind = "confirmatory" if _flag(r["confirmatory"]) else "exploratory"
            need = f" Seeds needed: {r['seeds needed']}." if r["seeds needed"] else ""
            paper = r.get("against the paper") or ""
            paper = f" Against the paper: {paper}." if paper else ""
            lines.append(
                f"- **{r['id']}** ({kind}): {r['claim']} → **{r['outcome']}**: {r['numbers']}."
                f"{paper} *{r['registration']}; {r['decided on']}.*{need}"
            )
    return "\n".join(lines) + "\n"


def _write(folder: Path) -> Path | None:
    frames = _frames(folder)
    if not frames:
        return None
    subs = sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in frames)
    others = {p.name: f for p in subs if not p.name.startswith(".") and (f := _frames(p))}
    fd, tmp = tempfile.mkstemp(prefix=f".{INDEX}.", dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write(index_markdown(frames, others))
    os.chmod(tmp, 0o644)
    os.replace(tmp, folder / INDEX)
    return folder / INDEX


def write_index(out: Path) -> Path | None:
    """Write ``out/claims.md`` from every ``out/*/claims.csv`` (atomically; None when there is
    none), with a side-by-side table for each subfolder of reports (``out/gpu/*/claims.csv``).
    A parent folder's index that lists this one side by side is rewritten too."""
    out = Path(out)
    path = _write(out)
    if (out.parent / INDEX).is_file():
        _write(out.parent)
    return path
