"""``ablate bench``: what the framework costs, how fast the model is, how long quality takes.

One process measures, side by side, and writes ``reports/bench.md`` (and ``bench.json``):

1. framework overhead: ``train_run`` against a hand-written PyTorch loop (``loops``);
2. model speed and step memory against x-transformers and ``nn.TransformerEncoder`` (``speed``);
3. time to quality: ablate against nanoGPT's training procedure, per step and to the same
   loss, with a breakdown of where the time goes (``versus``);
4. efficiency: achieved FLOP/s as a fraction of the measured matmul peak (``machine``);
5. study throughput with 1 and 2 workers (``throughput``).

``quick=True`` runs every section at toy sizes (a CI smoke test, well under a minute); its
numbers are not measurements of anything. A failing section is reported in ``bench.md`` and
makes ``run_bench`` raise after the report is written.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ablate.bench import report
from ablate.bench.loops import (
    GPU_OVERRIDES,
    NANOGPT_CPU,
    bench_config,
    compare_loops,
    overhead_config,
)
from ablate.bench.machine import has_gpu, machine_info, matmul_flops, torch_threads, usable_cores
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


def _console():
    from rich.console import Console

    return Console(highlight=False)


def run_bench(
    quick: bool = False, out: Path = Path("reports/bench.md"), *, threads: int | None = None
) -> dict[str, Any]:
    """Run every section, write ``out`` (markdown) and ``out.with_suffix('.json')``.

    ``threads``: torch threads for every section (default ``$ABLATE_BENCH_THREADS``, else the
    usable cores; ``quick``: 1).
    """
    from ablate.data import resolve_dataset

    resolve_dataset(NANOGPT_CPU["data.dataset"])  # missing data: fail now, not mid-bench
    os.environ.setdefault("WANDB_SILENT", "true")
    console = _console()
    # quick: one thread, so a smoke test on a busy CI machine does not stall on a contended
    # two-thread team (toy sizes gain nothing from a second thread anyway)
    threads = threads or int(os.environ.get("ABLATE_BENCH_THREADS") or 0) or None
    threads = threads or (1 if quick else usable_cores())
    gpu = has_gpu()
    plan = Plan.make(quick, gpu, threads)
    t_start = time.perf_counter()
    results: dict[str, Any] = {
        "quick": quick,
        "started": datetime.now().isoformat(timespec="seconds"),
        "errors": {},
        "gpu_paths": {"present": gpu, "overrides": GPU_OVERRIDES},
    }
    say = console.print

    results["load"] = {}

    def section(key: str, title: str, fn: Callable[[], Any]) -> None:
        console.rule(f"[bold]{title}")
        t = time.perf_counter()
        load0 = _load()
        try:
            results[key] = fn()
        except Exception as err:  # noqa: BLE001 - report it, run the other sections
            console.print(traceback.format_exc())
            results["errors"][key] = f"{type(err).__name__}: {err}"
        results["load"][key] = [load0, _load()]
        say(f"[dim]{title}: {time.perf_counter() - t:.0f} s[/]")

    with torch_threads(threads):
        results["machine"] = machine_info(threads)
        say(f"{results['machine']['cpu']}, {threads} cores, GPU: {results['machine']['gpu']}")
        results["matmul"] = matmul_flops(plan.matmul_n)
        say(f"dense matmul: best {results['matmul']['best'] / 1e9:,.1f} GFLOP/s")

        section("overhead", "1. framework overhead", lambda: _overhead(plan, say))
        section("speed", "2. model speed", lambda: _speed(plan, say))
        section("quality", "3. time to quality", lambda: _quality(plan, say))
        section("efficiency", "4. efficiency", lambda: _efficiency(plan, results))
        section("study", "5. study throughput", lambda: _study(plan, say))

        # the matmul peak once more at the end: the best of both is the denominator
        again = matmul_flops(plan.matmul_n)
        results["matmul"]["best"] = max(results["matmul"]["best"], again["best"])
        if "efficiency" in results:
            results["efficiency"] = _efficiency(plan, results)
    results["machine"]["load_avg_end"] = _load()
    results["wall_s"] = time.perf_counter() - t_start
    report.write(results, out)
    if not quick:  # `ablate bench --chaos` measures section 6 on its own; keep it
        from ablate.bench.chaos_report import carry_over

        carry_over(out)
    say(f"wrote {out} ({results['wall_s'] / 60:.1f} min)")
    if results["errors"]:
        raise RuntimeError(f"bench sections failed: {results['errors']}")
    return results


def _load() -> float | None:
    """The 1-minute load average (runnable processes; above the core count = contention)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


# --- the sections -----------------------------------------------------------------------------


def _overhead(plan: Plan, say) -> dict[str, Any]:
    cfg = overhead_config({**plan.base, **plan.overhead}, plan.overhead_steps)
    res = compare_loops(cfg, reps=plan.overhead_reps, warmup=plan.overhead_warmup, log=say)
    say(
        f"ablate ÷ raw: median of pairs {res['ratio_median']:.3f}, "
        f"best per step {res['ratio_best']:.3f}; losses identical: "
        f"{res['parity']['identical']}"
    )
    return res


def _speed(plan: Plan, say) -> list[dict[str, Any]]:
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


def _quality(plan: Plan, say) -> dict[str, Any]:
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


def _efficiency(plan: Plan, results: dict[str, Any]) -> dict[str, Any]:
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


def _study(plan: Plan, say) -> dict[str, Any]:
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


__all__ = ["Plan", "run_bench"]
