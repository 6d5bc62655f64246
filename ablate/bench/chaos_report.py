"""``bench_chaos.md`` and the crash-safety section of ``bench.md``, from ``run_chaos``'s results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.bench.markdown import seconds, table, upsert, write

HEADING = "## 6. Crash safety (`ablate bench --chaos`)"


def _runs_per_min(r: dict[str, Any], n: int) -> float | None:
    wall = r["undisturbed"]["wall_s"]
    return n / wall * 60 if wall else None


def _table(executors: dict[str, Any]) -> str:
    """One row per executor: undisturbed against under chaos, and the must-be-zero counts."""
    rows = []
    for name, r in executors.items():
        calm, c = r["undisturbed"], r["chaos"]
        agree = c["agreement"]
        diff = agree["max_abs_diff"]
        rows.append(
            [
                name,
                seconds(calm["wall_s"]),
                seconds(c["wall_s"]),
                f"{c['wall_s'] / calm['wall_s']:.2f}",
                c["commands"],
                f"{c['killed']['worker']} / {c['killed']['driver']}",
                len(c["lost"]),
                len(c["twice"]),
                len(c["stuck"]),
                c["left_behind"],
                f"{c['resumed']} ({c['starts']} starts)",
                "n/a"
                if diff is None
                else f"{diff:.1e} ({agree['within_1e-4']}/{agree['compared']})",
            ]
        )
    header = [
        "executor",
        "undisturbed",
        "under chaos",
        "× wall",
        "commands",
        "killed (workers / drivers)",
        "lost",
        "twice",
        "stuck",
        "left behind",
        "runs resumed",
        "max abs Δ final loss vs undisturbed (runs ≤ 1e-4)",
    ]
    return table(header, rows)


def section(results: dict[str, Any]) -> str:
    """The section's markdown: one row per executor, then throughput and what was checked."""
    plan, n = results["plan"], results["runs"]
    kills = f"{plan['worker_kills']} worker and {plan['driver_kills']} driver kills"
    lines = [
        HEADING,
        "",
        f"A {n}-run tiny study ({plan['max_steps']} steps, a checkpoint every 20) trained by "
        f"the real CLI with {plan['workers']} local workers, and on a local Ray cluster "
        f"(`ray start --head --num-cpus {plan['workers']}`, then `--ray-address`), once "
        f"undisturbed and once while a thread `kill -9`s ({kills}, one every "
        f"{plan['interval_s'][0]:.0f}-{plan['interval_s'][1]:.0f} s, seeded) and the same "
        "command is started again whenever the driver is gone, until the store says every run "
        "finished. Counted from the store and /proc: *lost* (not finished), *twice* (finished "
        "by two attempts, or started again after finishing; every summary read each 0.2 s), "
        "*stuck* (lease still held once our processes are gone), *left behind* (processes of "
        "a killed driver alive 15 s later). The first four must be 0.",
        "",
    ]
    if results.get("quick"):
        lines += ["**--quick: toy sizes, the numbers measure nothing.**", ""]
    lines += [_table(results["executors"]), ""]
    ex = results["executors"]
    if "local" in ex and "ray" in ex:
        local, ray = _runs_per_min(ex["local"], n), _runs_per_min(ex["ray"], n)
        if local and ray:
            lines += [
                f"Study throughput, undisturbed: local {local:.1f} runs/min, Ray {ray:.1f} "
                f"runs/min (Ray ÷ local {ray / local:.2f}). On one machine Ray only adds its "
                "per-task overhead; it pays when the runs need more machines than one.",
                "",
            ]
    lines += [
        "Why chaos costs the two executors differently: a killed local worker breaks the whole "
        "pool (Python's `concurrent.futures`), so the other workers' runs stop as well and "
        "resume from their checkpoints in a fresh pool, which pays the workers' start-up "
        "(importing torch) again; a killed Ray task is retried alone. A killed driver costs "
        "both a new command.",
        "",
    ]
    bad = failures(results)
    lines.append("**Result: " + ("FAILED, " + "; ".join(bad) if bad else "nothing lost") + ".**")
    start, end = results.get("load_avg_start"), results.get("load_avg_end")
    if end is not None:
        cores = results.get("cores") or "?"
        load = (
            f"{start:.1f} at the start, {end:.1f} at the end"
            if start is not None
            else f"{end:.1f} at the end"
        )
        lines += ["", f"1-minute load average: {load} ({cores} cores)."]
    if results.get("background"):  # noted by whoever ran it: what else the machine did
        lines[-1] += f" Running beside the bench: {results['background']}."
    return "\n".join(lines) + "\n"


def write_chaos(results: dict[str, Any], out: Path) -> None:
    """``out`` (markdown), ``out.json``, and the section in ``bench.md`` beside ``out``."""
    text = section(results)
    write(out, "# ablate bench --chaos\n\n" + text.removeprefix(HEADING + "\n\n"), results)
    if not results.get("quick"):  # a smoke run never replaces the measured section
        upsert(out.parent / "bench.md", text)


def failures(results: dict[str, Any]) -> list[str]:
    """Every must-be-zero count that is not zero, as text."""
    bad = []
    for name, r in results["executors"].items():
        c = r["chaos"]
        for key in ("lost", "twice", "stuck"):
            if c[key]:
                bad.append(f"{name}: {key} {len(c[key])} ({', '.join(c[key][:3])})")
        if c["left_behind"]:
            bad.append(f"{name}: {c['left_behind']} processes left behind by killed drivers")
    return bad
