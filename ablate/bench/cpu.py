"""``ablate bench``: what the framework costs, how fast the model is, how long quality takes.

One process measures, side by side, and writes ``reports/bench.md`` (and ``bench.json``):

1. framework overhead: ``train_run`` against a hand-written PyTorch loop (``loops``);
2. model speed and step memory against x-transformers and ``nn.TransformerEncoder`` (``speed``);
3. time to quality: ablate against nanoGPT's training procedure, per step and to the same
   loss, with a breakdown of where the time goes (``versus``);
4. efficiency: achieved FLOP/s as a fraction of the measured matmul peak (``machine``);
5. study throughput with 1 and 2 workers (``throughput``);
7. peak memory of ``ablate train`` against corpus size (``data``).

Section 6 is ``ablate bench --chaos`` (``chaos``), carried over from ``bench_chaos.json``.
``quick=True`` runs every section at toy sizes (a CI smoke test); its numbers are not
measurements of anything. ``only=NAME`` measures one section and puts it into the existing
``bench.json``/``bench.md``. A failing section is reported in ``bench.md`` and makes
``run_bench`` raise after the report is written.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ablate.bench import cpu_report
from ablate.bench.loops import (
    GPU_OVERRIDES,
    NANOGPT_CPU,
    bench_config,
    compare_loops,
    overhead_config,
)
from ablate.bench.machine import (
    has_gpu,
    load_avg,
    machine_info,
    matmul_flops,
    torch_threads,
    usable_cores,
)
from ablate.bench.sections import Sections
from ablate.bench.speed import Size, build_ours, measure_speed

# ablate's defaults before issue #16 (this code with them is the "before" arm of section 3)
BEFORE: dict[str, Any] = {"optim.fused": False}

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
    """Sizes and repetitions of one bench run."""

    quick: bool
    base: dict[str, Any]
    matmul_n: int
    overhead: dict[str, Any]
    overhead_steps: int
    overhead_warmup: int
    overhead_reps: int
    speed: tuple[tuple[Size, int], ...]
    speed_block_s: float
    quality: dict[str, Any]
    study: dict[str, Any]
    study_runs: int
    quality_budget_s: float | None = None
    # section 3: rounds of ablate vs nanoGPT's procedure (``versus.race``)
    race_rounds: int = 2
    snapshot_every: int = 100
    breakdown_steps: int | None = None
    # ablate as it was before issue #16 (a third arm in every round; None: not run)
    before: dict[str, Any] | None = None
    # section 7: corpus sizes (MB) and training steps of each ``ablate train``
    data_mb: tuple[float, float] = (5.0, 300.0)
    data_steps: int = 20
    gpu: bool = False
    gpu_overrides: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, quick: bool, gpu: bool, threads: int) -> Plan:
        base = {**NANOGPT_CPU, "train.threads": threads}
        if gpu:
            base.update(GPU_OVERRIDES)
        small = Size("4L-128d", 4, 128, 4, 64, 12)
        large = Size("6L-384d", 6, 384, 6, 256, 64)
        if quick:
            return cls(
                quick=True,
                base=base,
                matmul_n=256,
                overhead=dict(TINY),
                overhead_steps=26,
                overhead_warmup=5,
                overhead_reps=1,
                speed=((Size("1L-32d", 1, 32, 2, 16, 4), 1), (Size("2L-64d", 2, 64, 4, 32, 8), 1)),
                speed_block_s=0.05,
                quality={
                    **TINY,
                    "train.max_steps": 60,
                    "train.eval_interval": 30,
                    "train.eval_batches": 3,
                    "train.final_eval_batches": 10,
                    "train.progress": False,
                },
                race_rounds=2,
                snapshot_every=20,
                breakdown_steps=30,
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
                gpu=gpu,
                gpu_overrides=GPU_OVERRIDES,
            )
        return cls(
            quick=False,
            base=base,
            matmul_n=4096 if gpu else 2048,
            overhead={},
            # a 200-step window (steps 20..219): 20 log steps, 4 grad-norm steps, 2 checkpoints
            overhead_steps=521 if gpu else 221,
            overhead_warmup=20,
            overhead_reps=6,
            speed=((small, 5), (large, 5 if gpu else 2)),
            speed_block_s=1.0,
            quality={},  # nanoGPT's CPU config at the reference study's cadence
            race_rounds=2,
            snapshot_every=100,
            breakdown_steps=500,
            before=BEFORE,
            study={
                "train.max_steps": 150,
                "train.eval_interval": 50,
                "train.eval_batches": 5,
                "train.final_eval_batches": 10,
                "train.progress": False,
            },
            study_runs=4,
            # about 2 min on a quiet 2-core machine; a busy one is cut off, and says so
            gpu=gpu,
            gpu_overrides=GPU_OVERRIDES,
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
    usable cores; ``quick``: 1).
    """
    from ablate.data import resolve_dataset

    check_section(only)
    resolve_dataset(NANOGPT_CPU["data.dataset"])  # missing data: fail now, not mid-bench
    # quick: one thread, so a smoke test on a busy CI machine does not stall on a contended
    # two-thread team (toy sizes gain nothing from a second thread anyway)
    threads = threads or int(os.environ.get("ABLATE_BENCH_THREADS") or 0) or None
    threads = threads or (1 if quick else usable_cores())
    gpu = has_gpu()
    plan = Plan.make(quick, gpu, threads)
    started = datetime.now().isoformat(timespec="seconds")
    results = _earlier(out) if only else {}
    results.setdefault("quick", quick)
    results.setdefault("started", started)
    results["gpu_paths"] = {"present": gpu, "overrides": GPU_OVERRIDES}
    run = Sections(results)
    say = run.say
    with torch_threads(threads):
        machine, matmul = machine_info(threads), matmul_flops(plan.matmul_n)
        say(f"{machine['cpu']}, {threads} cores, GPU: {machine['gpu']}")
        say(f"dense matmul: best {matmul['best'] / 1e9:,.1f} GFLOP/s")
        results.setdefault("machine", machine)
        results.setdefault("matmul", matmul)
        for key, (title, measure) in SECTIONS.items():
            if only in (None, key):
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
    failed = {k: v for k, v in results["errors"].items() if only in (None, k)}
    if failed:
        raise RuntimeError(f"bench sections failed: {failed}")
    return results


def check_section(name: str | None) -> None:
    """A section name ``ablate bench --section`` knows (None: every section)."""
    if name is not None and name not in SECTIONS:
        raise ValueError(f"unknown bench section '{name}'; choose from: {', '.join(SECTIONS)}")


def _earlier(out: Path) -> dict[str, Any]:
    """The results of the last run written to ``out`` (none: an empty start)."""
    saved = Path(out).with_suffix(".json")
    return json.loads(saved.read_text()) if saved.is_file() else {}


# --- the sections -----------------------------------------------------------------------------


def _overhead(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    cfg = overhead_config({**plan.base, **plan.overhead}, plan.overhead_steps)
    res = compare_loops(cfg, reps=plan.overhead_reps, warmup=plan.overhead_warmup, log=say)
    say(
        f"ablate ÷ raw: median of pairs {res['ratio_median']:.3f}, "
        f"best per step {res['ratio_best']:.3f}; losses identical: "
        f"{res['parity']['identical']}"
    )
    return res


def _speed(plan: Plan, say, results: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for size, reps in plan.speed:
        say(f"{size.name}: {size.label}, {reps} repetitions")
        rows += measure_speed(
            [size],
            reps=reps,
            block_s=plan.speed_block_s,
            compile_models=plan.gpu,
            log=say,
            progress=None if plan.quick else lambda msg: say(f"[dim]  timed {msg}[/]"),
        )
    for r in rows:
        ratios = ", ".join(f"ours ÷ {n} {v:.3f}" for n, v in r["speed_ratio"].items())
        say(f"{r['size']['name']} tokens/s: {ratios}")
    return rows


def _quality(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.versus import race

    res = race(
        plan.base,
        pairs=plan.race_rounds,
        snapshot_every=plan.snapshot_every,
        breakdown_steps=plan.breakdown_steps,
        before=plan.before,
        log=say,
        **plan.quality,
    )
    for arm, s in res["summary"].items():
        reach = s["reach_ratio"]
        say(
            f"{arm} ÷ nanoGPT: per step {s['step_ratio']:.3f}, whole run {s['wall_ratio']:.3f}, "
            f"to target {'not reached' if reach is None else f'{reach:.3f}'}"
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
        rows.append(
            {
                "workload": "full training loop (time-to-quality run)",
                "flops_per_token": q["flops_per_token"],
                "tokens_per_s": q["tokens_per_s"],
            }
        )
    for r in results.get("speed") or []:
        s = r["size"]
        size = Size(
            s["name"], s["n_layers"], s["d_model"], s["n_heads"], s["seq_len"], s["batch_size"]
        )
        fpt = build_ours(size).flops_per_token(size.seq_len)
        for name, m in r["models"].items():
            rows.append(
                {
                    "workload": f"forward + backward, {s['name']}, {name}",
                    "flops_per_token": fpt,
                    "tokens_per_s": m["tokens_per_s"],
                }
            )
    for row in rows:
        row["achieved"] = row["flops_per_token"] * row["tokens_per_s"]
        row["fraction"] = row["achieved"] / peak
    return {"peak": peak, "peak_source": source, "rows": rows}


def _study(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.throughput import study_throughput

    cfg = bench_config(plan.base, **plan.study)
    res = study_throughput(cfg, n_runs=plan.study_runs, log=say)
    if res.get("available"):
        m = cfg.model
        res["config"] = f"{m.n_layers}L/{m.d_model}d, ctx {cfg.data.seq_len}"
        say(
            f"better default: --workers {res['best_workers']} "
            f"(x{res['ratio'][res['best_workers']]:.2f} runs/hour)"
        )
    else:
        say(res["reason"])
    return res


def _data(plan: Plan, say, results: dict[str, Any]) -> dict[str, Any]:
    from ablate.bench.data import corpus_memory

    res = corpus_memory(plan.data_mb, plan.data_steps, log=say)
    say(", ".join(f"{run}: large ÷ small {r:.2f}" for run, r in res["ratio"].items()))
    return res


# name (``ablate bench --section NAME``) -> (title, measure(plan, say, results so far))
SECTIONS = {
    "overhead": ("1. framework overhead", _overhead),
    "speed": ("2. model speed", _speed),
    "quality": ("3. time to quality", _quality),
    "efficiency": ("4. efficiency", _efficiency),
    "study": ("5. study throughput", _study),
    "data": ("7. memory vs corpus size", _data),
}
