"""Bench sections 5 and 9: studies trained by ``run_study`` into fresh stores, side by side.

5. study throughput: seeds of the bench config with ``--workers 1`` against ``--workers 2``
   (the runner gives each worker ``cores // workers`` torch threads);
9. stacked runs (``train.stack``): seeds of a shipped cpu profile
   (``studies/activation.yaml``: 4L/128d, context 64, batch 16) with ``--workers 2``, one run
   per process, against ``train.stack=N``, one process training them as one stacked model;
   each member's final loss against its solo run.

Wall time is what a user waits for (process start-up weighs heavily in short runs); the
steady-state rate, runs training at once x the median training tokens/s of one run, is what
long runs approach.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ablate.bench.loops import STUDIES, profile_flat
from ablate.bench.machine import usable_cores
from ablate.bench.markdown import bold, columns, num, x
from ablate.config import RunConfig, build_config, flatten

STACK_STUDY, STACK_PROFILE = STUDIES / "activation.yaml", "cpu"


def timed_studies(base: dict[str, Any], seeds: list[int], settings: dict, log) -> tuple[list, list]:
    """The study (``base``, ``seeds``) once per setting (name -> (workers, ``train.stack``)),
    each into a fresh store: a row per setting, and each setting's final losses by run id."""
    import yaml

    from ablate.execution.executors.local import LocalOptions
    from ablate.execution.runner import run_study

    rows, finals = [], []
    with tempfile.TemporaryDirectory(prefix="ablate-bench-study-") as tmp:
        path = Path(tmp) / "bench_study.yaml"
        study = {"name": "bench_study", "base": base, "seeds": seeds}
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        for i, (name, (workers, stack)) in enumerate(settings.items()):
            t = time.perf_counter()
            over = [f"train.stack={stack}"]
            got = run_study(
                path,
                store=Path(tmp) / f"s{i}",
                executor=LocalOptions(workers=workers),
                overrides=over,
                progress=False,
            )
            wall = time.perf_counter() - t
            speeds = [r["tokens_per_s"] for r in got if r.get("tokens_per_s")]
            per_run = statistics.median(speeds) if speeds else None
            at_once = min(len(got), workers if stack == "off" else int(stack))
            rows.append(
                {"setting": name, "workers": workers, "threads": max(1, usable_cores() // workers)}
                | {"wall_s": wall, "runs": len(got), "runs_per_hour": len(got) * 3600 / wall}
                | {"completed": sum(r.get("status") == "completed" for r in got)}
                | {
                    "run_tokens_per_s": per_run,
                    "steady_tokens_per_s": per_run and at_once * per_run,
                }
            )
            finals.append({r["run_id"]: r.get("final_val_loss") for r in got})
            log(f"  {name}: {len(got)} runs in {wall:.1f} s")
    for row in rows:
        row["ratio"] = row["runs_per_hour"] / rows[0]["runs_per_hour"]
        first, this = rows[0]["steady_tokens_per_s"], row["steady_tokens_per_s"]
        row["steady_ratio"] = this / first if first and this else None
    return rows, finals


def _base(flat: dict[str, Any], **updates: Any) -> dict[str, Any]:
    """A study base from a run's flat config: seed, threads and stacking left to the runner."""
    drop = ("train.seed", "train.threads", "train.stack")
    return {k: v for k, v in flat.items() if k not in drop} | updates


def study_throughput(cfg: RunConfig, n_runs: int, log=print) -> dict[str, Any]:
    settings = {f"--workers {n}": (n, "off") for n in (1, 2)}
    rows, _ = timed_studies(_base(flatten(cfg.to_dict())), list(range(n_runs)), settings, log)
    m = cfg.model
    config = f"{m.n_layers}L/{m.d_model}d, ctx {cfg.data.seq_len}"
    return {"runs": n_runs, "steps": cfg.train.max_steps, "config": config, "rows": rows}


def stacked(members: int, steps: dict[str, Any], log=print) -> dict[str, Any]:
    """Runs/hour of ``members`` seeds: 2 workers solo vs one stacked group; member vs solo."""
    from ablate.execution.groups import limit_here

    flat, variant = profile_flat(STACK_STUDY, STACK_PROFILE)
    base = _base(flat, **steps, **{"tracking.wandb": False, "train.progress": False})
    settings = {"solo, --workers 2": (2, "off"), f"train.stack={members}": (1, str(members))}
    rows, (solo, stack) = timed_studies(base, list(range(members)), settings, log)
    diffs = [abs(stack[k] - v) / abs(v) for k, v in solo.items() if v and stack.get(k)]
    cfg = build_config(base)
    m, d = cfg.model, cfg.data
    return {
        "study": f"studies/{STACK_STUDY.name}",
        "profile": STACK_PROFILE,
        "variant": variant,
        "config": f"{m.n_layers}L/{m.d_model}d, ctx {d.seq_len}, batch {d.batch_size}",
        "steps": cfg.train.max_steps,
        "members": members,
        "rows": rows,
        "max_rel_diff": max(diffs) if diffs else None,
        "compared": len(diffs),
        "auto_members": limit_here(build_config({**base, "train.stack": "auto"})),
    }


_COLUMNS = [
    ("setting", lambda r: f"`{r['setting']}`"),
    ("processes", lambda r: r["workers"]),
    ("threads each", lambda r: r["threads"]),
    ("wall", lambda r: f"{r['wall_s']:.1f} s"),
    ("completed", lambda r: f"{r['completed']}/{r['runs']}"),
    ("runs/hour", lambda r: f"{r['runs_per_hour']:.0f}"),
    ("÷ first", lambda r: bold(r["ratio"])),
    ("tokens/s per run", lambda r: num(r["run_tokens_per_s"])),
    ("steady-state tokens/s", lambda r: num(r["steady_tokens_per_s"])),
    ("÷ first", lambda r: bold(r["steady_ratio"])),
]


def _verdict(r: float | None) -> str:
    return "n/a" if r is None else "faster" if r > 1.05 else "slower" if r < 0.95 else "as fast"


def render_study(s: dict[str, Any]) -> str:
    if "rows" not in s:  # a bench.json from before sections 5 and 9 shared one table
        old = [(n, w, s["ratio"][n], s["steady_ratio"][n]) for n, w in s["workers"].items()]
        s = s | {
            "rows": [
                w
                | {"setting": f"--workers {n}", "workers": int(n), "runs": s["runs"]}
                | {"ratio": r, "steady_ratio": sr}
                for n, w, r, sr in old
            ]
        }
    last = s["rows"][-1]
    return (
        f"A study of {s['runs']} runs ({s['config']}, {s['steps']} steps each) trained by "
        "`run_study` into a fresh store per setting; wall time covers everything the user waits "
        "for, the steady state is workers x the median training tokens/s of one run.\n\n"
        f"{columns(_COLUMNS, s['rows'])}\n\n`{last['setting']}` is **{_verdict(last['ratio'])}** "
        f"for this short study (x{x(last['ratio'], 2)} runs/hour; within 5% is a tie) and "
        f"**{_verdict(last['steady_ratio'])}** in the steady state long runs approach "
        f"(x{x(last['steady_ratio'], 2)} tokens/s)."
    )


def render_stacked(s: dict[str, Any]) -> str:
    last, auto = s["rows"][-1], s["auto_members"]
    auto_txt = "off (1 member: one run per process)" if auto == 1 else f"groups of {auto} members"
    return "\n".join(
        [
            f"{s['members']} seeds of `{s['study']}` ({s['profile']} profile, variant "
            f"`{s['variant']}`: {s['config']}), cut to {s['steps']} steps, trained by `run_study` "
            "into fresh stores: one run per process with 2 workers against one process "
            "training them as one stacked model.",
            "",
            columns(_COLUMNS, s["rows"]),
            "",
            f"Stacked is **{_verdict(last['ratio'])}** in wall time (x{x(last['ratio'], 2)} "
            f"runs/hour, worker start-up included) and **{_verdict(last['steady_ratio'])}** in "
            f"the steady state (x{x(last['steady_ratio'], 2)} tokens/s). Each member's final val "
            f"loss against its solo run: largest relative difference {x(s['max_rel_diff'], 9)} "
            f"over {s['compared']} runs (float rounding; the tests hold 20 steps of a 1-layer "
            "model to 1e-5).",
            f"`train.stack: auto` on this machine: {auto_txt}. On CPUs `auto` is off: these "
            "models are already compute-bound on 2 cores.",
        ]
    )
