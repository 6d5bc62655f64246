"""Time to quality on one GPU: ablate's reference runs against nanoGPT's own run beside them.

``python -m ablate.bench.time_to_quality --store DIR`` reads a store a GPU window brought back
(``reports/gpu/stores/stores.tgz``, unpacked) and the nanoGPT run of the same window
(``reports/gpu/nanogpt_own_next.json``, written by ``nanogpt_own --gpu``), and writes
``reports/gpu/time_to_quality.md`` and its JSON:

* the target: the best validation loss nanoGPT's run printed (its README's measure);
* nanoGPT's time: seconds from the launch of its process to the evaluation that printed it
  (the stamps ``nanogpt_own.run_stamped`` puts on its lines: imports, data, ``torch.compile``
  and evaluations included);
* each ablate run's time: its ``perf/wall_s`` at its first evaluation at or below the target
  (its attempt's clock from the start of ``train_run``: data, model, evaluations included; the
  worker process's own start-up, a few seconds, is not);
* the ratio: the median of the ablate runs' times over nanoGPT's, against ``GOAL``; a run that
  never reached the target counts as an infinite time (no median when half of them or more).

Both sides are measured in the same command on the same GPU and the window starts them
together, so they share it alike: the figure compares the two codes under the same contention,
not either one alone on an idle GPU; the report says how the ablate runs were trained (their
processes, stacking). Every number is read from the store and the nanoGPT file.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Any

from ablate.bench.markdown import num
from ablate.store.rundir import RunDir, RunStore, atomic_write_json, atomic_write_text

GOAL = 0.9  # ablate's time to nanoGPT's best loss over nanoGPT's own, at most
STUDY = "reference_nanogpt_cpu"
NANOGPT = Path("reports/gpu/nanogpt_own_next.json")
OUT = Path("reports/gpu/time_to_quality.md")


def nanogpt_clocked(path: Path) -> dict[str, Any]:
    """The last run of a ``nanogpt_own`` file whose printed evaluations carry seconds."""
    runs = json.loads(path.read_text())["runs"]
    clocked = [r for r in runs if "seconds" in (r.get("printed") or {})]
    if not clocked:
        raise ValueError(f"{path}: no nanoGPT run with a clock (nanogpt_own --gpu writes one)")
    run = clocked[-1]
    printed = run["printed"]
    at = printed["iter"].index(run["best_iter"])
    return {
        "seed": run["seed"],
        "device": run.get("device"),
        "best_val_loss": run["best_val_loss"],
        "best_iter": run["best_iter"],
        "seconds": printed["seconds"][at],
    }


def run_time(run: RunDir, target: float) -> dict[str, Any]:
    """One ablate run: its first evaluation at or below ``target`` and its clock there."""
    summary = run.read_summary() or {}
    vals, clock = {}, {}
    for step, name, value in run.read_metrics():
        if name == "val/loss":
            vals[step] = value
        elif name == "perf/wall_s":
            clock[step] = value
    hit = next((s for s in sorted(vals) if vals[s] <= target and s in clock), None)
    env = summary.get("environment") or {}
    return {
        "run_id": run.run_id,
        "seed": summary.get("seed"),
        "status": summary.get("status"),
        "best_val_loss": min(vals.values()) if vals else None,
        "step": hit,
        "seconds": clock[hit] if hit is not None else None,
        "clocked": bool(clock),
        "workers": env.get("workers"),
        "device": env.get("device"),
    }


def measure(store: Path, nanogpt: Path, study: str = STUDY) -> dict[str, Any]:
    ref = nanogpt_clocked(nanogpt)
    runs = [run_time(r, ref["best_val_loss"]) for r in RunStore(store).runs(study)]
    runs = [r for r in runs if r["clocked"]]
    if not runs:
        raise ValueError(f"{store}: no run of {study} logged perf/wall_s")
    # a run that never reached the target counts as never (an infinite time): the median is a
    # time when more than half of the runs reached it
    times = [math.inf if r["seconds"] is None else r["seconds"] for r in runs]
    median = statistics.median(times)
    median = None if math.isinf(median) else median
    return {
        "study": study,
        "store": str(store),
        "nanogpt_file": str(nanogpt),
        "target": ref["best_val_loss"],
        "nanogpt": ref,
        "runs": runs,
        "ablate_median_s": median,
        "ratio": median / ref["seconds"] if median is not None else None,
        "goal": GOAL,
    }


def render(r: dict[str, Any]) -> str:
    ref, ratio = r["nanogpt"], r["ratio"]
    verdict = "meets" if ratio is not None and ratio <= GOAL else "misses"
    missed = sum(x["seconds"] is None for x in r["runs"])
    if ratio is None:
        verdict = "no median: half of the runs or more never reached it"
    lines = [
        "# Time to quality on one GPU: ablate against nanoGPT's own code",
        "",
        f"Target: nanoGPT's best printed validation loss, **{ref['best_val_loss']:.4f}** (its "
        f"seed {ref['seed']}, iteration {ref['best_iter']}, on {ref['device']}), reached "
        f"**{ref['seconds']:.1f} s** after its process was launched (imports, data, "
        "`torch.compile`, evaluations included).",
        "",
        f"ablate's median time to it over its {len(r['runs'])} runs: "
        f"**{num(r['ablate_median_s'], '{:.1f} s')}**; ratio ablate / nanoGPT "
        f"**{num(ratio, '{:.2f}')}** (goal ≤ {GOAL}: {verdict}). Runs that never reached it: "
        f"{missed}, counted as never (an infinite time) in the median.",
        "",
        "| run | seed | status | best val loss | first step at or below the target | seconds "
        "| workers | device |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for x in r["runs"]:
        lines.append(
            f"| {x['run_id']} | {x['seed']} | {x['status']} | {num(x['best_val_loss'], '{:.4f}')} "
            f"| {num(x['step'])} | {num(x['seconds'], '{:.1f}')} | {num(x['workers'])} "
            f"| {x['device']} |"
        )
    lines += [
        "",
        "Both sides ran in one command on one GPU, started together by `scripts/gpu/window.sh`, "
        "so they shared the GPU alike: the ratio compares the two codes under the same "
        "contention. An ablate run's seconds are its `perf/wall_s` (its clock from the start of "
        "its training, set-up and evaluations included); nanoGPT's are stamped on its printed "
        "lines from its launch. ablate evaluates on the whole validation split, nanoGPT on 200 "
        "random batches. Built by `python -m ablate.bench.time_to_quality` from "
        f"`{r['store']}` and `{r['nanogpt_file']}`.",
    ]
    return "\n".join(lines) + "\n"


def write(r: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, render(r))
    atomic_write_json(out.with_suffix(".json"), r)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, required=True, help="the window's unpacked store")
    p.add_argument("--nanogpt", type=Path, default=NANOGPT, help=f"default {NANOGPT}")
    p.add_argument("--study", default=STUDY)
    p.add_argument("--source", help="what the store was unpacked from, as the report names it")
    p.add_argument("--out", type=Path, default=OUT, help=f"default {OUT}")
    a = p.parse_args(argv)
    for path in (a.store, a.nanogpt):
        if not path.exists():
            p.error(f"{path}: not found")
    try:
        r = measure(a.store, a.nanogpt, a.study)
    except (ValueError, KeyError) as err:
        p.error(str(err))
    write(r | {"store": a.source or r["store"]}, a.out)
    print(f"wrote {a.out}: ratio {num(r['ratio'], '{:.2f}')} (goal <= {GOAL})")


if __name__ == "__main__":
    main()
