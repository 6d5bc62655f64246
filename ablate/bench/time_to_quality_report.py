"""``reports/gpu/time_to_quality.md`` from what :mod:`ablate.bench.time_to_quality` measured:
every number in it is one of that record's."""

from __future__ import annotations

from typing import Any

from ablate.bench.markdown import num, table

CLOCKS = ("from_launch_s", "loop_s")


def _s(value: float | None, best: float | None = None) -> str:
    if value is not None:
        return f"{value:.1f} s"
    return "never" + (f" (best {best:.4f})" if best is not None else "")


def _ratio(c: dict[str, Any]) -> str:
    if c["ratio"] is None:
        return "n/a"
    text = f"**{c['ratio']:.2f}**"
    if c["nanogpt_range"] and c["ablate"] is not None:
        lo, hi = c["nanogpt_range"]
        text += f" ({c['ablate'] / hi:.2f}-{c['ablate'] / lo:.2f} over nanoGPT's range)"
    return text


def summary_table(cmp: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The two sides and their ratio on both clocks."""
    never = sum(r["step"] is None for r in runs)
    n = cmp["nanogpt"]
    worst = max(x["best_val_loss"] for x in n)
    ablate = f"ablate: median of its {len(runs)} runs (never reached it: {never})"
    if len(n) == 1:
        nano = f"nanoGPT: its 1 run (seed {n[0]['seed']})"
    else:
        nano = (
            f"nanoGPT: median of its {len(n)} runs (seeds {', '.join(str(x['seed']) for x in n)})"
        )
    rows = [
        [ablate, *(_s(cmp[c]["ablate"]) for c in CLOCKS)],
        [nano, *(_nanogpt_cell(cmp[c], worst) for c in CLOCKS)],
        ["ratio ablate / nanoGPT", *(_ratio(cmp[c]) for c in CLOCKS)],
    ]
    return table(["", "from launch", "training loop"], rows)


def _nanogpt_cell(c: dict[str, Any], worst: float) -> str:
    cell = _s(c["nanogpt"], worst)
    if c["nanogpt_range"]:
        lo, hi = c["nanogpt_range"]
        cell += f" (its runs: {lo:.1f}-{hi:.1f} s)"
    return cell


def verdict(cmp: dict[str, Any], goal: float) -> str:
    """The launch clock's ratio against ``goal``, or why there is none."""
    c = cmp["from_launch_s"]
    if c["ratio"] is not None:
        return f"goal ≤ {goal} from launch: {'meets' if c['ratio'] <= goal else 'misses'}"
    if c["nanogpt"] is None:
        return (
            f"goal ≤ {goal} from launch: not decided here, since nanoGPT beside them never "
            "reached the target"
        )
    if c["ablate"] is None:
        return (
            f"goal ≤ {goal} from launch: no median, half of ablate's runs or more never reached it"
        )
    return f"goal ≤ {goal} from launch: n/a"


def headline(r: dict[str, Any]) -> list[str]:
    t, cmp = r["target"], r["registered"]
    n = cmp["nanogpt"]
    lines = [
        "# Time to quality on one GPU: ablate against nanoGPT's own code",
        "",
        f"Target: **{t['value']:.4f}**, the value claim `{t['claim']}` is registered to test "
        f"against (`{t['registration']}`), not one window's nanoGPT run. Each side's time is to "
        "its first evaluation at or below it, on two clocks: **from launch** (its process's "
        "start: start-up, data, model, `torch.compile` and evaluations included) and **the "
        "training loop** (from the end of its first training step, the evaluations between "
        "included).",
        "",
    ]
    if len(n) == 1:
        lines += [
            f"**One nanoGPT run ran beside these runs (seed {n[0]['seed']}): its spread is not "
            "measured, and each ratio below takes that one run as a constant.**",
            "",
        ]
    lines += [summary_table(cmp, r["runs"]), "", verdict(cmp, r["goal"]) + ".", ""]
    return lines


def instead(r: dict[str, Any]) -> list[str]:
    """The same comparison at the loss every nanoGPT run beside them reached (when none reached
    the target), labelled as not the target."""
    other = r.get("instead")
    if not other:
        return []
    n = r["registered"]["nanogpt"]
    bests = ", ".join(f"{x['best_val_loss']:.4f} at iteration {x['best_iter']}" for x in n)
    return [
        f"## At {other['target']:.4f}, the best nanoGPT reached beside them (not the target)",
        "",
        f"nanoGPT beside these runs never reached the registered target (its best: {bests}), "
        "so this window gives no ratio at it. The same clocks at the loss nanoGPT did reach, "
        "for reading only:",
        "",
        summary_table(other, other["runs"]),
        "",
    ]


def run_tables(r: dict[str, Any]) -> list[str]:
    head = [
        "run",
        "seed",
        "status",
        "best val loss",
        "first step at or below the target",
        "its attempt started after launch",
        "from launch",
        "training loop",
        "launch read from",
        "workers",
        "device",
    ]
    rows = []
    for x in r["runs"]:
        gap = x["started"] - x["launched"] if x["launched"] is not None else None
        rows.append(
            [
                x["run_id"],
                x["seed"],
                x["status"],
                num(x["best_val_loss"], "{:.4f}"),
                num(x["step"], "{:,}"),
                num(gap, "{:.1f} s"),
                _s(x["from_launch_s"]),
                _s(x["loop_s"]),
                x["launch_from"] or x["clock_note"] or "n/a",
                num(x["workers"]),
                x["device"],
            ]
        )
    nano_head = [
        "seed",
        "best printed val loss",
        "its iteration",
        "first training step done",
        "first printed at or below the target",
        "from launch",
        "training loop",
        "device",
    ]
    nano = [
        [
            x["seed"],
            f"{x['best_val_loss']:.4f}",
            x["best_iter"],
            num(x["first_step_s"], "{:.1f} s after launch"),
            num(x["iter"], "iteration {:,}"),
            _s(x["from_launch_s"]),
            _s(x["loop_s"]),
            x["device"],
        ]
        for x in r["registered"]["nanogpt"]
    ]
    return [
        "## Each run at the registered target",
        "",
        table(head, rows),
        "",
        table(nano_head, nano),
        "",
    ]


def how(r: dict[str, Any]) -> list[str]:
    """Where each clock comes from, in this record's case."""
    runs, nano = r["runs"], r["registered"]["nanogpt"]
    out = [
        "Both sides ran in one command on one GPU, started together by `scripts/gpu/window.sh`, "
        "so they shared the GPU alike: the ratio compares the two codes under the same "
        "contention. An ablate run's time is its attempt's start plus its `perf/wall_s` at the "
        "evaluation; its first step's end is its `progress.json`'s `first_step`. nanoGPT's "
        "times are the stamps on its printed lines, from the launch of its `train.py`; its first "
        "step's end is its first `iter` line.",
    ]
    if any(x["launch_from"] == "window log" for x in runs):
        out.append(
            f"The ablate runs' launch is not recorded in this store (its attempts predate "
            f"`launched`): it is read from the window's log (`{r['window_log']}`), the line "
            "before `ablate run` was launched, whose time has whole seconds; the start of that "
            "second is taken, so a time from launch here is at most a second longer than it was."
        )
    logged = sorted({x["first_step_from"] for x in nano if x["first_step_from"] != "recorded"})
    if logged:
        out.append(
            "nanoGPT's first training step is read from its stamped log "
            f"({', '.join(f'`{p}`' for p in logged)}: the run's record predates `first_step_s`; "
            "the log printed the same curve)."
        )
    if r["nanogpt_other_runs"]:
        out.append(
            f"{r['nanogpt_other_runs']} other nanoGPT run(s) of `{r['nanogpt_file']}` did not run "
            "beside these runs (by their times) and are left out."
        )
    if r["best_val_loss_is"]:
        out.append(
            "ablate's losses are on its whole validation split; nanoGPT's file says its best "
            f"loss is {r['best_val_loss_is']}."
        )
    out.append(
        "Built by `python -m ablate.bench.time_to_quality` from "
        f"`{r['store']}` and `{r['nanogpt_file']}`."
    )
    return ["## How the clocks were read", "", " ".join(out)]


def render(r: dict[str, Any]) -> str:
    return "\n".join([*headline(r), *instead(r), *run_tables(r), *how(r)]) + "\n"
