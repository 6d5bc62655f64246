"""``bench.md``: the measurements of one ``ablate bench`` run as markdown (plus ``bench.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ablate.bench import markdown, startup, stepcost
from ablate.bench.markdown import Section, bold, columns, document, pairs, seconds, si, table, x
from ablate.bench.studies import render_stacked, render_study
from ablate.claims.stats import mean_ci

OVERHEAD_GOAL = 1.05
PARITY_TOL = 1e-6  # the fairness check: raw and ablate losses this close at every step
HEADINGS = {
    "machine": "## Machine",
    "overhead": "## 1. Framework overhead",
    "speed": "## 2. Model speed",
    "quality": "## 3. Time to quality",
    "efficiency": "## 4. Efficiency",
    "study": "## 5. Study throughput",
    "data": "## 7. Memory vs corpus size",
    "nanogpt": "## 8. nanoGPT's procedure on the reference study",
    "stacked": "## 9. Stacked runs",
    "stepcost": "## 10. Step cost: operations, Python calls and host reads per step",
    "startup": "## 11. Start-up: from `ablate run` to the first training step",
    "gpu_paths": "## GPU paths",
}
SECTIONS = tuple(HEADINGS.values())


def _machine(m: dict[str, Any], mm: dict[str, Any]) -> str:
    rows = [
        ("CPU", m["cpu"]),
        ("usable cores / torch threads", f"{m['cores']} / {m['threads']}"),
        ("GPU", m.get("gpu") or "none"),
        ("platform", m["platform"]),
        ("python / torch / lightning", f"{m['python']} / {m['torch']} / {m['lightning']}"),
        ("x-transformers", m.get("x_transformers") or "not installed"),
    ]
    if mm:
        rate = f"best {si(mm['best'], 'FLOP/s')}, median {si(mm['median'], 'FLOP/s')}"
        rows.append((f"dense matmul ({mm['dtype']}, {mm['n']}x{mm['n']})", rate))
    loads = f"{x(m.get('load_avg_start'), 2)} / {x(m.get('load_avg_end'), 2)}"
    return pairs([*rows, ("load average (1 min) at start / end", loads)])


def _overhead(o: dict[str, Any]) -> str:
    p, best = o["parity"], o["best_ms"]
    verdict = "meets" if o["ratio_median"] <= OVERHEAD_GOAL else "misses"
    pairs = "; ".join(
        f"{q['ablate_ms']:.2f} / {q['raw_ms']:.2f} ({q['order']})" for q in o["pairs"]
    )
    rounding = p["max_abs_diff"] < PARITY_TOL  # the loops reduce the loss in other orders
    same = "identical" if p["identical"] else "equal to float rounding" if rounding else "not equal"
    return (
        "Step time of the full `ablate` training loop ÷ a minimal hand-written PyTorch loop, same "
        f"model init, batches, optimizer and schedule; {o['reps']} A/B pairs in alternating "
        f"order, steady-state window of {o['window']} steps (evaluation off; checkpoints, "
        "logging, grad norms, progress bar and W&B on).\n\n"
        f"- median over pairs: {bold(o['ratio_median'])} (range {x(o['ratio_min'])}–"
        f"{x(o['ratio_max'])}; goal ≤ {OVERHEAD_GOAL}: {verdict})\n"
        f"- best of {o['reps']} runs at every step: {bold(o['ratio_best'])} (blind to stalls "
        "from other processes)\n\n"
        f"ablate / raw ms per step, per pair: {pairs}; best per step {best['ablate']:.2f} / "
        f"{best['raw']:.2f}. Fairness check (first pair): the training losses over all "
        f"{p['steps']} steps are {same} (max |Δ| = {p['max_abs_diff']:.3g}; loss "
        f"{p['first_loss']:.4f} -> {p['last_loss']:.4f})."
    )


def _vs(key: str):
    """A cell of a model's ratio to ours (``speed_ratio``, ``memory_ratio``)."""
    return lambda m: "—" if m["name"] == "ours" else bold(m["r"][key].get(m["name"]))


_SPEED = [
    ("model", lambda m: m["name"]),
    ("params", lambda m: f"{m['params']:,}"),
    ("tokens/s (best)", lambda m: f"{m['tokens_per_s']:,.0f}"),
    ("tokens/s (median)", lambda m: f"{m['tokens_per_s_median']:,.0f}"),
    ("ours ÷ this (speed)", _vs("speed_ratio")),
    ("step memory MiB", lambda m: f"{m['peak_bytes'] / 2**20:.1f}"),
    ("ours ÷ this (memory)", _vs("memory_ratio")),
    ("timed steps", lambda m: m["timed_steps"]),
]


def _speed(rows: list[dict[str, Any]]) -> str:
    parts = [
        "Forward + backward (no optimizer) on one fixed batch; tokens/s is the best step (CPU) "
        "or block (GPU) over rotating repetitions; step memory is the peak of tensor bytes "
        "allocated during a step and alive together (CPU: a dispatch-mode tracker; GPU: "
        "`max_memory_allocated`). Speed ratios > 1: ours is faster; memory ratios < 1: ours "
        "uses less."
    ]
    for r in rows:
        s, models = r["size"], r["models"]
        same = "match exactly" if len({m["params"] for m in models.values()}) == 1 else "differ"
        table_ = columns(_SPEED, [{**m, "name": n, "r": r} for n, m in models.items()])
        parts.append(f"**{s['name']}** ({s['label']}, {s['tokens']:,} tokens/step)\n\n{table_}")
        parts.append(f"Parameter counts {same} (ours {models['ours']['params']:,}).")
    met = all(v >= 1.0 for r in rows for v in r["speed_ratio"].values())
    parts.append(f"Goal (ours at least as fast as both): {'met' if met else 'not met'}.")
    return "\n\n".join(parts)


def _arm(name: str, a: dict[str, Any]) -> str:
    reached = f"at step {a['reached_step']}, {seconds(a['reached_s'])}" if a["reached"] else "not"
    run = f"{a['step_s'] * 1e3:.2f} ms/step, {seconds(a['wall_s'])}"
    return f"{name} {run}, final {a['final_loss']:.4f}, reached {reached}"


def _quality(q: dict[str, Any]) -> str:
    summary = [
        [arm, bold(s["step_ratio"]), bold(s["wall_ratio"]), bold(s["reach_ratio"]), s["reached"]]
        for arm, s in q["summary"].items()
    ]
    rounds = [
        f"- round {i + 1} (target {r['target']:.4f}): "
        + "; ".join(_arm(arm, a) for arm, a in r["arms"].items())
        for i, r in enumerate(q["rounds"])
    ]
    head = ["arm", "per step ÷ nanoGPT", "whole run ÷ nanoGPT", "to target ÷ nanoGPT", "reached"]
    return "\n".join(
        [
            f"ablate's whole training loop (`train_run` as a user runs it; evaluation "
            f"{q['ablate_eval']}) against nanoGPT's training procedure in plain PyTorch "
            f"(`versus.nanogpt_train`; evaluation {q['nanogpt_eval']}) on {q['config']}, same "
            f"initial weights, {len(q['rounds'])} rounds in one process, the order alternating. "
            "Per step: median interval between step starts. To target: the nanoGPT run's final "
            "loss on the whole val split, reached at the earliest weight snapshot (every "
            f"{q['snapshot_every']} steps) from which all later ones score at or below it; times "
            "run from the arm's call (set-up included, imports not).",
            "",
            "Medians over rounds (goals: per step ≤ 1.0, to target ≤ 0.9):",
            "",
            table(head, summary),
            "",
            *rounds,
        ]
    )


_EFFICIENCY = [
    ("workload", lambda w: w["workload"]),
    ("FLOP/token", lambda w: si(w["flops_per_token"], "FLOP")),
    ("tokens/s", lambda w: f"{w['tokens_per_s']:,.0f}"),
    ("achieved", lambda w: si(w["achieved"], "FLOP/s")),
    ("fraction of peak", lambda w: bold(w["fraction"])),
]


def _efficiency(e: dict[str, Any]) -> str:
    return (
        f"Achieved FLOP/s = `model.flops_per_token(seq_len)` (forward + backward; the same for "
        f"the other implementations) x tokens/s, as a fraction of {e['peak_source']} "
        f"({si(e['peak'], 'FLOP/s')}).\n\n" + columns(_EFFICIENCY, e["rows"])
    )


def _gpu(g: dict[str, Any], name: str | None) -> str:
    overrides = ", ".join(f"`{k}={v}`" for k, v in g["overrides"].items())
    if g["present"]:
        return (
            f"GPU present ({name}): ran with {overrides}; section 2 compiled all three models "
            "under bf16 autocast; efficiency is against the dense bf16 peak."
        )
    return (
        "No GPU present: everything above ran on the CPU in fp32. On a GPU the bench runs "
        f"every section with {overrides}, compiles the models of section 2 under bf16 autocast "
        "and reports efficiency against the GPU's dense bf16 peak."
    )


_DATA = [
    ("corpus", lambda r: f"{r['corpus_mb']:g} MB"),
    ("run", lambda r: r["run"]),
    ("peak RssAnon MiB", lambda r: f"{r['peak_rss_anon'] / 2**20:,.0f}"),
    ("wall", lambda r: seconds(r["wall_s"])),
]


def _data(d: dict[str, Any]) -> str:
    small, large = d["sizes_mb"]
    ratios = "; ".join(
        f"{run}: {bold(v, 2)} ({'meets' if v <= d['goal'] else 'misses'})"
        for run, v in d["ratio"].items()
    )
    return (
        "Peak anonymous memory (`RssAnon`, sampled every 50 ms; the memory-mapped tokens are "
        f"not counted) of `ablate train` ({d['steps']} steps of a 1-layer model) on a generated "
        f"{small:g} MB and {large:g} MB corpus, each in a fresh process with a fresh token "
        "cache: first building the cache, then with it built.\n\n"
        f"{columns(_DATA, d['rows'])}\n\n{large:g} MB ÷ {small:g} MB "
        f"peak (goal ≤ {d['goal']}x: memory independent of corpus size): {ratios}."
    )


_NANOGPT = [
    ("seed", lambda r: r["seed"]),
    ("full val split", lambda r: x(r["full_val_loss"], 4)),
    ("nanoGPT's 20-batch estimate", lambda r: x(r["nanogpt_estimate"], 4)),
    ("training", lambda r: seconds(r["train_s"])),
]


def _nanogpt(d: dict[str, Any]) -> str:
    full = [r["full_val_loss"] for r in d["rows"]]
    est = [r["nanogpt_estimate"] for r in d["rows"]]
    lines = [
        f"`ablate bench --section nanogpt`: nanoGPT's training procedure in a plain PyTorch loop "
        f"(random-offset batches, its warmup and cosine; not nanoGPT's own code) at "
        f"`studies/{d['study']}` ({d['profile']} profile), one process, seed after seed.",
        columns(_NANOGPT, d["rows"]),
    ]
    for name, v in (("full val split", full), ("nanoGPT's 20-batch estimate", est)):
        m, lo, hi = mean_ci(v)
        below = sum(y <= 1.88 for y in v)
        lines.append(
            f"{name}: mean {x(m, 4)}, 95% t-interval [{x(lo, 4)}, {x(hi, 4)}], n = {len(v)}; "
            f"at or below nanoGPT's printed 1.88: {below}/{len(v)}"
        )
    return "\n\n".join(lines)


def render(r: dict[str, Any]) -> str:
    mode = "quick (smoke-test sizes: not meaningful as measurements)" if r["quick"] else "full"
    again = ", sections since re-measured alone where they say so" if r.get("notes") else ""
    total = sum(r["section_s"].values()) if r.get("notes") else r["wall_s"]  # one run's wall
    head = [
        "# ablate benchmark",
        f"`ablate bench` run of {r['started']} ({mode}){again}; {seconds(total)} in all. Every "
        "figure is a ratio of measurements taken side by side in one process, so that the "
        "load of a shared machine cancels as far as it can; absolute times are for context.",
    ]
    loads = [v for pair in r.get("load", {}).values() for v in pair if v is not None]
    cores = r["machine"]["cores"]
    if loads and max(loads) > cores + 0.5:
        head.append(
            f"**Busy machine:** the 1-minute load average reached {max(loads):.1f} on "
            f"{cores} cores during this run (per section, start/end: "
            + ", ".join(f"{k} {x(a, 1)}/{x(b, 1)}" for k, (a, b) in r["load"].items())
            + "). The ratios cancel much of it, absolute times do not."
        )
    gpu = r["machine"].get("gpu")
    bodies = {
        "machine": lambda m: _machine(m, r.get("matmul") or {}),
        "overhead": _overhead,
        "speed": _speed,
        "quality": _quality,
        "efficiency": _efficiency,
        "study": render_study,
        "data": _data,
        "nanogpt": _nanogpt,
        "stacked": render_stacked,
        "stepcost": stepcost.render,
        "startup": startup.render,
        "gpu_paths": lambda g: _gpu(g, gpu),
    }
    sections: list[Section] = [(k, heading, bodies[k]) for k, heading in HEADINGS.items()]
    if "chaos" in r:  # measured by `ablate bench --chaos`, numbered 6 before section 7 existed
        from ablate.bench.chaos import HEADING, section

        body = lambda c: section(c).removeprefix(HEADING + "\n\n").rstrip("\n")  # noqa: E731
        sections.insert(list(HEADINGS).index("data"), ("chaos", HEADING, body))
    return document(head, sections, r)


def write(results: dict[str, Any], out: Path, carry_chaos: bool = True) -> None:
    """``out`` and its JSON; with ``carry_chaos``, section 6 from ``bench_chaos.json`` beside
    it (``ablate bench --chaos`` measures that section on its own)."""
    saved = Path(out).with_name("bench_chaos.json")
    chaos = {"chaos": json.loads(saved.read_text())} if carry_chaos and saved.is_file() else {}
    markdown.write(out, render({**results, **chaos}), results)
