"""Bench section 9: stacked runs (``train.stack``, issue 24) against one run per process.

One shipped cpu profile (``studies/activation.yaml``, ``cpu``: 4L/128d, context 64, batch 16),
its first variant's runs cut to a few hundred steps: the same seeds trained by ``run_study``
into fresh stores, side by side in this process,

* ``--workers 2`` with ``train.stack off`` (today's best on 2 cores: one run per process), and
* ``train.stack=N`` (one process trains the N seeds as one stacked model, all cores),

reporting runs/hour of each, their ratio, each member's final loss against its solo run (the
largest relative difference), and what ``train.stack: auto`` chooses on this machine.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ablate.bench.markdown import bold, columns, num, x
from ablate.config import flatten

STUDY = Path(__file__).resolve().parents[2] / "studies" / "activation.yaml"
PROFILE = "cpu"
HEADING = "## 9. Stacked runs"


def _study_file(folder: Path, base: dict[str, Any], seeds: list[int]) -> Path:
    import yaml

    study = {"name": "bench_stacked", "base": base, "seeds": seeds}
    path = folder / "bench_stacked.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def _base(steps: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The profile's first run as a flat base (seed and threads left to the runner)."""
    from ablate.study import load_study

    run = load_study(STUDY, PROFILE).runs[0]
    base = flatten(run.config.to_dict())
    for key in ("train.seed", "train.threads", "train.stack"):
        base.pop(key, None)
    base.update(steps, **{"tracking.wandb": False, "train.progress": False})
    return base, run.variant


def measure(members: int, steps: dict[str, Any], log=print) -> dict[str, Any]:
    """Runs/hour of ``members`` seeds: 2 workers solo vs one stacked group; member vs solo."""
    from ablate.config import build_config
    from ablate.execution.groups import limit_here
    from ablate.execution.runner import run_study

    base, variant = _base(steps)
    settings = {"solo, --workers 2": (2, "off"), f"train.stack={members}": (1, str(members))}
    rows, finals = [], {}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-stack-") as tmp:
        path = _study_file(Path(tmp), base, list(range(members)))
        for i, (name, (workers, stack)) in enumerate(settings.items()):
            t = time.perf_counter()
            got = run_study(
                path,
                store=Path(tmp) / f"store-{i}",
                workers=workers,
                overrides=[f"train.stack={stack}"],
                progress=False,
            )
            wall = time.perf_counter() - t
            finals[name] = {r["run_id"]: r.get("final_val_loss") for r in got}
            done = sum(r.get("status") == "completed" for r in got)
            speeds = [r["tokens_per_s"] for r in got if r.get("tokens_per_s")]
            # runs training at once x one run's tokens/s (a member's is its own tokens over
            # the group's time): the rate long runs approach, without process start-up
            steady = min(len(got), workers if stack == "off" else members)
            rows.append({"setting": name, "workers": workers, "wall_s": wall, "completed": done})
            rows[-1]["runs_per_hour"] = len(got) * 3600 / wall
            rows[-1]["steady_tokens_per_s"] = steady * statistics.median(speeds) if speeds else None
            log(f"  {name}: {len(got)} runs in {wall:.1f} s")
    solo, stacked = finals.values()
    diffs = [abs(stacked[k] - v) / abs(v) for k, v in solo.items() if v and stacked.get(k)]
    for row in rows:
        row["ratio"] = row["runs_per_hour"] / rows[0]["runs_per_hour"]
        first, this = rows[0]["steady_tokens_per_s"], row["steady_tokens_per_s"]
        row["steady_ratio"] = this / first if first and this else None
    auto = limit_here(build_config({**base, "train.stack": "auto"}))
    cfg = build_config(base)
    return {
        "study": f"studies/{STUDY.name}",
        "profile": PROFILE,
        "variant": variant,
        "config": f"{cfg.model.n_layers}L/{cfg.model.d_model}d, ctx {cfg.data.seq_len}, "
        f"batch {cfg.data.batch_size}",
        "steps": cfg.train.max_steps,
        "members": members,
        "rows": rows,
        "max_rel_diff": max(diffs) if diffs else None,
        "compared": len(diffs),
        "auto_members": auto,
    }


_COLS = [
    ("setting", lambda r: f"`{r['setting']}`"),
    ("processes", lambda r: r["workers"]),
    ("wall", lambda r: f"{r['wall_s']:.1f} s"),
    ("completed", lambda r: r["completed"]),
    ("runs/hour", lambda r: f"{r['runs_per_hour']:.0f}"),
    ("÷ solo", lambda r: bold(r["ratio"])),
    ("steady-state tokens/s", lambda r: num(r.get("steady_tokens_per_s"))),
    ("÷ solo", lambda r: bold(r.get("steady_ratio"))),
]


def render(s: dict[str, Any]) -> str:
    ratio = s["rows"][-1]["ratio"]
    steady = s["rows"][-1].get("steady_ratio")

    def verdict(r: float | None) -> str:
        if r is None:
            return "n/a"
        return "faster" if r > 1.05 else "slower" if r < 0.95 else "as fast (within 5%)"

    auto = s["auto_members"]
    auto_txt = "off (1 member: one run per process)" if auto == 1 else f"groups of {auto} members"
    diff = s["max_rel_diff"]
    return "\n".join(
        [
            f"{s['members']} seeds of `{s['study']}` ({s['profile']} profile, variant "
            f"`{s['variant']}`: {s['config']}), cut to {s['steps']} steps, trained by "
            "`run_study` into fresh stores, side by side: one run per process with 2 workers "
            f"(today's best here) against one process training them as one stacked model.",
            "",
            columns(_COLS, s["rows"]),
            "",
            f"Stacked is **{verdict(ratio)}** in wall time (x{x(ratio, 2)} runs/hour: this "
            "includes starting the 2 worker processes, which short runs weigh heavily) and "
            f"**{verdict(steady)}** in the steady state long runs approach (x{x(steady, 2)} "
            "tokens/s: runs at once x one run's training tokens/s). Each member's final "
            f"val loss against its solo run: largest relative difference {x(diff, 9)} over "
            f"{s['compared']} runs (float rounding, which grows with the steps: the tests hold 20 "
            "steps of a 1-layer model to 1e-5).",
            f"`train.stack: auto` on this machine: {auto_txt}. On CPUs `auto` is off: CPU SDPA "
            "has no vmap batching rule and these models are already compute-bound on 2 cores.",
        ]
    )
