"""``ablate bench``: what the framework costs, how fast the model is, how long quality takes.

One process measures side by side and writes ``reports/bench.md`` (and ``bench.json``):
1. ``train_run`` against a hand-written PyTorch loop (``loops``); 2. model speed and step memory
against x-transformers and ``nn.TransformerEncoder`` (``speed``); 3. time to nanoGPT's loss
against nanoGPT's procedure (``versus``); 4. achieved FLOP/s as a fraction of the measured matmul
peak; 5. study throughput, 1 worker against 2, and 9. stacked runs against one run per process
(``studies``); 7. peak memory of ``ablate train`` against corpus size; 8. (only when named)
nanoGPT's procedure on the reference study's seeds; 10. operations, Python calls and host reads
per step, solo and stacked (``stepcost``); 11. start-up, ``ablate run`` to the first training
step of a small study, and a one-run study's whole process against importing torch, Lightning
and W&B (``startup``). Section 6 is ``ablate bench --chaos``.

``quick`` runs every section at toy sizes (a smoke test; its numbers measure nothing).
``only=NAME`` measures one section into the existing report. A failing section is reported
and makes ``run_bench`` raise after the report is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ablate.bench import cpu_report
from ablate.bench.loops import (
    GPU_OVERRIDES,
    NANOGPT_CPU,
    REFERENCE_STUDY,
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

# toy model for --quick (and the tests)
TINY = {f"model.{k}": v for k, v in {"n_layers": 1, "d_model": 32, "n_heads": 2}.items()}
TINY |= {"model.max_seq_len": 32, "data.seq_len": 32, "data.batch_size": 8}
QUIET = {"train.progress": False, "tracking.wandb": False}


def _train(steps: int, every: int, batches: int, final: int | None) -> dict[str, Any]:
    """Training length and evaluation cadence as dotted keys."""
    keys = ("max_steps", "eval_interval", "eval_batches", "final_eval_batches")
    return {f"train.{k}": v for k, v in zip(keys, (steps, every, batches, final), strict=True)}


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
    speed: Size = Size("4L-128d", 4, 128, 4, 64, 12)  # nanoGPT's CPU shape
    speed_reps: int = 5
    speed_block_s: float = 1.0
    quality: dict[str, Any] = field(default_factory=dict)  # section 3: the reference cadence
    race_rounds: int = 2
    snapshot_every: int = 100
    study: dict[str, Any] = field(default_factory=lambda: _train(150, 50, 5, 10) | QUIET)
    study_runs: int = 4
    data_mb: tuple[float, float] = (5.0, 300.0)  # section 7: corpus sizes
    data_steps: int = 20
    nanogpt_seeds: int = 8  # section 8 (~2 min a seed): seeds of the reference study
    nanogpt_set: dict[str, Any] = field(default_factory=dict)
    stack_members: int = 3  # section 9: seeds stacked vs one per process
    stack_set: dict[str, Any] = field(default_factory=lambda: _train(200, 100, 5, 10))
    startup_reps: int = 3  # section 11: launches of `ablate run` per setting

    @classmethod
    def make(cls, quick: bool, gpu: bool, threads: int) -> Plan:
        base = {**NANOGPT_CPU, "train.threads": threads, **(GPU_OVERRIDES if gpu else {})}
        plan = cls(gpu=gpu, base=base)
        large = Size("6L-384d", 6, 384, 6, 256, 64)
        if gpu and not quick:
            return replace(plan, matmul_n=4096, overhead_steps=521, speed=large)
        if not quick:
            return plan
        return replace(
            plan,
            quick=True,
            matmul_n=256,
            overhead=dict(TINY),
            overhead_steps=26,
            overhead_warmup=5,
            overhead_reps=1,
            speed=Size("1L-32d", 1, 32, 2, 16, 4),
            speed_reps=1,
            speed_block_s=0.05,
            quality={**TINY, **_train(60, 30, 3, 10), "train.progress": False},
            snapshot_every=20,
            study={**TINY, **_train(10, 10, 1, 1), **QUIET},
            study_runs=2,
            data_mb=(0.1, 0.5),
            data_steps=2,
            nanogpt_seeds=1,
            nanogpt_set={"train.max_steps": 5, "train.final_eval_batches": 2},
            stack_members=2,
            stack_set={**TINY, **_train(6, 6, 1, 1)},
            startup_reps=1,
        )


def run_bench(
    quick: bool = False,
    out: Path = Path("reports/bench.md"),
    *,
    threads: int | None = None,
    only: str | None = None,
) -> dict[str, Any]:
    """Run every section (``only``: that one, into the existing report), write ``out`` and its
    JSON. ``threads``: torch threads (default ``$ABLATE_BENCH_THREADS``, else the usable cores;
    ``quick``: 1, so a smoke test on a busy CI machine does not stall on a contended team)."""
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
        for key, (title, measure) in SECTIONS.items():
            if only == key or (only is None and key != "nanogpt"):  # 8 only when named
                run.run(key, title, lambda measure=measure: measure(plan, say, results))
        if only is None:  # the matmul peak again at the end: the best of both is the denominator
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


# --- the sections: measure(plan, say, results so far) -----------------------------------------


def _overhead(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    cfg = overhead_config({**plan.base, **plan.overhead}, plan.overhead_steps)
    res = compare_loops(cfg, reps=plan.overhead_reps, warmup=plan.overhead_warmup, log=say)
    say(f"ablate ÷ raw {res['ratio_median']:.3f}; identical losses: {res['parity']['identical']}")
    return res


def _speed(plan: Plan, say, results: dict[str, Any]) -> list[dict[str, Any]]:
    kw = {"reps": plan.speed_reps, "block_s": plan.speed_block_s, "compile_models": plan.gpu}
    return [measure_speed(plan.speed, log=say, **kw)]


def _quality(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.versus import race

    kw = {"rounds": plan.race_rounds, "snapshot_every": plan.snapshot_every, "log": say}
    return race(plan.base, **kw, **plan.quality)


def _efficiency(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    machine, mm = results["machine"], results["matmul"]
    if plan.gpu and machine.get("gpu_bf16_peak"):
        peak, source = machine["gpu_bf16_peak"], f"the {machine['gpu']} dense bf16 peak (table)"
    else:
        kind = "bf16 matmul rate" if plan.gpu else "fp32 matmul rate"
        peak, source = mm["best"], f"the measured {kind} ({mm['n']}^2, best trial)"
    rows = []
    q = results.get("quality")
    if q and q.get("flops_per_token"):
        rows.append(("full training loop (time-to-quality run)", q["flops_per_token"], q))
    for r in results.get("speed") or []:
        size = Size(**{k: r["size"][k] for k in Size.__dataclass_fields__})
        fpt = build_ours(size).flops_per_token(size.seq_len)
        rows += [(f"forward + backward, {size.name}, {n}", fpt, m) for n, m in r["models"].items()]
    rows = [
        {"workload": w, "flops_per_token": fpt, "tokens_per_s": m["tokens_per_s"]}
        | {"achieved": fpt * m["tokens_per_s"], "fraction": fpt * m["tokens_per_s"] / peak}
        for w, fpt, m in rows
    ]
    return {"peak": peak, "peak_source": source, "rows": rows}


def _study(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.studies import study_throughput

    return study_throughput(bench_config(plan.base, **plan.study), plan.study_runs, log=say)


def _stacked(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.studies import stacked

    return stacked(plan.stack_members, plan.stack_set, log=say)


def _stepcost(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.stepcost import measure

    return measure(plan.base["train.threads"], plan.quick, log=say)


def _startup(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.startup import measure

    return measure(plan.startup_reps, plan.quick, log=say)


# --- 7. memory against corpus size ------------------------------------------------------------

DATA_GOAL = 1.2  # goal: the large corpus's peak at most this x the small one's
DATA_RUNS = ("builds the cache", "cached")
# a tiny model, few steps: the memory of interest is the data's, not the model's
DATA_TRAIN = {**TINY, "model.max_seq_len": 64, "data.tokenizer": "char", "data.seq_len": 64}
DATA_TRAIN |= {"train.eval_batches": 1, "train.final_eval_batches": 2, "train.threads": 1, **QUIET}


def synthetic_corpus(path: Path, mb: float, seed: int = 0) -> Path:
    """``mb`` megabytes of lines of random words, written in blocks (the writer stays small)."""
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
    """Run ``cmd``: its wall time and largest ``RssAnon`` (its heap, not the page cache of the
    memory-mapped tokens), sampled every 50 ms."""
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


def _data(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    """Peak ``RssAnon`` of ``ablate train`` on a generated corpus of each size, each trained
    twice in a fresh process with a fresh token cache: building it, then with it built."""
    rows, steps = [], plan.data_steps
    flat = {**DATA_TRAIN, "train.max_steps": steps, "train.eval_interval": steps + 1}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-data-") as tmp:
        for mb in plan.data_mb:
            corpus = synthetic_corpus(Path(tmp) / f"corpus-{mb:g}mb.txt", mb)
            env = {**os.environ, "ABLATE_CACHE_DIR": str(Path(tmp) / f"cache-{mb:g}")}
            store = ["--store", str(Path(tmp) / "store"), "--name", "data"]
            cmd = ablate_command("train", *store, flat={**flat, "data.dataset": str(corpus)})
            for run in DATA_RUNS:
                rows.append(
                    {"corpus_mb": mb, "run": run} | peak_rss_anon(cmd, env, Path(tmp) / "log")
                )
                say(
                    f"  {mb:g} MB, {run}: peak RssAnon {rows[-1]['peak_rss_anon'] / 2**20:,.0f} MiB"
                )
            corpus.unlink()
    small, large = plan.data_mb
    peak = {(r["corpus_mb"], r["run"]): r["peak_rss_anon"] for r in rows}
    ratio = {run: peak[large, run] / peak[small, run] for run in DATA_RUNS}
    return {
        "sizes_mb": list(plan.data_mb),
        "steps": steps,
        "rows": rows,
        "ratio": ratio,
        "goal": DATA_GOAL,
    }


def _nanogpt(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    """nanoGPT's procedure (``versus.nanogpt_run``) on the reference study's cpu runs, seed
    after seed: the reference report's "nanoGPT's procedure" numbers."""
    from ablate.bench.versus import nanogpt_run
    from ablate.study import load_study

    rows = []
    for run in load_study(REFERENCE_STUDY, "cpu").runs[: plan.nanogpt_seeds]:
        cfg = bench_config(run.config, **plan.nanogpt_set)
        t = time.perf_counter()
        res = nanogpt_run(cfg)
        rows.append(
            {"seed": cfg.train.seed, "full_val_loss": res["full_val_loss"]}
            | {"nanogpt_estimate": res["nanogpt_estimate"], "train_s": time.perf_counter() - t}
        )
        say(f"seed {cfg.train.seed}: full val {res['full_val_loss']:.4f}")
    return {"study": REFERENCE_STUDY.name, "profile": "cpu", "rows": rows}


# name (``ablate bench --section NAME``) -> (title, measure)
SECTIONS = {
    "overhead": ("1. framework overhead", _overhead),
    "speed": ("2. model speed", _speed),
    "quality": ("3. time to quality", _quality),
    "efficiency": ("4. efficiency", _efficiency),
    "study": ("5. study throughput", _study),
    "data": ("7. memory vs corpus size", _data),
    "nanogpt": ("8. nanoGPT's procedure on the reference study", _nanogpt),
    "stacked": ("9. stacked runs", _stacked),
    "stepcost": ("10. step cost", _stepcost),
    "startup": ("11. start-up", _startup),
}
