"""``ablate bench``: what the framework costs, how fast the model is, how long quality takes.

One process measures, side by side, and writes ``reports/bench.md`` (and ``bench.json``):

1. framework overhead: ``train_run`` against a hand-written PyTorch loop (``loops``);
2. model speed and step memory against x-transformers and ``nn.TransformerEncoder`` (``speed``);
3. time to quality: ablate against nanoGPT's training procedure, per step and to the same
   loss (``versus``);
4. efficiency: achieved FLOP/s as a fraction of the measured matmul peak (``machine``);
5. study throughput: runs per hour of ``run_study`` with 1 worker against 2;
7. peak memory of ``ablate train`` against corpus size;
9. stacked runs (``train.stack``) against one run per process (``stacking``).

Section 6 is ``ablate bench --chaos`` (``chaos``), carried over from ``bench_chaos.json``.
``quick=True`` runs every section at toy sizes (a CI smoke test); its numbers are not
measurements of anything. ``only=NAME`` measures one section and puts it into the existing
``bench.json``/``bench.md``. A failing section is reported in ``bench.md`` and makes
``run_bench`` raise after the report is written.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ablate.bench import cpu_report
from ablate.bench.loops import (
    GPU_OVERRIDES,
    NANOGPT_CPU,
    bench_config,
    compare_loops,
    overhead_config,
)
from ablate.bench.machine import (
    ablate_command,
    has_gpu,
    load_avg,
    machine_info,
    matmul_flops,
    rss_anon,
    torch_threads,
    usable_cores,
)
from ablate.bench.markdown import Sections
from ablate.bench.speed import Size, build_ours, measure_speed
from ablate.config import RunConfig, build_config, flatten

# toy model for --quick (and the tests)
TINY: dict[str, Any] = {
    "model.n_layers": 1,
    "model.d_model": 32,
    "model.n_heads": 2,
    "model.max_seq_len": 32,
    "data.seq_len": 32,
    "data.batch_size": 8,
}


@dataclass(frozen=True)
class Plan:
    """Sizes and repetitions of one bench run (the defaults: a full run on a CPU)."""

    quick: bool = False
    gpu: bool = False
    base: dict[str, Any] = field(default_factory=dict)
    matmul_n: int = 2048
    overhead: dict[str, Any] = field(default_factory=dict)
    # a 200-step window (steps 20..219): 20 log steps, 4 grad-norm steps, 2 checkpoints
    overhead_steps: int = 221
    overhead_warmup: int = 20
    overhead_reps: int = 6
    speed: tuple[tuple[Size, int], ...] = (
        (Size("4L-128d", 4, 128, 4, 64, 12), 5),
        (Size("6L-384d", 6, 384, 6, 256, 64), 2),
    )
    speed_block_s: float = 1.0
    # section 3: nanoGPT's CPU config at the reference study's cadence
    quality: dict[str, Any] = field(default_factory=dict)
    race_rounds: int = 2
    snapshot_every: int = 100
    study: dict[str, Any] = field(
        default_factory=lambda: {
            "train.max_steps": 150,
            "train.eval_interval": 50,
            "train.eval_batches": 5,
            "train.final_eval_batches": 10,
            "train.progress": False,
        }
    )
    study_runs: int = 4
    # section 7: corpus sizes (MB) and training steps of each ``ablate train``
    data_mb: tuple[float, float] = (5.0, 300.0)
    data_steps: int = 20
    # section 8 (only with --section nanogpt: ~2 min a seed): seeds of the reference study, and
    # overrides (the quick bench shortens the runs)
    nanogpt_seeds: int = 8
    nanogpt_set: dict[str, Any] = field(default_factory=dict)
    # section 9: seeds of a shipped cpu profile stacked vs one per process, cut to these steps
    stack_members: int = 3
    stack_set: dict[str, Any] = field(
        default_factory=lambda: {
            "train.max_steps": 200,
            "train.eval_interval": 100,
            "train.eval_batches": 5,
            "train.final_eval_batches": 10,
        }
    )

    @classmethod
    def make(cls, quick: bool, gpu: bool, threads: int) -> Plan:
        base = {**NANOGPT_CPU, "train.threads": threads, **(GPU_OVERRIDES if gpu else {})}
        if not quick:
            large = cls.speed[1][0]
            more = {"matmul_n": 4096, "overhead_steps": 521, "speed": (cls.speed[0], (large, 5))}
            return cls(gpu=gpu, base=base, **(more if gpu else {}))
        tiny = (Size("1L-32d", 1, 32, 2, 16, 4), Size("2L-64d", 2, 64, 4, 32, 8))
        return cls(
            quick=True,
            gpu=gpu,
            base=base,
            matmul_n=256,
            overhead=dict(TINY),
            overhead_steps=26,
            overhead_warmup=5,
            overhead_reps=1,
            speed=tuple((size, 1) for size in tiny),
            speed_block_s=0.05,
            quality={
                **TINY,
                "train.max_steps": 60,
                "train.eval_interval": 30,
                "train.eval_batches": 3,
                "train.final_eval_batches": 10,
                "train.progress": False,
            },
            snapshot_every=20,
            study={
                **TINY,
                "train.max_steps": 10,
                "train.eval_interval": 10,
                "train.eval_batches": 1,
                "train.final_eval_batches": 1,
                "train.progress": False,
                "tracking.wandb": False,
            },
            study_runs=2,
            data_mb=(0.1, 0.5),
            data_steps=2,
            nanogpt_seeds=1,
            nanogpt_set={"train.max_steps": 5, "train.final_eval_batches": 2},
            stack_members=2,
            stack_set={
                **TINY,
                "train.max_steps": 6,
                "train.eval_interval": 6,
                "train.eval_batches": 1,
                "train.final_eval_batches": 1,
            },
        )


def run_bench(
    quick: bool = False,
    out: Path = Path("reports/bench.md"),
    *,
    threads: int | None = None,
    only: str | None = None,
) -> dict[str, Any]:
    """Run every section (``only``: that one, into the existing report), write ``out``
    (markdown) and ``out.with_suffix('.json')``.

    ``threads``: torch threads for every section (default ``$ABLATE_BENCH_THREADS``, else the
    usable cores; ``quick``: 1, so a smoke test on a busy CI machine does not stall on a
    contended two-thread team; toy sizes gain nothing from a second thread anyway).
    """
    from ablate.data import resolve_dataset

    check_section(only)
    resolve_dataset(NANOGPT_CPU["data.dataset"])  # missing data: fail now, not mid-bench
    threads = threads or int(os.environ.get("ABLATE_BENCH_THREADS") or 0) or None
    threads = threads or (1 if quick else usable_cores())
    gpu = has_gpu()
    plan = Plan.make(quick, gpu, threads)
    started = datetime.now().isoformat(timespec="seconds")
    saved = Path(out).with_suffix(".json")
    results = json.loads(saved.read_text()) if only and saved.is_file() else {}
    results.setdefault("quick", quick)
    results.setdefault("started", started)
    results["gpu_paths"] = {"present": gpu, "overrides": GPU_OVERRIDES}
    run = Sections(results)
    say = run.say
    with torch_threads(threads):
        results.setdefault("machine", machine_info(threads))
        results.setdefault("matmul", matmul_flops(plan.matmul_n))
        say(f"{results['machine']['cpu']}, {threads} cores, GPU: {results['machine']['gpu']}")
        say(f"dense matmul: best {results['matmul']['best'] / 1e9:,.1f} GFLOP/s")
        for key, (title, measure) in SECTIONS.items():
            if only == key or (only is None and key not in EXPLICIT):
                run.run(key, title, lambda measure=measure: measure(plan, say, results))
        if only is None:
            # the matmul peak once more at the end: the best of both is the denominator
            again = matmul_flops(plan.matmul_n)
            results["matmul"]["best"] = max(results["matmul"]["best"], again["best"])
    if only is not None:
        load = results["load"][only]
        results.setdefault("notes", {})[only] = (
            f"Section re-measured alone by `ablate bench --section {only}` on {started}; "
            f"1-minute load average {load[0]:.1f} at the start and {load[1]:.1f} at the end on "
            f"{usable_cores()} cores; {threads} torch thread(s)."
        )
    if "efficiency" in results:  # a changed section or peak changes it
        results["efficiency"] = _efficiency(plan, say, results)
    results["machine"]["load_avg_end"] = load_avg()
    cpu_report.write(results, out, carry_chaos=not quick)
    say(f"wrote {out} ({results['wall_s'] / 60:.1f} min)")
    if failed := {k: v for k, v in results["errors"].items() if only in (None, k)}:
        raise RuntimeError(f"bench sections failed: {failed}")
    return results


def check_section(name: str | None) -> None:
    """A section name ``ablate bench --section`` knows (None: every section)."""
    if name is not None and name not in SECTIONS:
        raise ValueError(f"unknown bench section '{name}'; choose from: {', '.join(SECTIONS)}")


# --- the sections -----------------------------------------------------------------------------


def _overhead(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    cfg = overhead_config({**plan.base, **plan.overhead}, plan.overhead_steps)
    res = compare_loops(cfg, reps=plan.overhead_reps, warmup=plan.overhead_warmup, log=say)
    say(
        f"ablate ÷ raw: median of pairs {res['ratio_median']:.3f}, best per step "
        f"{res['ratio_best']:.3f}; losses identical: {res['parity']['identical']}"
    )
    return res


def _speed(plan: Plan, say, results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for size, reps in plan.speed:
        say(f"{size.name}: {size.label}, {reps} repetitions")
        kw = {"reps": reps, "block_s": plan.speed_block_s, "compile_models": plan.gpu}
        rows.append(measure_speed(size, log=say, **kw))
        ratios = ", ".join(f"ours ÷ {n} {v:.3f}" for n, v in rows[-1]["speed_ratio"].items())
        say(f"{size.name} tokens/s: {ratios}")
    return rows


def _quality(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.versus import race

    res = race(
        plan.base,
        rounds=plan.race_rounds,
        snapshot_every=plan.snapshot_every,
        log=say,
        **plan.quality,
    )
    s = res["summary"]["ablate"]
    reach = "not reached" if s["reach_ratio"] is None else f"{s['reach_ratio']:.3f}"
    say(
        f"ablate ÷ nanoGPT: per step {s['step_ratio']:.3f}, whole run {s['wall_ratio']:.3f}, "
        f"to target {reach}"
    )
    return res


def _efficiency(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    machine, mm = results["machine"], results["matmul"]
    if plan.gpu and machine.get("gpu_bf16_peak"):
        peak, source = machine["gpu_bf16_peak"], f"the {machine['gpu']} dense bf16 peak (table)"
    elif plan.gpu:
        peak, source = mm["best"], f"the measured bf16 matmul rate ({mm['n']}^2)"
    else:
        peak, source = mm["best"], f"the measured fp32 matmul rate ({mm['n']}^2, best trial)"
    rows = []
    q = results.get("quality")
    if q and q.get("flops_per_token"):
        rows.append(("full training loop (time-to-quality run)", q["flops_per_token"], q))
    for r in results.get("speed") or []:
        s = r["size"]
        size = Size(**{k: s[k] for k in Size.__dataclass_fields__})
        fpt = build_ours(size).flops_per_token(size.seq_len)
        for name, m in r["models"].items():
            rows.append((f"forward + backward, {s['name']}, {name}", fpt, m))
    rows = [
        {
            "workload": workload,
            "flops_per_token": fpt,
            "tokens_per_s": m["tokens_per_s"],
            "achieved": fpt * m["tokens_per_s"],
            "fraction": fpt * m["tokens_per_s"] / peak,
        }
        for workload, fpt, m in rows
    ]
    return {"peak": peak, "peak_source": source, "rows": rows}


def study_throughput(
    cfg: RunConfig, *, n_runs: int, workers: tuple[int, ...] = (1, 2), log=print
) -> dict[str, Any]:
    """Runs per hour of a study of ``n_runs`` seeds of ``cfg``, trained by ``run_study`` into a
    fresh store per worker count (the runner gives each of N workers ``cores // N`` torch
    threads). The wall time of the whole call is what a user waits for; short runs make the
    fixed costs (spawning a worker, importing torch) weigh more than in a real study, so the
    steady-state rate is reported too: N x the median training tokens/s of one run (what long
    runs approach). Without the runner: ``available: False``."""
    try:
        from ablate.execution.runner import run_study
    except ImportError as err:
        return {"available": False, "reason": f"runner not available ({err})"}
    import yaml

    base = flatten(cfg.to_dict())
    base.pop("train.seed")
    base.pop("train.threads")  # the runner splits the cores between its workers
    study = {"name": "bench_throughput", "base": base, "seeds": list(range(n_runs))}
    results = {}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-study-") as tmp:
        path = Path(tmp) / "bench_throughput.yaml"
        path.write_text(yaml.safe_dump(study, sort_keys=False))
        for n in workers:
            t = time.perf_counter()
            got = run_study(path, store=Path(tmp) / f"store-{n}", workers=n, progress=False)
            wall = time.perf_counter() - t
            speeds = [s["tokens_per_s"] for s in got if s.get("tokens_per_s")]
            per_run = statistics.median(speeds) if speeds else math.nan
            results[str(n)] = {  # str keys: the same after a JSON round trip
                "wall_s": wall,
                "completed": sum(1 for s in got if s.get("status") == "completed"),
                "runs_per_hour": len(got) * 3600 / wall,
                "threads": max(1, usable_cores() // n),
                "run_tokens_per_s": per_run,
                "steady_tokens_per_s": n * per_run,
            }
            log(f"  workers={n}: {len(got)} runs in {wall:.1f} s")
    ratio = lambda key: {n: r[key] / results[str(workers[0])][key] for n, r in results.items()}  # noqa: E731
    best = lambda key: max(results, key=lambda n: results[n][key])  # noqa: E731
    return {
        "available": True,
        "runs": n_runs,
        "steps": cfg.train.max_steps,
        "workers": results,
        "ratio": ratio("runs_per_hour"),
        "steady_ratio": ratio("steady_tokens_per_s"),
        "best_workers": best("runs_per_hour"),
        "best_workers_long_runs": best("steady_tokens_per_s"),
    }


def _study(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    cfg = bench_config(plan.base, **plan.study)
    res = study_throughput(cfg, n_runs=plan.study_runs, log=say)
    if res.get("available"):
        res["config"] = f"{cfg.model.n_layers}L/{cfg.model.d_model}d, ctx {cfg.data.seq_len}"
        n = res["best_workers"]
        say(f"better default: --workers {n} (x{res['ratio'][n]:.2f} runs/hour)")
    else:
        say(res["reason"])
    return res


# --- 7. memory against corpus size ------------------------------------------------------------

DATA_GOAL = 1.2  # issue 21: the large corpus's peak at most this x the small one's
DATA_RUNS = ("builds the cache", "cached")
# a tiny model and few steps: the memory of interest is the data's, not the model's
DATA_TRAIN: dict[str, Any] = {
    **TINY,
    "model.max_seq_len": 64,
    "data.tokenizer": "char",
    "data.seq_len": 64,
    "train.eval_batches": 1,
    "train.final_eval_batches": 2,
    "train.threads": 1,
    "train.progress": False,
    "tracking.wandb": False,
}


def synthetic_corpus(path: Path, mb: float, seed: int = 0) -> Path:
    """``mb`` megabytes of lines of random words (a 5,000-word vocabulary), written in ~1 MB
    blocks so the writer's memory does not grow with the file."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(5000)]
    target, written = int(mb * (1 << 20)), 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            ids = rng.integers(0, len(words), 200_000)
            lines = [" ".join(words[i] for i in ids[j : j + 12]) for j in range(0, len(ids), 12)]
            written += f.write("\n".join(lines) + "\n")
    return path


def peak_rss_anon(cmd: list[str], env: dict[str, str], log_file: Path) -> dict[str, Any]:
    """Run ``cmd``; its wall time and the largest ``RssAnon`` (its heap: the page cache of the
    memory-mapped tokens is not counted) of samples every 50 ms, in bytes."""
    t, peak = time.perf_counter(), 0
    with log_file.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            peak = max(peak, rss_anon(proc.pid))
            time.sleep(0.05)
    if proc.returncode:
        tail = log_file.read_text(errors="replace").strip()[-1000:]
        raise RuntimeError(f"ablate train failed ({proc.returncode}): {tail}")
    return {"peak_rss_anon": peak, "wall_s": time.perf_counter() - t}


def corpus_memory(sizes_mb: tuple[float, float], steps: int, log=print) -> dict[str, Any]:
    """Peak ``RssAnon`` of ``ablate train`` (``steps`` steps) on a generated corpus of each
    size, each trained twice in a fresh process with a fresh token cache
    (``$ABLATE_CACHE_DIR``): first building the cache, then with it built. Goal: the ratio large
    / small per run at most ``DATA_GOAL`` (memory independent of corpus size)."""
    rows = []
    flat = {**DATA_TRAIN, "train.max_steps": steps, "train.eval_interval": steps + 1}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-data-") as tmp:
        for mb in sizes_mb:
            t = time.perf_counter()
            corpus = synthetic_corpus(Path(tmp) / f"corpus-{mb:g}mb.txt", mb)
            log(f"  {mb:g} MB corpus generated in {time.perf_counter() - t:.0f} s")
            env = {**os.environ, "ABLATE_CACHE_DIR": str(Path(tmp) / f"cache-{mb:g}")}
            store = ["--store", str(Path(tmp) / "store"), "--name", "data"]
            cmd = ablate_command("train", *store, flat={**flat, "data.dataset": str(corpus)})
            for run in DATA_RUNS:
                rows.append(
                    {
                        "corpus_mb": mb,
                        "run": run,
                        **peak_rss_anon(cmd, env, Path(tmp) / "train.log"),
                    }
                )
                log(
                    f"  {mb:g} MB, {run}: peak RssAnon {rows[-1]['peak_rss_anon'] / 2**20:,.0f} MiB"
                )
            corpus.unlink()
    small, large = sizes_mb
    peak = {(r["corpus_mb"], r["run"]): r["peak_rss_anon"] for r in rows}
    ratio = {run: peak[large, run] / peak[small, run] for run in DATA_RUNS}
    return {
        "sizes_mb": list(sizes_mb),
        "steps": steps,
        "rows": rows,
        "ratio": ratio,
        "goal": DATA_GOAL,
    }


def _data(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    res = corpus_memory(plan.data_mb, plan.data_steps, log=say)
    say(", ".join(f"{run}: large ÷ small {r:.2f}" for run, r in res["ratio"].items()))
    return res


def _nanogpt(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    """nanoGPT's training procedure (``versus.nanogpt_run``, a plain PyTorch loop) on the
    reference study's cpu runs, one seed after another: the artifact behind the reference
    report's "nanoGPT's procedure" numbers (full validation split and nanoGPT's estimate)."""
    from ablate.bench.gpu import REFERENCE_STUDY
    from ablate.bench.versus import nanogpt_run
    from ablate.study import load_study

    rows = []
    for run in load_study(REFERENCE_STUDY, "cpu").runs[: plan.nanogpt_seeds]:
        cfg = RunConfig.model_validate(
            {**run.config.to_dict()} if not plan.nanogpt_set else _with(run.config, plan)
        )
        t = time.perf_counter()
        res = nanogpt_run(cfg)
        rows.append(
            {"seed": cfg.train.seed, "full_val_loss": res["full_val_loss"]}
            | {"nanogpt_estimate": res["nanogpt_estimate"], "train_s": time.perf_counter() - t}
        )
        say(
            f"seed {cfg.train.seed}: full val {res['full_val_loss']:.4f}, estimate "
            f"{res['nanogpt_estimate']:.4f}"
        )
    return {"study": REFERENCE_STUDY.name, "profile": "cpu", "rows": rows}


def _stacked(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.stacking import measure

    res = measure(plan.stack_members, plan.stack_set, log=say)
    say(f"stacked ÷ solo (--workers 2): x{res['rows'][-1]['ratio']:.2f} runs/hour")
    return res


def _with(cfg: RunConfig, plan: Plan) -> dict[str, Any]:
    return build_config({**flatten(cfg.to_dict()), **plan.nanogpt_set}).to_dict()


# name (``ablate bench --section NAME``) -> (title, measure(plan, say, results so far))
SECTIONS: dict[str, tuple[str, Callable[[Plan, Any, dict[str, Any]], Any]]] = {
    "overhead": ("1. framework overhead", _overhead),
    "speed": ("2. model speed", _speed),
    "quality": ("3. time to quality", _quality),
    "efficiency": ("4. efficiency", _efficiency),
    "study": ("5. study throughput", _study),
    "data": ("7. memory vs corpus size", _data),
    "nanogpt": ("8. nanoGPT's procedure on the reference study", _nanogpt),
    "stacked": ("9. stacked runs", _stacked),
}
EXPLICIT = {"nanogpt"}  # run only when named (--section nanogpt): 8 seeds take ~16 min
