"""The probe's section (``ablate.bench.probe``): one table of the solo, packed and stacked rows,
eager and compiled, the goals against solo, the profile of a stack of 8's steps, the stack =
solo check, one table of the SDPA kernels that ran, the LSTM's dtype, the start-up, the plan
and the inductor cache, and the verdicts. The same body is ``reports/bench_probe.md``'s
(``ablate bench --probe``) and section 6 of ``bench_gpu.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.bench import markdown
from ablate.bench.markdown import Section, columns, document, num
from ablate.bench.probe_profile import KINDS

HEADING = "Probe: solo, packed and stacked runs, eager and compiled"
MFU_FLOOR = 0.15  # docs/gpu.md: below it, shrink the plan before spending more GPU time
NOT_MEASURED = "not measured (no CUDA)"
COUNTED_ON_CPU = "counted on the CPU"


def row_name(row: dict[str, Any]) -> str:
    """``solo``, ``pack of k`` (k processes) or ``stack of k`` (a group of k), with
    ``, compiled`` (``train.compile``) or ``, reduce-overhead`` (with CUDA graphs)."""
    if row.get("processes", 1) > 1:
        name = f"pack of {row['processes']}"
    else:
        name = "solo" if row["members"] == 0 else f"stack of {row['members']}"
    mode = row.get("compile_mode")
    return name + ("" if not mode else ", compiled" if mode == "default" else f", {mode}")


_name = row_name


def _cell(fn, cuda_only: bool = False):
    """A measured cell: "-" on a failed row, ``NOT_MEASURED`` for a CUDA figure on a CPU."""

    def cell(row: dict[str, Any]) -> str:
        if "error" in row or "skipped" in row:
            return "-"
        if cuda_only and not row["_cuda"]:
            return NOT_MEASURED
        return fn(row)

    return cell


def _memory(row: dict[str, Any]) -> str:
    return f"{row['peak_mem_gib']:.2f} ({row['peak_mem_per_member_gib']:.2f})"


def _vs_solo(key: str):
    """The row's ``key`` over the solo row's."""

    def cell(row: dict[str, Any]) -> str:
        base = row["_solo"].get(key)
        return num(row[key] / base if row.get(key) and base else None, "x{:.2f}")

    return cell


def _pinned(row: dict[str, Any]) -> str:
    """The summary's ``attn_kernel``; ``auto: <kernel>`` where the probe asked for ``auto``
    (the profile's kernel cannot run here) and the math kernel is the fallback."""
    auto = "auto: " if row.get("attn_backend") == "auto" else ""
    return auto + (row.get("attn_kernel") or "n/a")


def _counted(key: str, fmt: str):
    """A per-step count, measured on a CPU only (the same count on a GPU: docs/gpu.md)."""

    def cell(row: dict[str, Any]) -> str:
        if key in row:
            return num(row[key], fmt)
        counted = "processes" not in row and not row.get("compile_mode")
        return COUNTED_ON_CPU if row["_cuda"] and counted else "-"

    return cell


def _memory_cell(row: dict[str, Any]) -> str:
    return _memory(row) if "peak_mem_gib" in row else "-"


def _compile_s(row: dict[str, Any]) -> str:
    return num(row.get("compile_s"), "{:.1f}") if row.get("compile_mode") else "-"


def _own_clock(row: dict[str, Any]) -> str:
    """The runs' own tokens/s (their summaries, read after the sync) over the wall clock's."""
    own, wall = row.get("summary_tokens_per_s"), row.get("tokens_per_s")
    return num(own / wall if own and wall else None, "x{:.2f}")


def _status(row: dict[str, Any]) -> str:
    if "skipped" in row:
        return f"not run: {row['skipped']}"
    return row.get("error", "ok")


_RUNS = [
    ("run", _name),
    ("tokens/s (all members)", _cell(lambda r: num(r.get("tokens_per_s")))),
    ("x solo", _cell(_vs_solo("tokens_per_s"))),
    ("tokens/s per member", _cell(lambda r: num(r.get("tokens_per_s_per_member")))),
    ("ms / step", _cell(lambda r: num(r.get("step_ms"), "{:.1f}"))),
    ("own clock / wall", _cell(_own_clock)),
    ("MFU", _cell(lambda r: num(r.get("mfu"), "{:.1%}"), cuda_only=True)),
    ("peak memory GiB (per member)", _cell(_memory_cell, cuda_only=True)),
    ("compile s", _cell(_compile_s)),
    ("host reads / step", _cell(_counted("host_reads_per_step", "{:.2f}"))),
    ("kernel-launching ops / step", _cell(_counted("ops_per_step", "{:.0f}"))),
    ("ops x solo", _cell(lambda r: _vs_solo("ops_per_step")(r) if "ops_per_step" in r else "-")),
    ("SDPA kernel pinned", _cell(_pinned)),
    ("probe s", lambda r: num(r.get("probe_s"), "{:.1f}")),
    ("status", _status),
]
GOALS = (("stack of 8", 3.0), ("stack of 8, compiled", 4.0))
"""The targets at the reference gpu shape: tokens/s over solo's."""
SOLO_STEP_MS = 15.0  # the goal for a solo step, nanoGPT's compiled ~15 ms


def _solo_path(row: dict[str, Any]) -> bool:
    return not row["members"] and row.get("processes", 1) == 1


def goals(rows: list[dict[str, Any]]) -> str:
    """One line per goal: ``stack of 8 vs solo: x2.78 (goal >= 3)``, and solo's step."""
    by_name = {_name(row): row for row in rows}
    lines = []
    for name, goal in GOALS:
        solo, rate = by_name.get("solo", {}).get("tokens_per_s"), by_name.get(name, {})
        rate = rate.get("tokens_per_s")
        got = f"x{rate / solo:.2f}" if solo and rate else "not measured"
        lines.append(f"- {name} vs solo: {got} (goal ≥ {goal:g})")
    step = min((r["step_ms"] for r in rows if _solo_path(r) and r.get("step_ms")), default=None)
    got = f"{step:.1f} ms" if step else "not measured"
    lines.append(f"- the fastest solo step: {got} (goal ≤ {SOLO_STEP_MS:g} ms)")
    return "\n".join(lines)


def _ops(ops: dict[str, int]) -> str:
    """The aten SDPA ops of one step, e.g. ``flash_attention_for_cpu x2``."""
    if not ops:
        return "none seen"
    return ", ".join(f"{k.removeprefix('_scaled_dot_product_')} x{v}" for k, v in ops.items())


def _kernels(row: dict[str, Any]) -> str:
    if row.get("kernels") is None:
        return NOT_MEASURED
    return "; ".join(row["kernels"]) or "none named for attention (math: matmuls + softmax)"


_ATTENTION = [
    ("run", _name),
    ("attention", lambda r: r["case"]),
    ("SDPA kernel pinned", lambda r: r.get("pinned", "-")),
    ("aten SDPA ops that ran, one step", lambda r: r.get("error") or _ops(r["ops"])),
    ("CUDA kernels", lambda r: "-" if "error" in r else _kernels(r)),
]


def _count(key: str):
    """A count over the profiled steps: None on a CPU for CUDA's copies and syncs."""
    return lambda p: NOT_MEASURED if p.get(key) is None else str(p[key])


_PROFILE = [
    ("profiled steps", lambda p: p["_name"]),
    ("wall ms / step", lambda p: num(p["wall_ms_per_step"], "{:.1f}")),
    ("busy %", lambda p: num(p["busy_pct"], "{:.0f}")),
    *(
        (f"{kind} ms / step", lambda p, k=kind: num(p["kernel_ms_per_step"][k], "{:.2f}"))
        for kind in KINDS
    ),
    ("host reads", _count("host_reads")),
    ("device-to-host copies", _count("dtoh_copies")),
    ("syncs", _count("syncs")),
]


def profile(r: dict[str, Any]) -> str:
    """The table of the profiled steps (eager, compiled) and what it measured."""
    done = {
        k: p for k, p in r.get("profile", {}).items() if "error" not in p and "skipped" not in p
    }
    not_run = [
        f"{name}: {p.get('error') or 'not run: ' + p['skipped']}"
        for name, p in r.get("profile", {}).items()
        if name not in done
    ]
    if not done:
        return "_The profile: " + ("; ".join(not_run) or "not reached") + "._"
    first = next(iter(done.values()))
    what = (
        "CUDA kernels (busy: the union of their intervals)"
        if first["activity"] == "cuda"
        else "CPU operations' own time (activity: cpu; busy: their time; on CUDA these are kernels)"
    )
    lead = (
        f"Profile (`torch.profiler`, in process): {first['steps']} training steps of a stack "
        f"of {first['members']} (`train_group`'s loop, logging included), after a few "
        f"unrecorded ones; {what}; time by kind of kernel per step, counts over the steps."
    )
    items = [p | {"_name": name} for name, p in done.items()]
    tail = f"\n\nNot profiled: {'; '.join(not_run)}." if not_run else ""
    return lead + "\n\n" + columns(_PROFILE, items) + tail


def equal_line(e: dict[str, Any] | None) -> str:
    """The stack = solo check as one line."""
    if not e:
        return "Stack = solo: not reached."
    if "error" in e or "skipped" in e:
        return f"Stack = solo: {e.get('error') or 'not run: ' + e['skipped']}."
    verdict = "ok" if e["ok"] else "**DIFFERS**"
    missing = f"; logged on one side only: {', '.join(e['missing'])}" if e["missing"] else ""
    return (
        f"Stack = solo: {verdict}, max |diff| {e['max_abs_diff']:.2g} (relative "
        f"{e['max_rel_diff']:.2g}, tolerance {e['rtol']:g}) over {e['compared']} logged losses "
        f"of a stack of {e['members']} and its solo runs, {e['steps']} steps at dropout 0 under "
        f"bf16-mixed{missing}."
    )


def setting_line(r: dict[str, Any]) -> str:
    """Start-up, plan and inductor cache in one paragraph."""
    up, plan, cache = r.get("startup", {}), r.get("plan", {}), r.get("inductor_cache", {})
    warm = f", CUDA warm-up run {up['warmup_s']:.1f} s" if up.get("warmup_s") else ""
    return (
        f"Start-up: the process was {num(up.get('process_s'), '{:.1f}')} s old when the probe "
        f"began{warm}. Plan: {num(plan.get('planned_s'), '{:.0f}')} s at the H200's rates, "
        f"and {num(plan.get('if_time_s'), '{:.0f}')} s more for the rows run only if time is "
        f"left, when the time left of the budget ({num(plan.get('seconds'), '{:.0f}')} s) holds "
        f"their plan at the probe's pace; took {num(r.get('wall_s'), '{:.0f}')} s. Inductor's "
        f"cache: `{cache.get('dir', 'n/a')}` ({cache.get('source', 'n/a')}; FX graph cache "
        f"{'on' if cache.get('fx_graph_cache') else 'off'}): the studies after the probe reuse "
        "its kernels."
    )


def _lstm(lstm: dict[str, Any]) -> str:
    what = (
        f"`nn.LSTM` returns **{lstm['lstm']}** (logits {lstm['logits']})"
        if "error" not in lstm
        else lstm["error"]
    )
    return (
        f"LSTM (the architecture study's lstm arm: {lstm['shape'][0]} layers, width "
        f"{lstm['shape'][1]}), one forward "
        f"under {lstm['precision']} autocast: {what}. CUDA's autocast runs the cuDNN LSTM in "
        "fp16 whatever dtype it was given, with no loss scaler under bf16-mixed: float16 here "
        "means the arm does not train at its labelled precision."
    )


def _one(v: dict[str, Any] | None) -> str:
    """A verdict as ``**pack** (pack of 4: 250,000 tokens/s, x2.50 solo): `args`.``"""
    if not v:
        return "none: the solo row did not run."
    args = f": `{v['args']}`" if v["args"] else " (no arguments)"
    text = f"**{v['choice']}** ({v['row']}: {v['tokens_per_s']:,.0f} tokens/s, "
    text += f"x{v['x_solo']:.2f} solo){args}."
    for m in v.get("measured_only", []):
        keys = ", ".join(f"`{k}`" for k in m["changes_run_id"])
        text += (
            f" Faster but measured only: {m['row']} (x{m['x_solo']:.2f} solo), since {keys} "
            "is part of the run id: applied, it would train other runs than the registered ones."
        )
    return text


def decision(r: dict[str, Any]) -> str:
    """The verdicts (``probe.verdict``: the most tokens/s in all, solo unless another path beats
    it by the margin, among the rows whose arguments keep run ids) and the ``ablate run``
    arguments window.sh applies, as one paragraph."""
    broken = [_name(row) for row in r["rows"] if "error" in row]
    lead = (
        "**Verdict.** The path with the most tokens/s in all, solo unless another beats it by "
        "10%, among the rows whose arguments leave run ids as they are; "
        "`scripts/gpu/window.sh` applies it to the studies of the same command (stack: "
        "`--set train.stack=auto`; pack: `--workers 4 --runs-per-gpu 4`), and the **unstacked** "
        "verdict, the best of the rows that do not stack, to the studies whose profile pins "
        "`train.stack`. "
    )
    failed = (
        f"Failed at {r['precision']}: {', '.join(broken)} (the same code as on a GPU: expect "
        "the same failure there). "
        if broken
        else ""
    )
    text = f"All rows: {_one(r.get('verdict'))} Unstacked: {_one(r.get('unstacked'))}"
    if not r["cuda"]:
        text += (
            " On a CPU, at a tiny shape, these verdicts only rehearse the window's use of them; "
            "the host reads and kernel-launching operations per step are the counts a GPU "
            "step of the same code makes."
        )
    mfu = [row["mfu"] for row in r["rows"] if row.get("mfu")]
    if mfu and max(mfu) < MFU_FLOOR:
        text += f" Below {MFU_FLOOR:.0%} MFU on every path: shrink the plan before spending more."
    return lead + failed + text


def _eval_every(rows: list[dict[str, Any]]) -> str:
    return str(next((row["eval_every"] for row in rows if row.get("eval_every")), "n/a"))


def render(r: dict[str, Any]) -> str:
    """The section's body."""
    solo = next((row for row in r["rows"] if _name(row) == "solo"), {})
    rows = [row | {"_cuda": r["cuda"], "_solo": solo} for row in r["rows"]]
    (a, b), (c, d) = r["timed_window"], r["count_window"]
    peak = (
        f"; MFU against {r['peak_tflops']:.0f} TFLOP/s dense bf16 ({r['peak_source']})"
        if r["cuda"]
        else ""
    )
    tiny = " at a tiny shape" if r["tiny"] else ""
    intro = (
        f"{r['device']}. The reference study's gpu profile{tiny}: "
        f"{r['shape']}, **{r['precision']}**. Solo: `train_run` (Lightning); pack: that many "
        "processes at once, each training solo runs, started together (tokens/s summed); "
        "stack: `train_group`; each into a temporary store, seeds 0..k-1, pseudo-random text. "
        f"Tokens/s: the {b - a} steps between runs of {a} and {b} steps (wall clock, set-up "
        "and final evaluation cancel); a compiled row (`train.compile`; reduce-overhead: with "
        f"CUDA graphs) compiles in a run of {a} steps before them, whose extra wall time over "
        f"the run of {a} is its compile s{peak}; a reduce-overhead row also validates every "
        f"{_eval_every(r['rows'])} steps (its graphs replayed across evaluation batches), inside "
        "its tokens/s. Own clock / wall: the runs' own tokens/s (their summaries) over the "
        "wall clock's; probe s: the row's seconds in the probe. Host reads and ops per step "
        "(`OpCounter`, on a CPU only, eager rows: a GPU step of the same code makes the same "
        f"counts): the {d - c} steps between runs of {c} and {d}, logging at the profile's "
        "interval included."
    )
    parts = [intro, columns(_RUNS, rows), goals(r["rows"]), profile(r), equal_line(r.get("equal"))]
    if r.get("attention"):
        parts.append(columns(_ATTENTION, r["attention"]))
    if r.get("lstm"):
        parts.append(_lstm(r["lstm"]))
    if not r.get("lstm"):
        why = (r.get("kernels") or {}).get("error") or "not reached"
        parts.append(f"_The attention kernels and the LSTM's dtype: {why}._")
    return "\n\n".join([*parts, setting_line(r), decision(r)])


SECTION: Section = ("stacked", f"## {HEADING}", render)


def write(r: dict[str, Any], out: Path) -> None:
    """``out`` and its JSON: the probe alone (``ablate bench --probe``)."""
    head = [
        "# ablate probe",
        f"Started {r['started']}, {r.get('wall_s', 0) / 60:.1f} min (`ablate bench --probe`).",
    ]
    markdown.write(out, document(head, [SECTION], r), r)
