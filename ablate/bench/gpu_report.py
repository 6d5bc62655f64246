"""``bench_gpu.md``: the results of ``ablate bench --gpu`` as markdown (plus ``bench_gpu.json``).

Written after every section, so a section that fails (or a killed process) leaves the earlier
sections on disk; a failed section shows its error in place of its table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ablate.bench import markdown
from ablate.bench.markdown import Section, document, num, table

GOALS = {"mfu_gpt2": 0.40, "overhead": 1.05, "packing_k4": 3.0}


def _device(d: dict[str, Any]) -> str:
    rows = [
        [
            "device",
            f"{d['name']} (compute capability {d['capability']}, "
            f"{d['memory_gib']:.0f} GiB, {d['sms']} SMs)",
        ],
        ["driver", d.get("driver") or "n/a"],
        [
            "torch / CUDA / cuDNN / Triton",
            f"{d['torch']} / {d['cuda']} / {d['cudnn']} / {d.get('triton')}",
        ],
        ["Lightning / Python / CPU cores", f"{d['lightning']} / {d['python']} / {d['cores']}"],
        [
            "dense bf16 peak (the MFU denominator)",
            f"{d['peak_tflops']:.0f} TFLOP/s: {d['peak_source']}",
        ],
        [
            "measured bf16 matmul",
            f"{d['matmul_tflops']:.0f} TFLOP/s ({d['matmul_n']}^3, best of 3 blocks)",
        ],
    ]
    peaks = ", ".join(f"{k} {v:.0f}" for k, v in d["peak_table"].items())
    return (
        table(["", ""], rows)
        + f"\n\nPeak table (TFLOP/s, dense bf16, vendor data sheets): {peaks}."
    )


def _attention(rows: list[dict[str, Any]]) -> str:
    bad = [r for r in rows if not r["agree"]]
    head = (
        f"{len(rows)} combinations of pinned SDPA kernel x encoding x precision x head size, "
        "forward + backward of the model's attention on CUDA; **"
        + (
            f"{len(bad)} disagree** with `ablate.accel.kernel_problem`"
            if bad
            else "all agree** with `ablate.accel.kernel_problem` (the plan-time rule)"
        )
        + "."
    )
    body = [
        [
            r["backend"],
            r["pos_encoding"],
            r["precision"],
            r["head_dim"],
            "runs" if r["predicted_ok"] else "rejected",
            "ran" if r["ran"] else "error",
            "" if r["agree"] else "**MISMATCH**",
            (r["error"] or "")[:90],
        ]
        for r in rows
    ]
    return (
        head
        + "\n\n"
        + table(["kernel", "encoding", "precision", "head dim", "rule", "CUDA", "", "error"], body)
    )


def _mfu(rows: list[dict[str, Any]]) -> str:
    body = []
    for r in rows:
        if "skipped" in r or "error" in r:
            body.append(
                [
                    r["model"],
                    "yes" if r["compile"] else "no",
                    *["-"] * 7,
                    r.get("skipped") or r.get("error", "")[:120],
                ]
            )
            continue
        body.append(
            [
                r["model"],
                "yes" if r["compile"] else "no",
                r["shape"],
                num(r["params"]),
                r["attn"],
                num(r["ms_per_step"], "{:.1f}"),
                num(r["tokens_per_s"]),
                f"**{r['mfu']:.1%}**",
                num(r["peak_mem_gib"], "{:.1f}"),
                "",
            ]
        )
    note = (
        "Raw PyTorch loop (`loops.raw_loop`): bf16 autocast, the pinned flash kernel (efficient "
        "for ALiBi), fused AdamW, gradient clipping, real batches from the data module. MFU = "
        "FLOPs/token (6N + attention) x tokens/s / peak. Goal: >= "
        f"{GOALS['mfu_gpt2']:.0%} for GPT-2 small (llm-foundry 35-42% at 0.76-1B on H100)."
    )
    return (
        note
        + "\n\n"
        + table(
            [
                "model",
                "compile",
                "shape",
                "params",
                "attn",
                "ms/step",
                "tokens/s",
                "MFU",
                "peak mem GiB",
                "note",
            ],
            body,
        )
    )


def _overhead(o: dict[str, Any]) -> str:
    pairs = "; ".join(
        f"{p['ablate_ms']:.2f} / {p['raw_ms']:.2f} ms ({p['order']})" for p in o["pairs"]
    )
    attribution = "; ".join(
        f"{a['kind']}: {a['extra_ms_per_step']:+.2f} ms over {a['steps']} steps"
        for a in o["attribution"]
    )
    return (
        "nanoGPT GPU config (6L/384d, 64x256, bf16, flash, fused AdamW, eager), "
        f"{o['window']} timed "
        f"steps x {o['reps']} pairs. **ablate / raw = {o['ratio_median']:.3f}** (median of pairs; "
        f"best-per-step {o['ratio_best']:.3f}; goal <= {GOALS['overhead']}). Pairs (ablate / raw "
        f"ms per step): {pairs}. Where the extra time goes: {attribution}. Loss trajectories "
        f"identical: {o['parity'].get('identical')} (max diff {o['parity'].get('max_abs_diff')})."
    )


def _packing(rows: list[dict[str, Any]]) -> str:
    body = [
        [
            r["k"],
            f"{r['completed']}/{r['k']}",
            num(r["wall_s"], "{:.1f}"),
            num(r["runs_per_hour"]),
            num(r.get("vs_k1"), "x{:.2f}"),
            num(r["tokens_per_s"]),
            num(r["in_run_tokens_per_s"]),
            num(r["gpu_util_mean"], "{:.0f}%"),
            "; ".join(r.get("errors") or [])[:150],
        ]
        for r in rows
    ]
    return (
        "k separate `ablate train` processes of a 4L/256d model (64x256, bf16, flash, 600 steps + "
        "final eval) started together on the one GPU; wall time includes process start-up. "
        f"Goal: k=4 >= x{GOALS['packing_k4']:.0f} the runs/hour of k=1.\n\n"
        + table(
            [
                "k",
                "completed",
                "wall s",
                "runs/hour",
                "vs k=1",
                "tokens/s (wall)",
                "tokens/s (in-run sum)",
                "GPU busy (nvidia-smi)",
                "errors",
            ],
            body,
        )
    )


def _quality(q: dict[str, Any]) -> str:
    reached = (
        f"reached {q['target']} at step {q['reached_step']} after {q['reached_wall_s']:.0f} s"
        if q.get("reached")
        else f"did not reach {q['target']} on the 50-batch subset"
    )
    return (
        f"{q['config']}. Wall time of training (evaluations included): {q['fit_wall_s']:.0f} s "
        f"({q['train_s']:.0f} s training, {q['eval_s']:.0f} s evaluation); {q['steps']} steps, "
        f"{q['tokens_per_s']:,.0f} tokens/s. **Final full-split val loss "
        f"{num(q['final_val_loss'], '{:.4f}')}** (nanoGPT README: 1.4697); {reached}."
        + (" Stopped by the time budget." if q.get("out_of_time") else "")
        + "\n\n"
        + table(
            ["step", "val loss (subset)"], [[e["step"], f"{e['val_loss']:.4f}"] for e in q["evals"]]
        )
    )


SECTIONS: list[Section] = [
    ("device", "## 0. Device", _device),
    ("attention", "## 1. Attention kernels vs the plan-time rule", _attention),
    ("mfu", "## 2. Training MFU", _mfu),
    ("overhead", "## 3. Framework overhead on the GPU", _overhead),
    ("packing", "## 4. Packing runs on one GPU", _packing),
    ("quality", "## 5. Time to quality", _quality),
]


def render(r: dict[str, Any]) -> str:
    head = [
        "# ablate GPU bench"
        + (" (--quick: toy sizes, not measurements)" if r.get("quick") else ""),
        f"Started {r['started']}, {r.get('wall_s', 0) / 60:.1f} min, "
        "one process (`ablate bench --gpu`).",
    ]
    return document(head, SECTIONS, r)


def write(r: dict[str, Any], out: Path) -> None:
    markdown.write(out, render(r), r)
