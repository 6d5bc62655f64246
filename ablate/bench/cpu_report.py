"""``bench.md``: the measurements of one ``ablate bench`` run as markdown (plus ``bench.json``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ablate.bench import markdown
from ablate.bench.markdown import Section, document, mib, seconds, si, table, x

OVERHEAD_GOAL = 1.05
HEADINGS = {
    "machine": "## Machine",
    "overhead": "## 1. Framework overhead",
    "speed": "## 2. Model speed",
    "quality": "## 3. Time to quality",
    "efficiency": "## 4. Efficiency",
    "study": "## 5. Study throughput",
    "data": "## 7. Memory vs corpus size",
    "gpu_paths": "## GPU paths",
}
SECTIONS = tuple(HEADINGS.values())


def _machine(m: dict[str, Any], mm: dict[str, Any]) -> str:
    rows = [
        ["CPU", m["cpu"]],
        ["usable cores / torch threads", f"{m['cores']} / {m['threads']}"],
        ["GPU", m.get("gpu") or "none"],
        ["platform", m["platform"]],
        ["python / torch / lightning", f"{m['python']} / {m['torch']} / {m['lightning']}"],
        ["x-transformers", m.get("x_transformers") or "not installed"],
    ]
    if mm:
        rows.append(
            [
                f"dense matmul ({mm['dtype']}, {mm['n']}x{mm['n']})",
                f"best {si(mm['best'], 'FLOP/s')}, median {si(mm['median'], 'FLOP/s')}",
            ]
        )
    rows.append(
        [
            "load average (1 min) at start / end",
            f"{x(m.get('load_avg_start'), 2)} / {x(m.get('load_avg_end'), 2)}",
        ]
    )
    return table(["", ""], rows)


def _overhead(o: dict[str, Any]) -> str:
    p = o["parity"]
    verdict = "meets" if o["ratio_median"] <= OVERHEAD_GOAL else "misses"
    best = o["best_ms"]
    parts = [
        f"Step time of the full `ablate` training loop ÷ a minimal hand-written PyTorch loop, "
        f"same model init, batches, optimizer and schedule; {o['reps']} A/B pairs in "
        f"alternating order, {o['steps']} steps each, steady-state window = steps "
        f"{o['warmup']}..{o['steps'] - 2} ({o['window']} steps; evaluation switched off, "
        f"checkpoints, logging, grad norms, progress bar and W&B on).",
        "",
        f"- ablate ÷ raw, median over pairs of the window means: **{x(o['ratio_median'])}** "
        f"(range {x(o['ratio_min'])}–{x(o['ratio_max'])}; goal ≤ {OVERHEAD_GOAL}: {verdict})",
        f"- ablate ÷ raw, best of {o['reps']} runs at every step: **{x(o['ratio_best'])}** "
        "(blind to stalls from other processes, but on a busy machine it favours the arm that "
        "happened to get more undisturbed runs)",
        f"- ablate ÷ raw, median over pairs of the median step: {x(o['median_step_ratio'])}",
        f"- steps stalled by other processes (> 3x the best run of that step): "
        f"ablate {o['stalls']['ablate']}, raw {o['stalls']['raw']}",
        "",
        "A run slower than its arm's best-per-step mean by more than a few percent was "
        "disturbed by other processes (column 'x best').",
        "",
        table(
            ["pair", "order", "ablate ms/step", "x best", "raw ms/step", "x best", "ablate ÷ raw"],
            [
                [
                    i + 1,
                    q["order"],
                    f"{q['ablate_ms']:.2f}",
                    x(q["ablate_ms"] / best["ablate"], 2),
                    f"{q['raw_ms']:.2f}",
                    x(q["raw_ms"] / best["raw"], 2),
                    x(q["ratio"]),
                ]
                for i, q in enumerate(o["pairs"])
            ]
            + [
                [
                    "best per step",
                    "",
                    f"{best['ablate']:.2f}",
                    "",
                    f"{best['raw']:.2f}",
                    "",
                    x(o["ratio_best"]),
                ]
            ],
        ),
        "",
        "Where the extra time goes (ablate − raw per step, best of the repetitions, grouped by "
        "what the ablate loop does at that step):",
        "",
        table(
            ["step kind", "steps in window", "extra ms per such step", "share of the extra"],
            [
                [
                    a["kind"],
                    a["steps"],
                    f"{a['extra_ms_per_step']:.2f}",
                    f"{a['share']:.0%}" if math.isfinite(a["share"]) else "n/a",
                ]
                for a in o["attribution"]
            ],
        ),
        "",
        f"Fairness check (first pair): the two loops' training losses over all {p['steps']} "
        f"steps are {'identical' if p['identical'] else 'not identical'} "
        f"(max |Δ| = {p['max_abs_diff']:.3g}; loss {p['first_loss']:.4f} -> "
        f"{p['last_loss']:.4f}).",
    ]
    if o.get("note"):
        parts += ["", o["note"]]
    return "\n".join(parts)


def _speed(rows: list[dict[str, Any]], gpu: bool) -> str:
    parts = [
        "Forward + backward (no optimizer) on one fixed batch; tokens/s is the best single "
        "step (CPU) or block (GPU) over rotating repetitions; step memory is "
        + (
            "the rise of `torch.cuda.max_memory_allocated` during a step."
            if gpu
            else "the peak of tensor bytes allocated during a step and alive together "
            "(activations, gradients, temporaries; parameters excluded), from a dispatch-mode "
            "tracker."
        ),
        "",
    ]
    all_ok = True
    for r in rows:
        s = r["size"]
        models = r["models"]
        ours = models["ours"]
        parts.append(f"**{s['name']}** ({s['label']}, {s['tokens']:,} tokens/step)")
        parts.append("")
        body = []
        for name, m in models.items():
            speed = r["speed_ratio"].get(name)
            mem = r["memory_ratio"].get(name)
            body.append(
                [
                    name,
                    f"{m['params']:,}",
                    f"{m['tokens_per_s']:,.0f}",
                    f"{m['tokens_per_s_median']:,.0f}",
                    "—" if name == "ours" else f"**{x(speed)}**",
                    mib(m["peak_bytes"]),
                    "—" if name == "ours" else f"**{x(mem)}**",
                    m["timed_steps"],
                ]
            )
            if speed is not None and speed < 1.0:
                all_ok = False
        parts.append(
            table(
                [
                    "model",
                    "params",
                    "tokens/s (best)",
                    "tokens/s (median)",
                    "ours ÷ this (speed)",
                    "step memory MiB",
                    "ours ÷ this (memory)",
                    "timed steps",
                ],
                body,
            )
        )
        parts.append("")
        same = len({m["params"] for m in models.values()}) == 1
        parts.append(
            f"Parameter counts {'match exactly' if same else 'differ'} (ours {ours['params']:,})."
        )
        parts.append("")
    parts.append(
        f"Goal (ours at least as fast as both at every size): "
        f"{'met' if all_ok else 'not met'} (speed ratios > 1 mean ours is faster; memory "
        f"ratios < 1 mean ours uses less)."
    )
    return "\n".join(parts)


def _quality(q: dict[str, Any]) -> str:
    """Section 3: ablate against nanoGPT's procedure (``versus.race``)."""
    arms = [*q["variants"], "nanogpt"]
    before = q["variants"].get("ablate (before)")
    parts = [
        f"ablate's whole training loop (`train_run`: Lightning, checkpoints, metrics.csv, W&B "
        f"offline, progress bar; evaluation {q['ablate_eval']}) against nanoGPT's training "
        f"procedure re-implemented in plain PyTorch (random-offset batches, its LR schedule, "
        f"AdamW as nanoGPT builds it, `loss.item()` every step, evaluation {q['nanogpt_eval']}, "
        "a checkpoint when val improves), on "
        f"{q['config']}; same initial weights. {len(q['rounds'])} rounds in one process, the "
        "order rotating. Per step: median interval between step starts. To quality: the target "
        "is the nanoGPT run's final loss on the whole validation split; an arm reaches it at the "
        f"earliest of its weight snapshots (every {q['snapshot_every']} steps) from which all "
        "later ones score at or below it on the whole split; times run from the arm's call "
        "(data, model, W&B and Lightning set-up included; imports not).",
    ]
    if before:
        parts += [
            "",
            "'ablate (before)' is this code with "
            + ", ".join(f"`{k}: {v}`" for k, v in before.items())
            + " (main's behaviour before this change).",
        ]
    head = ["arm", "per step ÷ nanoGPT", "whole run ÷ nanoGPT", "to target ÷ nanoGPT", "reached"]
    rows = [
        [
            arm,
            f"**{x(s['step_ratio'])}**",
            f"**{x(s['wall_ratio'])}**",
            f"**{x(s['reach_ratio'])}**",
            s["reached"],
        ]
        for arm, s in q["summary"].items()
    ]
    parts += ["", "Medians over rounds (goals: per step ≤ 1.0, to target ≤ 0.9):", ""]
    parts.append(table(head, rows))
    detail = []
    for i, r in enumerate(q["rounds"]):
        for arm in arms:
            a = r["arms"][arm]
            reach = (
                f"step {a['reached_step']}, {seconds(a['reached_s'])}"
                if a["reached"]
                else "not reached"
            )
            detail.append(
                [
                    i + 1 if arm == arms[0] else "",
                    arm,
                    f"{a['step_s'] * 1e3:.2f}",
                    seconds(a["wall_s"]),
                    f"{a['final_loss']:.4f}",
                    reach,
                ]
            )
    parts += [
        "",
        table(
            ["round", "arm", "ms/step (median)", "whole run", "final loss (full val)", "target"],
            detail,
        ),
        "",
        "Targets (nanoGPT's final full-split loss) per round: "
        + ", ".join(f"{r['target']:.4f}" for r in q["rounds"])
        + ".",
    ]
    parts += ["", _breakdown(q["breakdown"])]
    return "\n".join(parts)


def _vs(label: str, ablate: float, nanogpt: float) -> list[str]:
    """A breakdown row: ablate's and nanoGPT's figure and their difference."""
    return [label, f"{ablate:.2f}", f"{nanogpt:.2f}", f"{ablate - nanogpt:+.2f}"]


def _breakdown(b: dict[str, Any]) -> str:
    rows = [_vs(r["component"], r["ablate_ms"], r["nanogpt_ms"]) for r in b["rows"]]
    rows += [[f"  {r['component']}", f"({r['ablate_ms']:.2f})", "", ""] for r in b["details"]]
    t = b["total"]
    rows.append(_vs("**total per step**", t["ablate_ms"], t["nanogpt_ms"]))
    fixed = [_vs(f["what"], f["ablate"], f["nanogpt"]) for f in b["fixed_s"]]
    return "\n".join(
        [
            f"Where the time goes: one more run of each arm ({b['steps']} steps), ablate under "
            "Lightning's `SimpleProfiler` (plus timers around the AdamW update and each logger), "
            "nanoGPT with a clock between its phases (CPU: ops are synchronous, so host time is "
            "op time; the profiler's own cost lands in ablate's 'rest'). Milliseconds per "
            "training step, evaluations spread over the steps:",
            "",
            table(["component", "ablate ms/step", "nanoGPT ms/step", "ablate − nanoGPT"], rows),
            "",
            "Once per run (seconds):",
            "",
            table(["", "ablate s", "nanoGPT s", "ablate − nanoGPT"], fixed),
        ]
    )


def _efficiency(e: dict[str, Any]) -> str:
    rows = [
        [
            w["workload"],
            si(w["flops_per_token"], "FLOP"),
            f"{w['tokens_per_s']:,.0f}",
            si(w["achieved"], "FLOP/s"),
            f"**{x(w['fraction'], 3)}**",
        ]
        for w in e["rows"]
    ]
    return "\n".join(
        [
            f"Achieved FLOP/s = `model.flops_per_token(seq_len)` (6 x non-embedding params + "
            f"head + attention, forward + backward) x tokens/s, as a fraction of "
            f"{e['peak_source']} ({si(e['peak'], 'FLOP/s')}). The same FLOP count is used for "
            "the other implementations (same architecture).",
            "",
            table(["workload", "FLOP/token", "tokens/s", "achieved", "fraction of peak"], rows),
        ]
    )


def _study(s: dict[str, Any]) -> str:
    if not s.get("available"):
        return f"n/a ({s.get('reason', 'runner not available')})"
    rows = [
        [
            n,
            w.get("threads", "?"),
            f"{w['wall_s']:.1f} s",
            f"{w['completed']}/{s['runs']}",
            f"{w['runs_per_hour']:.0f}",
            f"**{x(s['ratio'][n])}**",
            f"{w['run_tokens_per_s']:,.0f}",
            f"{w['steady_tokens_per_s']:,.0f}",
            f"**{x(s['steady_ratio'][n])}**",
        ]
        for n, w in s["workers"].items()
    ]
    rates = {n: w["runs_per_hour"] for n, w in s["workers"].items()}
    ranked = sorted(rates, key=rates.get, reverse=True)
    best, runner_up = ranked[0], ranked[-1]
    margin = rates[best] / rates[runner_up]
    long_best = s["best_workers_long_runs"]
    if margin < 1.05:
        verdict = (
            f"For this short study the settings tie (x{margin:.2f}, inside the noise of one "
            f"measurement): spawning workers costs about what they gain."
        )
    else:
        verdict = (
            f"For this short study `--workers {best}` is better "
            f"(x{margin:.2f} runs/hour over `--workers {runner_up}`)."
        )
    verdict += (
        f" For longer runs the steady-state rate decides: `--workers {long_best}` "
        f"(x{s['steady_ratio'][long_best]:.2f} tokens/s over 1 worker)."
    )
    return "\n".join(
        [
            f"A study of {s['runs']} runs ({s['config']}, {s['steps']} steps each) trained by "
            "`run_study` into a fresh store per setting; the runner gives each worker "
            "`cores // workers` torch threads. Wall time covers everything the user waits for; "
            "the steady-state rate is workers x the median training tokens/s of one run.",
            "",
            table(
                [
                    "workers",
                    "threads each",
                    "wall",
                    "completed",
                    "runs/hour",
                    "÷ 1 worker",
                    "tokens/s per run",
                    "steady-state tokens/s",
                    "÷ 1 worker",
                ],
                rows,
            ),
            "",
            verdict,
        ]
    )


def _gpu(g: dict[str, Any], name: str | None) -> str:
    if not g["present"]:
        return (
            "No GPU present: everything above ran on the CPU in fp32. On a GPU the bench runs "
            f"every section with {', '.join(f'`{k}={v}`' for k, v in g['overrides'].items())} "
            "(bf16 autocast, flash attention, fused AdamW, torch.compile, pinned memory), "
            "compiles all three models of section 2 under bf16 autocast, and reports "
            "efficiency against the GPU's dense bf16 peak."
        )
    return (
        f"GPU present ({name}): ran with "
        f"{', '.join(f'`{k}={v}`' for k, v in g['overrides'].items())}; section 2 compiled all "
        "three models under bf16 autocast; efficiency is against the dense bf16 peak."
    )


def _data(d: dict[str, Any]) -> str:
    small, large = d["sizes_mb"]
    rows = [
        [
            f"{r['corpus_mb']:g} MB",
            r["run"],
            f"{r['peak_rss_anon'] / 2**20:,.0f}",
            seconds(r["wall_s"]),
        ]
        for r in d["rows"]
    ]
    ratios = "; ".join(
        f"{run}: **{x(v, 2)}** ({'meets' if v <= d['goal'] else 'misses'})"
        for run, v in d["ratio"].items()
    )
    return "\n".join(
        [
            f"Peak anonymous memory (`RssAnon`, sampled every 50 ms; the memory-mapped token "
            f"cache's pages are not counted) of `ablate train` ({d['steps']} steps of a 1-layer "
            f"model, char tokenizer) on a generated {small:g} MB and {large:g} MB local text "
            "corpus, each in a fresh process with a fresh token cache: first the run that builds "
            "the cache, then a run that finds it built.",
            "",
            table(["corpus", "run", "peak RssAnon MiB", "wall"], rows),
            "",
            f"{large:g} MB ÷ {small:g} MB peak (goal ≤ {d['goal']}x: memory independent of "
            f"corpus size): {ratios}.",
        ]
    )


def render(r: dict[str, Any]) -> str:
    mode = "quick (smoke-test sizes: not meaningful as measurements)" if r["quick"] else "full"
    head = [
        "# ablate benchmark",
        f"`ablate bench` run of {r['started']} ({mode}); {seconds(r['wall_s'])} in all. Every "
        "figure is a ratio of measurements taken side by side in this one process (or a "
        "fraction of a peak measured in it), so that the load of a shared machine cancels as "
        "far as it can; absolute times are shown for context only.",
    ]
    loads = [v for pair in r.get("load", {}).values() for v in pair if v is not None]
    cores = r["machine"]["cores"]
    if loads and max(loads) > cores + 0.5:
        head.append(
            f"**Busy machine:** the 1-minute load average reached {max(loads):.1f} on "
            f"{cores} cores during this run (per section, start/end: "
            + ", ".join(f"{k} {x(a, 1)}/{x(b, 1)}" for k, (a, b) in r["load"].items())
            + "). Other processes competed for the CPU; the ratios cancel much of it, "
            "absolute times do not."
        )
    gpu = bool(r["machine"].get("gpu"))
    bodies = {
        "machine": lambda m: _machine(m, r.get("matmul") or {}),
        "overhead": _overhead,
        "speed": lambda rows: _speed(rows, gpu),
        "quality": _quality,
        "efficiency": _efficiency,
        "study": _study,
        "data": _data,
        "gpu_paths": lambda g: _gpu(g, r["machine"].get("gpu")),
    }
    sections: list[Section] = [(k, heading, bodies[k]) for k, heading in HEADINGS.items()]
    if "chaos" in r:  # measured by `ablate bench --chaos`, numbered 6 before section 7 existed
        from ablate.bench.chaos_report import HEADING, section

        chaos = (
            "chaos",
            HEADING,
            lambda c: section(c).removeprefix(HEADING + "\n\n").rstrip("\n"),
        )
        sections.insert(list(HEADINGS).index("data"), chaos)
    return document(head, sections, r)


def write(results: dict[str, Any], out: Path, carry_chaos: bool = True) -> None:
    """``out`` and its JSON; with ``carry_chaos``, section 6 from ``bench_chaos.json`` beside
    it (``ablate bench --chaos`` measures that section on its own)."""
    saved = Path(out).with_name("bench_chaos.json")
    chaos = {"chaos": json.loads(saved.read_text())} if carry_chaos and saved.is_file() else {}
    markdown.write(out, render({**results, **chaos}), results)
