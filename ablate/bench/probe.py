"""The probe: ``ablate bench --probe`` (and section 6 of ``ablate bench --gpu``).

The first GPU command of a window (docs/gpu.md) decides, for the studies of that same command,
how their runs train: one at a time (solo), stacked (``train.stack``) or packed as processes
(``--workers 4 --runs-per-gpu 4``). It measures, at the reference study's gpu shape
(6L/6H/384d, ctx 256, batch 64, dropout 0.2, bf16-mixed), the rows of ``ROWS`` in this order,
so that a probe cut by its time limit keeps the most useful ones:

* solo: runs trained by ``train_run`` into a temporary store, as ``ablate run`` trains them;
* pack of ``PACK``: that many processes at once, each training solo runs
  (:mod:`ablate.bench.probe_pack`), their tokens/s summed;
* stacks of 1, 4 and 8: stacked groups through ``train_group`` (the group's loop, the one
  AdamW path), the narrowest entry point a study's stacked runs take;
* then, after the attention kernels and the LSTM's dtype (below), the compiled rows: solo and
  a stack of 8 under ``train.compile``, and on CUDA a stack of 8 under
  ``train.compile_mode: reduce-overhead`` (CUDA graphs). Each compiles in a warm-up run of its
  own before its two timed runs (``probe_runs.timed_runs``): tokens/s exclude compiling, which
  is a column of its own.

Each row's tokens/s: two runs of ``TIMED`` steps, the extra steps' tokens (all members or
processes) over the extra wall time. Each run ends synchronized (its final evaluation reads the
loss), so set-up, final evaluation and checkpoint cancel. MFU = the summary's
``flops_per_token`` x tokens/s / the dense bf16 peak (``machine.GPU_BF16_PEAK``, else a measured
matmul); peak memory from ``torch.cuda.max_memory_allocated`` over the longer run.

Two verdicts (:func:`verdict`), each the row with the most tokens/s by ``MARGIN`` over solo and
the ``ablate run`` arguments that take it (:func:`row_args`): ``verdict`` over every row, and
``unstacked`` over the rows that do not stack (solo, pack, compiled solo), for studies whose
profile pins ``train.stack`` (the reference's gpu profile pins 1). ``scripts/gpu/window.sh``
reads both from the JSON. A row whose arguments would change the run ids is measured and shown
but never a verdict: a window's runs must keep the run ids their registrations name. None does
today (``train.stack``, ``train.compile`` and ``train.compile_mode`` are how runs train, in no
run id); the check is on the probe's own config, not assumed. The JSON
and the report are written after every row, so a cut probe leaves the verdicts of the rows it
finished.

On a CPU it also counts kernel-launching operations and host reads per step of the eager rows
(``training.opcount.OpCounter`` around runs of two lengths, the difference per step; the lengths
are whole log intervals of the profile): the count is the same on a GPU, so it is measured where
it costs nothing, not in the GPU's time budget. The attention table says which SDPA kernel ran
(:mod:`ablate.bench.probe_kernels`); the LSTM line gives the dtype of the architecture study's
lstm arm under bf16-mixed autocast.

Its cost on a GPU, at the GPU pilot's H200 rates (docs/gpu.md has the table): a solo step
16.8 ms; a stacked step of the old stacked path 42 ms + 7 ms per member (an upper bound for the
model of k members, whose host work is a solo step's); 2 s of set-up a run, 3 s a group of 4,
4 s of 8; each row's runs of 5 and 55 steps (60 steps). Start-up and CUDA's warm-up ~13 s,
solo 60 x 16.8 ms + 2 x 2 s ~5 s, pack ~16 s (its processes' own start-up), stacks of 1, 4 and
8 60 x 49, 70 and 98 ms + 2 x 2, 3 and 4 s ~7, ~10 and ~14 s: the eager rows end by ~65 s (by
~57 s at the rates the stacked model's goals allow: a stack of 8 at 3x solo is 45 ms a step),
the attention table and the LSTM by ~69 s. Compiling costs what nanoGPT's compile of this model
cost in the pilot (16 s its training graph, 17 s its evaluation graph, cold caches): the
compiled solo row ~40 s (33 s compiling, 3 runs), the compiled stack of 8 ~38 s (20 s: new
shapes, dynamo and inductor warm), reduce-overhead ~28 s (10 s: Triton's kernels cached): the
whole probe ~175 s, inside the window's ``PROBE_SECONDS`` (180). A limit of 60 s keeps solo,
pack and the stacks of 1 and 4; one of 70 s every eager row and the attention table.

The data is a fixed pseudo-random text of tinyshakespeare's 65 characters written to a
temporary file: the probe measures speed, not quality, so it needs no dataset on the machine
(a lent GPU machine has no network), and the same text gives the same token-cache entry.

Without CUDA it runs the same code at a tiny shape (``CPU_SHAPE``, ``CPU_TIMED``) in under a
minute on two cores, and the CUDA-only figures (MFU, peak memory, CUDA kernel names) read "not
measured (no CUDA)": a test runs it so its first run on a GPU is not its first run. Its compiled
rows there (inductor's C++ on a CPU takes minutes) run only with ``compiled=True``
(``ablate bench --probe --compiled``); CUDA graphs need CUDA. A row that fails (a run ending
``failed``, an exception) keeps its place in the table with the error's first line: the probe
goes on with the next row.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ablate.bench.probe_kernels import attention_rows, lstm_dtype, with_kernel
from ablate.bench.probe_report import row_name
from ablate.bench.probe_runs import (
    CHARS,
    PROFILE_PRECISION,
    failed,
    failure,
    run_length,
    timed_runs,
    train,
)
from ablate.config import build_config, flatten
from ablate.training.opcount import OpCounter

PROFILE = "gpu"  # of the reference study (bench.loops.REFERENCE_STUDY)
PACK = 4  # the packed row: 4 processes on the device at once, each training solo runs
MARGIN = 1.1
"""A verdict leaves solo only for a path this much faster (tokens/s): below it, noise."""
# the timed runs' lengths: tokens/s from the steps between them (50 steps of the gpu shape:
# 0.8 s solo on an H200, far above the run-to-run noise of set-up); 5 steps first: CUDA's lazy
# initialisation is in the warm-up run, a compiled row's compiling in its own warm-up run
TIMED, CPU_TIMED = (5, 55), (10, 30)
WARMUP_STEPS = 5  # one short run first on CUDA: its lazy initialisation is not in a row
# a shape a 2-core CPU trains every row of in seconds; the probe's CPU figures check the probe
CPU_SHAPE: dict[str, Any] = {
    "model.n_layers": 2,
    "model.n_heads": 2,
    "model.d_model": 32,
    "model.max_seq_len": 32,
    "data.seq_len": 32,
    "data.batch_size": 4,
}
TEXT_CHARS = 1_000_000
QUIET = {"tracking.wandb": False, "train.progress": False}


@dataclass(frozen=True)
class Row:
    """One row of the probe: ``members`` 0 is a solo run (``train_run``), k a stacked group of
    k (``train_group``); ``processes`` > 1 packs that many solo processes; ``compile_mode``
    None runs eager, else ``train.compile`` in that mode; ``cuda_only``: skipped on a CPU."""

    members: int
    processes: int = 1
    compile_mode: str | None = None
    cuda_only: bool = False

    def config(self) -> dict[str, Any]:
        """The config keys this row sets on the profile's."""
        if self.compile_mode is None:
            return {}
        return {"train.compile": True, "train.compile_mode": self.compile_mode}

    def label(self) -> dict[str, Any]:
        """The keys a result row carries to name it (``probe_report.row_name``)."""
        out: dict[str, Any] = {"members": self.members}
        if self.processes > 1:
            out["processes"] = self.processes
        return out | ({"compile_mode": self.compile_mode} if self.compile_mode else {})


ROWS = (
    Row(0),
    Row(0, PACK),
    Row(1),
    Row(4),
    Row(8),
    Row(0, compile_mode="default"),
    Row(8, compile_mode="default"),
    Row(8, compile_mode="reduce-overhead", cuda_only=True),
)
"""The rows in the order measured: eager first (solo, pack, stacks of 1, 4, 8), then compiled."""
EAGER = sum(row.compile_mode is None for row in ROWS)


def synthetic_text(folder: Path) -> Path:
    """A fixed pseudo-random text (the same bytes every call: one token-cache entry)."""
    rng = random.Random(0)
    path = folder / "probe.txt"
    path.write_text("".join(rng.choices(CHARS, k=TEXT_CHARS)))
    return path


def probe_flat(data: Path, precision: str, cuda: bool, tiny: bool) -> dict[str, Any]:
    """The reference study's gpu profile as flat config keys, on this machine (``tiny``: at
    ``CPU_SHAPE``), the synthetic text, one evaluation batch, nothing logged to W&B."""
    from ablate.bench.loops import REFERENCE_STUDY
    from ablate.study import load_study

    run = load_study(REFERENCE_STUDY, PROFILE, check_data=False, check_device=False).runs[0]
    flat = flatten(run.config.to_dict()) | QUIET
    flat |= {"data.dataset": str(data), "train.precision": precision}
    flat |= {"train.eval_batches": 1, "train.final_eval_batches": 1}
    if tiny:
        flat |= CPU_SHAPE
    if not cuda:
        # one thread: on a shared CPU a second thread waiting at every barrier made steps
        # of milliseconds take a second
        flat |= {"train.accelerator": "cpu", "train.compile": False, "train.threads": 1}
    return with_kernel(flat)


def count_window(flat: dict[str, Any]) -> tuple[int, int]:
    """The two run lengths whose difference is counted: one and three log intervals."""
    interval = flat["train.log_interval"]
    return interval, 3 * interval


def counted_runs(flat: dict[str, Any], members: int) -> dict[str, Any]:
    """Kernel-launching operations and host reads per step, at the profile's log cadence."""
    counts = []
    window = count_window(flat)
    for steps in window:
        cfg = build_config(flat | run_length(steps))
        with tempfile.TemporaryDirectory(prefix="ablate-probe-") as root, OpCounter() as c:
            summaries = train(cfg, members, Path(root))
        if error := failure(summaries):
            return {"error": error}
        counts.append(c)
    short, long = counts
    n = window[1] - window[0]
    reads = Counter(long.reads)
    reads.subtract(short.reads)
    return {
        "ops_per_step": (long.kernels - short.kernels) / n,
        "host_reads_per_step": (long.host_reads - short.host_reads) / n,
        "reads_by_op": {k: v / n for k, v in sorted(reads.items()) if v},
    }


def measure_row(
    flat: dict[str, Any], spec: Row, window: tuple[int, int], peak: float | None, cuda: bool
) -> dict[str, Any]:
    """One row: on a CPU the counted runs of an eager row first (they also warm the path up),
    then the timed ones; a packed row through :mod:`ablate.bench.probe_pack`. A failed run ends
    the row with its error."""
    from ablate.bench.probe_pack import packed_row  # its processes import the runs, not this

    row = spec.label()
    if spec.cuda_only and not cuda:
        return row | {"skipped": "CUDA graphs need CUDA"}
    flat = flat | spec.config()
    try:
        if spec.processes > 1:
            row = packed_row(flat, spec.processes, window)
        else:
            if not cuda and spec.compile_mode is None:
                row |= counted_runs(flat, spec.members)
            if "error" not in row:
                row |= timed_runs(flat, spec.members, window, cuda)
    except Exception as err:  # noqa: BLE001 - a failed row is shown, the others still run
        row["error"] = failed(err)
    if row.get("tokens_per_s"):
        k = max(spec.members, spec.processes)
        row["tokens_per_s_per_member"] = row["tokens_per_s"] / k
        if cuda and peak:
            row["mfu"] = row["flops_per_token"] * row["tokens_per_s"] / peak
        if "peak_mem_gib" in row:
            row["peak_mem_per_member_gib"] = row["peak_mem_gib"] / k
    return row


# --- the verdicts ---------------------------------------------------------------------------------


def row_settings(row: dict[str, Any]) -> dict[str, str]:
    """The ``--set`` keys that take ``ablate run`` to ``row``'s path (stacks as many members as
    fit: ``train.stack=auto``)."""
    out = {"train.stack": "auto"} if row["members"] else {}
    if row.get("compile_mode"):
        out["train.compile"] = "true"
        if row["compile_mode"] != "default":
            out["train.compile_mode"] = row["compile_mode"]
    return out


def row_args(row: dict[str, Any]) -> str:
    """The ``ablate run`` arguments of ``row``'s path, e.g. ``--workers 4 --runs-per-gpu 4``."""
    args = [f"--set {k}={v}" for k, v in row_settings(row).items()]
    if row.get("processes", 1) > 1:
        args.insert(0, f"--workers {row['processes']} --runs-per-gpu {row['processes']}")
    return " ".join(args)


def row_choice(row: dict[str, Any]) -> str:
    """One word for the verdict: solo, pack, stack, with -compiled or -graphed."""
    kind = "pack" if row.get("processes", 1) > 1 else "stack" if row["members"] else "solo"
    mode = row.get("compile_mode")
    return kind + ("" if not mode else "-compiled" if mode == "default" else "-graphed")


def id_changing(flat: dict[str, Any], row: dict[str, Any]) -> list[str]:
    """The keys of ``row_settings`` that change a run's id (checked on the probe's config, not
    assumed): a verdict that set them would train other runs than a registration names."""
    base = build_config(flat).run_id()
    return [
        key
        for key, value in row_settings(row).items()
        if build_config(flat | {key: value}).run_id() != base
    ]


def verdict(rows: list[dict[str, Any]], stacked: bool = True) -> dict[str, Any] | None:
    """The path with the most tokens/s in all (solo unless another beats it by ``MARGIN``)
    among the rows whose arguments keep run ids (``stacked=False``: among those that do not
    stack), and the ``ablate run`` arguments that take it; None without a solo figure.
    ``measured_only``: faster rows left out because their arguments would change run ids."""
    solo = next((r for r in rows if row_name(r) == "solo" and r.get("tokens_per_s")), None)
    if solo is None:
        return None
    ok = [r for r in rows if r.get("tokens_per_s") and (stacked or not r["members"])]
    allowed = [r for r in ok if not r.get("changes_run_id")]
    best = max(allowed, key=lambda r: r["tokens_per_s"])
    if best["tokens_per_s"] < MARGIN * solo["tokens_per_s"]:
        best = solo
    faster = [r for r in ok if r.get("changes_run_id") and r["tokens_per_s"] > best["tokens_per_s"]]
    return {
        "choice": row_choice(best),
        "row": row_name(best),
        "tokens_per_s": best["tokens_per_s"],
        "x_solo": best["tokens_per_s"] / solo["tokens_per_s"],
        "flops_per_token": best["flops_per_token"],
        "args": row_args(best),
        "measured_only": [
            {"row": row_name(r), "x_solo": r["tokens_per_s"] / solo["tokens_per_s"]}
            | {"changes_run_id": r["changes_run_id"]}
            for r in faster
        ],
    }


# --- the whole probe ------------------------------------------------------------------------------


def gpu_peak() -> tuple[float, str]:
    """The dense bf16 peak (FLOP/s) of the CUDA device and its source."""
    from ablate.bench.machine import gpu_peak_bf16, matmul_flops

    table = gpu_peak_bf16(torch.cuda.get_device_name())
    if table:
        return table
    return matmul_flops(4096)["best"], "measured 4096^3 bf16 matmul (not in the table)"


def device_name(cuda: bool) -> str:
    from ablate.bench.machine import cpu_model, usable_cores

    if cuda:
        return torch.cuda.get_device_name()
    return f"{cpu_model()} ({usable_cores()} cores, no CUDA)"


def progress_line(row: dict[str, Any]) -> str:
    """A row as the probe's log says it: its tokens/s, its error or why it did not run."""
    if "error" in row or "skipped" in row:
        return row.get("error") or f"not run: {row['skipped']}"
    if not row.get("tokens_per_s"):
        return "no figure: the longer run took no longer than the shorter (a loaded machine?)"
    return f"{row['tokens_per_s']:,.0f} tokens/s"


def start(precision: str, quick: bool, peak_tflops: float | None) -> dict[str, Any]:
    """The probe's results before any row: the device, its peak, the precision."""
    cuda = torch.cuda.is_available()
    r: dict[str, Any] = {"cuda": cuda, "tiny": quick or not cuda, "device": device_name(cuda)}
    r["precision"] = precision
    if cuda:
        peak, source = (peak_tflops * 1e12, "the bench's section 0") if peak_tflops else gpu_peak()
        r |= {"peak_tflops": peak / 1e12, "peak_source": source}
    return r


def measure(
    precision: str = PROFILE_PRECISION,
    *,
    quick: bool = False,
    compiled: bool | None = None,
    peak_tflops: float | None = None,
    log: Callable[[str], Any] = print,
    progress: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any]:
    """The probe's results (``probe_report.render`` writes them): the rows, the verdicts, the
    attention kernels, the LSTM's dtype. ``quick``: the CPU's tiny shape on CUDA too (a smoke
    test of the code, as ``ablate bench --gpu --quick``). ``compiled``: the compiled rows
    (default: on CUDA only). ``peak_tflops``: the GPU bench's section 0 figure, else looked up
    (CUDA only). ``progress`` gets the results so far after every row."""
    t0 = time.perf_counter()
    r = start(precision, quick, peak_tflops)
    cuda, tiny = r["cuda"], r["tiny"]
    compiled = cuda if compiled is None else compiled
    with tempfile.TemporaryDirectory(prefix="ablate-probe-data-") as tmp:
        flat = probe_flat(synthetic_text(Path(tmp)), precision, cuda, tiny)
        window = CPU_TIMED if tiny else TIMED
        m, d = build_config(flat).model, build_config(flat).data
        r |= {"timed_window": list(window), "count_window": list(count_window(flat))}
        r["shape"] = (
            f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {d.seq_len}, batch {d.batch_size}, "
            f"dropout {m.dropout}"
        )
        r["rows"], r["attention"], r["lstm"] = [], [], None
        if cuda:  # CUDA's lazy initialisation and first kernels, outside every row
            with tempfile.TemporaryDirectory(prefix="ablate-probe-") as root:
                train(build_config(flat | run_length(WARMUP_STEPS)), 0, Path(root))
        for i, spec in enumerate(ROWS):
            if i == EAGER:  # cheap, and worth more than the compiled rows to a cut probe
                r["attention"] = attention_rows(flat, cuda)
                r["lstm"] = lstm_dtype(flat, cuda and not tiny)
            if spec.compile_mode and not compiled:
                row = spec.label() | {"skipped": "compiled rows on a CPU: --compiled"}
            else:
                row = measure_row(flat, spec, window, r.get("peak_tflops", 0) * 1e12, cuda)
            row["changes_run_id"] = id_changing(flat, row)
            r["rows"].append(row)
            r["verdict"], r["unstacked"] = verdict(r["rows"]), verdict(r["rows"], stacked=False)
            r["wall_s"] = time.perf_counter() - t0
            log(f"  {row_name(row)}: {progress_line(row)}")
            if progress is not None:
                progress(r)
    r["wall_s"] = time.perf_counter() - t0
    return r


def run_probe(
    out: Path, precision: str = PROFILE_PRECISION, compiled: bool | None = None
) -> dict[str, Any]:
    """``ablate bench --probe``: measure, write ``out`` and its JSON after every row and at the
    end (on a CPU too)."""
    from datetime import datetime

    from ablate.bench import probe_report
    from ablate.bench.markdown import Sections

    r: dict[str, Any] = {"started": datetime.now().isoformat(timespec="seconds")}
    run = Sections(r, after=lambda: probe_report.write(r, out))

    def partial(so_far: dict[str, Any]) -> None:
        probe_report.write(r | {"stacked": so_far, "wall_s": so_far["wall_s"]}, out)

    run.run(
        "stacked",
        probe_report.HEADING,
        lambda: measure(precision, compiled=compiled, log=run.say, progress=partial),
    )
    for key in ("verdict", "unstacked"):
        v = (r.get("stacked") or {}).get(key)
        run.say(f"{key}: {v['choice'] if v else 'none'}")
    run.say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s']:.0f} s)")
    return r
