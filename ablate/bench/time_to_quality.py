"""Time to quality on one GPU: ablate's reference runs against nanoGPT's own runs beside them.

``python -m ablate.bench.time_to_quality --store DIR`` reads a store a GPU window brought back
(``reports/gpu/stores/stores.tgz``, unpacked), the nanoGPT runs of the same window
(``reports/gpu/nanogpt_own_next.json``, written by ``nanogpt_own --gpu``) and writes
``reports/gpu/time_to_quality.md`` and its JSON:

* the target: the published value the registered claim ``equals-nanogpt-full-split`` tests
  against (:func:`registered_target`: the claim as the study resolves it, whose fingerprint
  must be the registration's), not any one window's nanoGPT run;
* each side on two clocks, to its first evaluation at or below the target: **from launch**
  (its process's start: interpreter, imports, planning, data, model, ``torch.compile`` and the
  evaluations before it included) and **the training loop** (from the end of its first
  training step: compile and start-up left out, the evaluations between included);
* nanoGPT's clock: the stamps ``nanogpt_own.run_stamped`` puts on its printed lines, from the
  launch of its ``train.py``; its first step's end is its first ``iter`` line
  (``first_step_s``, or from the window's stamped log for a run recorded before that was kept);
* ablate's clock: the attempt's start plus its ``perf/wall_s`` at the evaluation, against the
  launch of its ``ablate run`` (the attempt's ``launched``, or for a store from before that was
  recorded, the window log's launch line: :func:`logged_launch`) and against the end of its
  first step (``progress.json``'s ``first_step``);
* the ratio on each clock: the median of the ablate runs' times over the median of nanoGPT's
  (the runs that ran beside them: their times overlap), against ``GOAL`` on the launch clock; a
  run that never reached the target counts as an infinite time (no median when half or more
  never did). With one nanoGPT run its spread is unmeasured, and the report says so first.

Both sides run in the same command on the same GPU, so they share it alike: the figure
compares the two codes under the same contention, not either one alone on an idle GPU. Every
number is read from the store, the nanoGPT file and the window log.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ablate.bench.nanogpt_own import parse_log
from ablate.bench.time_to_quality_report import render
from ablate.store.rundir import (
    PROGRESS_FILE,
    RunDir,
    RunStore,
    atomic_write_json,
    atomic_write_text,
    read_progress,
)

GOAL = 0.9  # ablate's time from launch to the target over nanoGPT's, at most
STUDY = "reference_nanogpt_cpu"
STUDY_FILE = Path("studies/reference_nanogpt_cpu.yaml")
PROFILE = "gpu"
CLAIM = "equals-nanogpt-full-split"
NANOGPT = Path("reports/gpu/nanogpt_own_next.json")
NANOGPT_LOG = Path("reports/gpu/nanogpt.log")
OUT = Path("reports/gpu/time_to_quality.md")

# scripts/gpu/window.sh's line before it launches `ablate run` (older windows: --confirm after
# the file, no epoch); its stamp is `date -u`, whole seconds
LAUNCH_LINE = re.compile(
    r"^\[window (\d\d):(\d\d):(\d\d) \+\d+s\] ablate run (?:confirm )?(\S+\.yaml)\b(.*)$", re.M
)
LAUNCH_EPOCH = re.compile(r"launched at (\d+(?:\.\d+)?)\)")


def registered_target(study_file: Path, profile: str = PROFILE, claim_id: str = CLAIM) -> dict:
    """The one published value ``claim_id`` tests against at ``profile``, as registered: the
    study's claim now, whose fingerprint (which covers its published values) must be the one
    its registration recorded. ``ValueError`` naming the file otherwise."""
    from ablate.claims.registration import mismatch, read_registration, registration_path
    from ablate.study import load_study

    study = load_study(study_file, profile, check_device=False)
    path = registration_path(study_file, profile)
    record = read_registration(path)
    if record is None:
        raise ValueError(f"{path}: no registration, so no registered target")
    why = mismatch(record, study.name, study.profile, study.claims, study.equivalence_margin)
    if why:
        raise ValueError(f"{path}: {why}: the study's value now is not the registered one")
    claim = next((c for c in study.claims if c.id == claim_id), None)
    if claim is None or len(claim.external) != 1:
        raise ValueError(f"{study_file}: claim {claim_id} tests against no one published value")
    return {"value": float(claim.external[0]), "claim": claim_id, "registration": str(path)}


def logged_launch(log: str, file_name: str, started: float) -> float | None:
    """When the window of ``log`` launched the ``ablate run`` of ``file_name`` whose attempt
    started at ``started`` (epoch): the last launch line before it. Its epoch where the line
    carries one; else the start of its whole second (the line's UTC time on ``started``'s
    date, a day earlier if that is later), so that the time from launch is never shorter
    than it was and at most a second longer."""
    best = None
    for m in LAUNCH_LINE.finditer(log):
        if Path(m.group(4)).name != file_name:
            continue
        epoch = LAUNCH_EPOCH.search(m.group(5))
        if epoch:
            at = float(epoch.group(1))
        else:
            day = datetime.fromtimestamp(started, UTC).replace(
                hour=int(m.group(1)), minute=int(m.group(2)), second=int(m.group(3)), microsecond=0
            )
            at = (day - timedelta(days=1) if day.timestamp() > started else day).timestamp()
        if at <= started and (best is None or at > best):
            best = at
    return best


def _curve(run: RunDir) -> tuple[dict[int, float], dict[int, float]]:
    vals, clock = {}, {}
    for step, name, value in run.read_metrics():
        if name == "val/loss":
            vals[step] = value
        elif name == "perf/wall_s":
            clock[step] = value
    return vals, clock


def ablate_run(run: RunDir, target: float, window_log: str | None) -> dict[str, Any]:
    """One ablate run: its first evaluation at or below ``target`` and its time there from its
    launch and from the end of its first step (None when never reached, or not measurable:
    ``clock_note`` says why)."""
    summary = run.read_summary() or {}
    vals, clock = _curve(run)
    hit = next((s for s in sorted(vals) if vals[s] <= target and s in clock), None)
    attempts = [a for a in summary.get("attempts") or [] if isinstance(a, dict)]
    env = summary.get("environment") or {}
    out: dict[str, Any] = {
        "run_id": run.run_id,
        "seed": summary.get("seed"),
        "status": summary.get("status"),
        "best_val_loss": min(vals.values()) if vals else None,
        "step": hit,
        "wall_s": clock.get(hit),
        "clocked": bool(clock),
        "workers": env.get("workers"),
        "device": env.get("device"),
        "started": attempts[-1].get("started") if attempts else None,
        "end": None,
        "launched": None,
        "launch_from": None,
        "from_launch_s": None,
        "loop_s": None,
        "clock_note": "",
    }
    if len(attempts) != 1:  # a resumed run's clock spans commands: no one launch
        out["clock_note"] = f"{len(attempts)} attempts: no one launch to count from"
        return out
    started = float(attempts[0]["started"])
    out["end"] = started + float(summary.get("wall_time_s") or 0.0)
    launched, out["launch_from"] = attempts[0].get("launched"), "recorded"
    if launched is None and window_log is not None:
        file_name = Path(run.read_run()["meta"].get("study_file") or f"{run.study}.yaml").name
        launched, out["launch_from"] = logged_launch(window_log, file_name, started), "window log"
    if launched is None:
        out["launch_from"], out["clock_note"] = None, "launch not recorded"
    out["launched"] = launched
    progress = read_progress(run.path / PROGRESS_FILE) or {}
    first = progress.get("first_step") if progress.get("start_step") == 0 else None
    if hit is None:
        return out
    at = started + clock[hit]
    out["from_launch_s"] = at - launched if launched is not None else None
    out["loop_s"] = at - float(first) if first is not None else None
    return out


def nanogpt_runs(path: Path, log: Path | None = None) -> list[dict[str, Any]]:
    """The runs of a ``nanogpt_own`` file whose printed evaluations carry seconds, each with
    the end of its first training step (``first_step_s``: the run's, else ``log``'s when that
    stamped log printed the same curve) and its span in epoch seconds where known."""
    clocked = [r for r in json.loads(path.read_text())["runs"] if "seconds" in r.get("printed", {})]
    if not clocked:
        raise ValueError(f"{path}: no nanoGPT run with a clock (nanogpt_own --gpu writes one)")
    logged = parse_log(log.read_text()) if log is not None and log.is_file() else {}
    out = []
    for r in clocked:
        first, first_from = r.get("first_step_s"), "recorded"
        if first is None and logged.get("printed") == r["printed"]:
            first, first_from = logged.get("first_step_s"), f"{log}"
        out.append(r | {"first_step_s": first, "first_step_from": first_from, **_span(r)})
    return out


def _span(run: dict[str, Any]) -> dict[str, Any]:
    """(start, end) of a nanoGPT run in epoch seconds: its ``launched`` and seconds, or for a
    run recorded before launches were, back from its ``made_at`` (written after it ended, its
    full-split scoring included: the span reaches a little past the run)."""
    seconds = run.get("seconds")
    if run.get("launched") is not None and seconds is not None:
        return {"start": run["launched"], "end": run["launched"] + seconds}
    made = run.get("made_at")
    if not made or seconds is None:
        return {"start": None, "end": None}
    end = datetime.strptime(made, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=UTC).timestamp()
    return {"start": end - seconds, "end": end}


def nanogpt_time(run: dict[str, Any], target: float) -> dict[str, Any]:
    """A nanoGPT run at ``target``: its first printed evaluation at or below it, the seconds
    from its launch there and from the end of its first training step."""
    printed = run["printed"]
    at = next((i for i, v in enumerate(printed["val"]) if v <= target), None)
    seconds = printed["seconds"][at] if at is not None else None
    first = run.get("first_step_s")
    return {
        "seed": run["seed"],
        "device": run.get("device"),
        "best_val_loss": run["best_val_loss"],
        "best_iter": run["best_iter"],
        "iter": printed["iter"][at] if at is not None else None,
        "from_launch_s": seconds,
        "loop_s": seconds - first if seconds is not None and first is not None else None,
        "first_step_s": first,
        "first_step_from": run.get("first_step_from"),
    }


def median(times: list[float | None]) -> float | None:
    """The median with a never-reached time (None) as infinite; None when that is infinite
    or there are no times."""
    if not times:
        return None
    m = statistics.median(math.inf if t is None else t for t in times)
    return None if math.isinf(m) else m


def beside(runs: list[dict[str, Any]], nanogpt: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nanoGPT runs whose span overlaps the ablate runs' (the same window, the same
    contention)."""
    spans = [(r["started"], r["end"]) for r in runs if r["end"] is not None]
    if not spans:
        return []
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    return [n for n in nanogpt if n["start"] is not None and n["start"] < hi and n["end"] > lo]


def compare(runs: list[dict], nanogpt: list[dict], target: float) -> dict[str, Any]:
    """Both sides at ``target``: the medians on each clock and their ratios (with nanoGPT's
    range over its runs where it has more than one)."""
    n = [nanogpt_time(r, target) for r in nanogpt]
    out: dict[str, Any] = {"target": target, "nanogpt": n}
    for clock in ("from_launch_s", "loop_s"):
        a = median([r[clock] for r in runs])
        b = median([x[clock] for x in n])
        reached = [x[clock] for x in n if x[clock] is not None]
        out[clock] = {
            "ablate": a,
            "nanogpt": b,
            "nanogpt_range": [min(reached), max(reached)] if len(reached) > 1 else None,
            "ratio": a / b if a is not None and b else None,
        }
    return out


def measure(
    store: Path,
    nanogpt: Path,
    target: dict[str, Any],
    *,
    study: str = STUDY,
    window_log: Path | None = None,
    nanogpt_log: Path | None = None,
) -> dict[str, Any]:
    """Everything the report states: the ablate runs and the nanoGPT runs beside them at the
    registered ``target`` (:func:`registered_target`), and, where no nanoGPT run reached it,
    at the worst of their best losses (what each of them reached: not the target)."""
    log = window_log.read_text() if window_log is not None else None
    value = target["value"]
    runs = [ablate_run(r, value, log) for r in RunStore(store).runs(study)]
    runs = [r for r in runs if r["clocked"]]
    if not runs:
        raise ValueError(f"{store}: no run of {study} logged perf/wall_s")
    everything = nanogpt_runs(nanogpt, nanogpt_log)
    near = beside(runs, everything)
    if not near:
        raise ValueError(f"{nanogpt}: no clocked nanoGPT run ran beside the runs of {study}")
    r = {
        "study": study,
        "store": str(store),
        "nanogpt_file": str(nanogpt),
        "window_log": str(window_log) if window_log else None,
        "target": target,
        "goal": GOAL,
        "runs": runs,
        "nanogpt_other_runs": len(everything) - len(near),
        "best_val_loss_is": json.loads(nanogpt.read_text()).get("best_val_loss_is"),
        "registered": compare(runs, near, value),
        "instead": None,
    }
    if r["registered"]["from_launch_s"]["nanogpt"] is None:
        instead = max(n["best_val_loss"] for n in near)
        again = [ablate_run(x, instead, log) for x in RunStore(store).runs(study)]
        r["instead"] = compare([x for x in again if x["clocked"]], near, instead)
        r["instead"]["runs"] = [x for x in again if x["clocked"]]
    return r


def write(r: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render(r))
    atomic_write_json(out.with_suffix(".json"), r)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, required=True, help="the window's unpacked store")
    p.add_argument("--nanogpt", type=Path, default=NANOGPT, help=f"default {NANOGPT}")
    p.add_argument(
        "--nanogpt-log",
        type=Path,
        default=NANOGPT_LOG,
        help=f"nanoGPT's stamped log, for runs without first_step_s (default {NANOGPT_LOG})",
    )
    p.add_argument(
        "--window-log",
        type=Path,
        help="the log of the window that trained the runs, for runs recorded without a launch",
    )
    p.add_argument("--study", default=STUDY)
    p.add_argument("--study-file", type=Path, default=STUDY_FILE, help=f"default {STUDY_FILE}")
    p.add_argument("--profile", default=PROFILE)
    p.add_argument("--claim", default=CLAIM, help="the registered claim whose value is the target")
    p.add_argument("--source", help="what the store was unpacked from, as the report names it")
    p.add_argument("--out", type=Path, default=OUT, help=f"default {OUT}")
    a = p.parse_args(argv)
    for path in (a.store, a.nanogpt, a.study_file, *([a.window_log] if a.window_log else [])):
        if not path.exists():
            p.error(f"{path}: not found")
    try:
        target = registered_target(a.study_file, a.profile, a.claim)
        r = measure(
            a.store,
            a.nanogpt,
            target,
            study=a.study,
            window_log=a.window_log,
            nanogpt_log=a.nanogpt_log,
        )
    except (ValueError, KeyError) as err:
        p.error(str(err))
    write(r | {"store": a.source or r["store"]}, a.out)
    ratio = r["registered"]["from_launch_s"]["ratio"]
    print(f"wrote {a.out}: ratio from launch {'n/a' if ratio is None else f'{ratio:.2f}'}")


if __name__ == "__main__":
    main()
