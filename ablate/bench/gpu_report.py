"""``bench_gpu.md`` (and its JSON), written after every section of ``ablate bench --gpu``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.bench import markdown, probe_report
from ablate.bench.markdown import Section, columns, document, num, pairs

GOALS = {"mfu_gpt2": 0.40, "overhead": 1.05, "packing_k4": 3.0}


def _device(d: dict[str, Any]) -> str:
    peaks = ", ".join(f"{k} {v:.0f}" for k, v in d["peak_table"].items())
    card = f"{d['name']} (compute capability {d['capability']}, {d['memory_gib']:.0f} GiB, "
    rows = [
        ("device", card + f"{d['sms']} SMs)"),
        ("driver", d.get("driver") or "n/a"),
        (
            "torch / CUDA / cuDNN / Triton",
            f"{d['torch']} / {d['cuda']} / {d['cudnn']} / {d.get('triton')}",
        ),
        ("Lightning / Python / CPU cores", f"{d['lightning']} / {d['python']} / {d['cores']}"),
        (
            "dense bf16 peak (the MFU denominator)",
            f"{d['peak_tflops']:.0f} TFLOP/s: {d['peak_source']}",
        ),
        (
            "measured bf16 matmul",
            f"{d['matmul_tflops']:.0f} TFLOP/s ({d['matmul_n']}^3, best of 3)",
        ),
    ]
    return pairs(rows) + f"\n\nPeak table (TFLOP/s, dense bf16, vendor data sheets): {peaks}."


_ATTENTION = [
    ("kernel", lambda r: r["backend"]),
    ("encoding", lambda r: r["pos_encoding"]),
    ("precision", lambda r: r["precision"]),
    ("head dim", lambda r: r["head_dim"]),
    ("rule", lambda r: "runs" if r["predicted_ok"] else "rejected"),
    ("CUDA", lambda r: "ran" if r["ran"] else "error"),
    ("", lambda r: "" if r["agree"] else "**MISMATCH**"),
    ("error", lambda r: (r["error"] or "")[:90]),
]


def _attention(rows: list[dict[str, Any]]) -> str:
    bad = sum(not r["agree"] for r in rows)
    verdict = f"{bad} disagree**" if bad else "all agree** (the plan-time rule)"
    return (
        f"{len(rows)} combinations of pinned SDPA kernel x encoding x precision x head size, "
        f"forward + backward of the model's attention on CUDA; **{verdict} with "
        f"`ablate.accel.kernel_problem`.\n\n" + columns(_ATTENTION, rows)
    )


def _measured(fn):
    """A cell of a measured row (a skipped or failed one shows "-")."""
    return lambda r: "-" if "skipped" in r or "error" in r else fn(r)


_MFU = [
    ("model", lambda r: r["model"]),
    ("compile", lambda r: "yes" if r["compile"] else "no"),
    ("shape", _measured(lambda r: r["shape"])),
    ("params", _measured(lambda r: num(r["params"]))),
    ("attn", _measured(lambda r: r["attn"])),
    ("ms/step", _measured(lambda r: num(r["ms_per_step"], "{:.1f}"))),
    ("tokens/s", _measured(lambda r: num(r["tokens_per_s"]))),
    ("MFU", _measured(lambda r: f"**{r['mfu']:.1%}**")),
    ("peak mem GiB", _measured(lambda r: num(r["peak_mem_gib"], "{:.1f}"))),
    ("note", lambda r: r.get("skipped") or r.get("error", "")[:120]),
]


def _mfu(rows: list[dict[str, Any]]) -> str:
    return (
        "Raw PyTorch loop (`loops.raw_loop`): bf16 autocast, the pinned flash kernel, fused "
        "AdamW, gradient clipping, real batches. MFU = FLOPs/token (6N + attention) x tokens/s "
        f"/ peak. Goal: >= {GOALS['mfu_gpt2']:.0%} for GPT-2 small (llm-foundry 35-42% at "
        "0.76-1B on H100).\n\n" + columns(_MFU, rows)
    )


def _overhead(o: dict[str, Any]) -> str:
    pairs = "; ".join(
        f"{p['ablate_ms']:.2f} / {p['raw_ms']:.2f} ms ({p['order']})" for p in o["pairs"]
    )
    return (
        f"nanoGPT GPU config (6L/384d, 64x256, bf16, flash, fused AdamW, eager), {o['window']} "
        f"timed steps x {o['reps']} pairs. **ablate / raw = {o['ratio_median']:.3f}** (median "
        f"of pairs; best-per-step {o['ratio_best']:.3f}; goal <= {GOALS['overhead']}). Pairs "
        f"(ablate / raw ms per step): {pairs}. Loss trajectories identical: "
        f"{o['parity'].get('identical')} (max diff {o['parity'].get('max_abs_diff')})."
    )


_PACKING = [
    ("k", lambda r: r["k"]),
    ("completed", lambda r: f"{r['completed']}/{r['k']}"),
    ("wall s", lambda r: num(r["wall_s"], "{:.1f}")),
    ("runs/hour", lambda r: num(r["runs_per_hour"])),
    ("vs k=1", lambda r: num(r.get("vs_k1"), "x{:.2f}")),
    ("tokens/s (wall)", lambda r: num(r["tokens_per_s"])),
    ("errors", lambda r: "; ".join(r.get("errors") or [])[:150]),
]


def _packing(rows: list[dict[str, Any]]) -> str:
    return (
        "k separate `ablate train` processes of a 4L/256d model (64x256, bf16, flash, 600 steps + "
        "final eval) started together on the one GPU; wall time includes process start-up. "
        f"Goal: k=4 >= x{GOALS['packing_k4']:.0f} the runs/hour of k=1.\n\n"
        + columns(_PACKING, rows)
    )


def _quality(q: dict[str, Any]) -> str:
    reached = (
        f"reached {q['target']} at step {q['reached_step']} after {q['reached_s']:.0f} s"
        if q["reached"]
        else f"did not reach {q['target']}"
    )
    return (
        f"{q['config']}, trained by `train_run` as a user runs it (its evaluations on 50 val "
        "batches and W&B offline included); weights kept "
        "every 250 steps (off the clock) and scored on the whole validation split. Wall time "
        f"{q['wall_s']:.0f} s for {q['steps']} steps, {q['tokens_per_s']:,.0f} tokens/s. **Final "
        f"full-split val loss {num(q['final_loss'], '{:.4f}')}** (nanoGPT README: 1.4697); "
        f"{reached}." + (" Stopped by the time budget." if q.get("out_of_time") else "")
    )


SECTIONS: list[Section] = [
    ("device", "## 0. Device", _device),
    ("attention", "## 1. Attention kernels vs the plan-time rule", _attention),
    ("mfu", "## 2. Training MFU", _mfu),
    ("overhead", "## 3. Framework overhead on the GPU", _overhead),
    ("packing", "## 4. Packing runs on one GPU", _packing),
    ("quality", "## 5. Time to quality", _quality),
    # the same body as `ablate bench --probe`'s report (bench.probe_report)
    ("stacked", f"## 6. {probe_report.HEADING}", probe_report.render),
]


def write(r: dict[str, Any], out: Path) -> None:
    quick = " (--quick: toy sizes, not measurements)" if r.get("quick") else ""
    head = [
        f"# ablate GPU bench{quick}",
        f"Started {r['started']}, {r.get('wall_s', 0) / 60:.1f} min, one process "
        "(`ablate bench --gpu`).",
    ]
    markdown.write(out, document(head, SECTIONS, r), r)
