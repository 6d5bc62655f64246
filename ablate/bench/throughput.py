"""Study throughput: runs per hour of ``ablate.execution.runner.run_study`` with 1 worker against N.

A small study (``n_runs`` seeds of one short run) is trained into a fresh store once per worker
count; the runner gives each of N workers ``cores // N`` torch threads. Each measurement is the
wall time of the whole ``run_study`` call (spawning workers, every run's start-up, training,
final evaluation, W&B offline), so it is what a user waits for. Short runs make the fixed costs
(spawning a worker, importing torch) weigh more than in a real study, so the steady-state rate
is reported too: N x the median training tokens/s of one run (what long runs approach). The
runner is imported lazily: without it the section reports ``n/a``.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ablate.bench.machine import usable_cores
from ablate.config import RunConfig, flatten


def study_throughput(
    cfg: RunConfig,
    *,
    n_runs: int,
    workers: tuple[int, ...] = (1, 2),
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    try:
        from ablate.execution.runner import run_study
    except ImportError as err:
        return {"available": False, "reason": f"runner not available ({err})"}
    base = flatten(cfg.to_dict())
    base.pop("train.seed")
    base.pop("train.threads")  # the runner splits the cores between its workers
    study = {"name": "bench_throughput", "base": base, "seeds": list(range(n_runs))}
    out: dict[str, Any] = {"available": True, "runs": n_runs, "steps": cfg.train.max_steps}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-study-") as tmp:
        path = Path(tmp) / "bench_throughput.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        results = {}
        for n in workers:
            t = time.perf_counter()
            summaries = run_study(
                path,
                profile=None,
                overrides=[],
                store=Path(tmp) / f"store-{n}",
                workers=n,
                progress=False,
            )
            wall = time.perf_counter() - t
            ok = sum(1 for s in summaries if s.get("status") == "completed")
            speeds = [s["tokens_per_s"] for s in summaries if s.get("tokens_per_s")]
            per_run = statistics.median(speeds) if speeds else math.nan
            results[str(n)] = {  # str keys: the same after a JSON round trip
                "wall_s": wall,
                "completed": ok,
                "runs_per_hour": len(summaries) * 3600 / wall,
                "threads": max(1, usable_cores() // n),
                "run_tokens_per_s": per_run,
                "steady_tokens_per_s": n * per_run,
            }
            log(
                f"  workers={n}: {len(summaries)} runs in {wall:.1f} s "
                f"({results[str(n)]['runs_per_hour']:.0f} runs/h, {ok} completed)"
            )
    out["workers"] = results
    first = results[str(workers[0])]
    out["ratio"] = {n: r["runs_per_hour"] / first["runs_per_hour"] for n, r in results.items()}
    out["steady_ratio"] = {
        n: r["steady_tokens_per_s"] / first["steady_tokens_per_s"] for n, r in results.items()
    }
    out["best_workers"] = max(results, key=lambda n: results[n]["runs_per_hour"])
    out["best_workers_long_runs"] = max(results, key=lambda n: results[n]["steady_tokens_per_s"])
    return out
