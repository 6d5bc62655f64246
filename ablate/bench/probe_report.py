"""The probe's section (``ablate.bench.probe``): one table of the solo, packed and stacked rows,
one of the SDPA kernels that ran, the LSTM's dtype, and the verdict. The same body is
``reports/bench_probe.md``'s (``ablate bench --probe``) and section 6 of ``bench_gpu.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.bench import markdown
from ablate.bench.markdown import Section, columns, document, num

HEADING = "Probe: solo, packed and stacked runs"
MFU_FLOOR = 0.15  # docs/gpu.md: below it, shrink the plan before spending more GPU time
NOT_MEASURED = "not measured (no CUDA)"
COUNTED_ON_CPU = "counted on the CPU"


def row_name(row: dict[str, Any]) -> str:
    """``solo``, ``pack of k`` (k processes) or ``stack of k`` (a group of k)."""
    if row.get("processes", 1) > 1:
        return f"pack of {row['processes']}"
    return "solo" if row["members"] == 0 else f"stack of {row['members']}"


_name = row_name


def _cell(fn, cuda_only: bool = False):
    """A measured cell: "-" on a failed row, ``NOT_MEASURED`` for a CUDA figure on a CPU."""

    def cell(row: dict[str, Any]) -> str:
        if "error" in row:
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
        return COUNTED_ON_CPU if row["_cuda"] and "processes" not in row else "-"

    return cell


def _memory_cell(row: dict[str, Any]) -> str:
    return _memory(row) if "peak_mem_gib" in row else "-"


_RUNS = [
    ("run", _name),
    ("tokens/s (all members)", _cell(lambda r: num(r.get("tokens_per_s")))),
    ("x solo", _cell(_vs_solo("tokens_per_s"))),
    ("MFU", _cell(lambda r: num(r.get("mfu"), "{:.1%}"), cuda_only=True)),
    ("peak memory GiB (per member)", _cell(_memory_cell, cuda_only=True)),
    ("host reads / step", _cell(_counted("host_reads_per_step", "{:.2f}"))),
    ("kernel-launching ops / step", _cell(_counted("ops_per_step", "{:.0f}"))),
    ("ops x solo", _cell(lambda r: _vs_solo("ops_per_step")(r) if "ops_per_step" in r else "-")),
    ("SDPA kernel pinned", _cell(_pinned)),
    ("status", lambda r: r.get("error", "ok")),
]


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


def decision(r: dict[str, Any]) -> str:
    """The verdict (``probe.verdict``: the most tokens/s in all, solo unless another path beats
    it by the margin) and the ``ablate run`` arguments window.sh applies, as one paragraph."""
    broken = [_name(row) for row in r["rows"] if "error" in row]
    lead = (
        "**Verdict.** The path with the most tokens/s in all, solo unless another beats it by "
        "10%; `scripts/gpu/window.sh` applies it to the studies of the same command (stack: "
        "`--set train.stack=auto` where a profile leaves `train.stack` at its default; pack: "
        "`--workers 4 --runs-per-gpu 4`). "
    )
    failed = (
        f"Failed at {r['precision']}: {', '.join(broken)} (the same code as on a GPU: expect "
        "the same failure there). "
        if broken
        else ""
    )
    v = r.get("verdict")
    if not v:
        return lead + failed + "No verdict: the solo row did not run."
    text = (
        f"**{v['choice']}** ({v['row']}: {v['tokens_per_s']:,.0f} tokens/s, "
        f"x{v['x_solo']:.2f} solo){': `' + v['args'] + '`' if v['args'] else ''}."
    )
    if not r["cuda"]:
        text += (
            " On a CPU, at a tiny shape, this verdict only rehearses the window's use of it; "
            "the host reads and kernel-launching operations per step are the counts a GPU "
            "step of the same code makes."
        )
    mfu = [row["mfu"] for row in r["rows"] if row.get("mfu")]
    if mfu and max(mfu) < MFU_FLOOR:
        text += f" Below {MFU_FLOOR:.0%} MFU on every path: shrink the plan before spending more."
    return lead + failed + text


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
        f"and final evaluation cancel){peak}. Host reads and ops per step (`OpCounter`, on a "
        f"CPU only: a GPU step of the same code makes the same counts): the {d - c} steps "
        f"between runs of {c} and {d}, logging at the profile's interval included."
    )
    parts = [intro, columns(_RUNS, rows)]
    if r.get("attention"):
        parts.append(columns(_ATTENTION, r["attention"]))
    if r.get("lstm"):
        parts.append(_lstm(r["lstm"]))
    if not r.get("lstm"):
        parts.append("_The attention kernels and the LSTM's dtype were not reached._")
    return "\n\n".join([*parts, decision(r)])


SECTION: Section = ("stacked", f"## {HEADING}", render)


def write(r: dict[str, Any], out: Path) -> None:
    """``out`` and its JSON: the probe alone (``ablate bench --probe``)."""
    head = [
        "# ablate probe",
        f"Started {r['started']}, {r.get('wall_s', 0) / 60:.1f} min (`ablate bench --probe`).",
    ]
    markdown.write(out, document(head, [SECTION], r), r)
