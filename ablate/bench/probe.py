"""The probe: ``ablate bench --probe`` (and section 6 of ``ablate bench --gpu``).

The first GPU command of a window (docs/gpu.md) decides, for the studies of that same command,
how their runs train: solo, stacked (``train.stack``), compiled (``train.compile``, with CUDA
graphs under ``compile_mode: reduce-overhead``) or packed as processes (``--workers 4
--runs-per-gpu 4``). At the reference study's gpu shape (6L/6H/384d, ctx 256, batch 64,
dropout 0.2, bf16-mixed) it runs the parts of ``PLAN`` in order, so that a probe cut by its time
limit keeps the most useful ones, each with its planned seconds on an H200 (below):

* start-up (the process's age when the probe starts; on CUDA a 5-step warm-up run: CUDA's lazy
  initialisation and first kernels, outside every row);
* solo (``train_run``, as ``ablate run`` trains a run) and a stack of 8 (``train_group``), eager;
* the profile of 12 eager steps of the stack of 8 (:mod:`ablate.bench.probe_profile`);
* a stack of 4 against its 4 solo runs at dropout 0 (``probe_runs.stack_equals_solo``);
* the attention kernels and the LSTM's dtype (:mod:`ablate.bench.probe_kernels`);
* the stack of 8 compiled, then the profile of 12 of its compiled steps (its graphs reused);
* the stack of 8 and solo under ``reduce-overhead``, validating every ``VALIDATE_EVERY`` steps
  on ``VALIDATE_BATCHES`` batches (CUDA graphs meet validation, as in a study's runs; on a
  CPU the mode adds no graphs and the same code runs);
* if the time left holds them (``Row.if_time``): a pack of ``PACK`` processes
  (:mod:`ablate.bench.probe_pack`) and a compiled stack of 16.

Each row's tokens/s: two runs of ``TIMED`` steps, the extra steps' tokens (all members or
processes) over the extra wall time. Each run ends synchronized (its final evaluation reads the
loss), so set-up, final evaluation and checkpoint cancel. A compiled row compiles in a warm-up
run of its own before them (``probe_runs.timed_runs``): its compile s is a column of its own.
MFU = the summary's ``flops_per_token`` x tokens/s / the dense bf16 peak
(``machine.GPU_BF16_PEAK``, else a measured matmul); peak memory from
``torch.cuda.max_memory_allocated`` over the longer run. Each part's own seconds are recorded
(``probe_s``), the plan's next calibration.

The plan, at the H200's measured rates (reports/bench_probe.json: a solo step 15.2-16.8 ms; a
stack of 8 at 2.78x solo tokens/s, 8 x 16.8 / 2.78 = 48 ms a step; set-up 2 s a solo run, 4 s a
group of 8; compiling as nanoGPT's compile of this model, 16 s its training graph and 17 s its
evaluation graph on cold caches): start-up ~8 s and warm-up ~5 s (13), solo 60 x 16.8 ms + 2 x
2 s ~5 s (18), stack of 8 60 x 48 ms + 2 x 4 s ~11 s (29), its profile (17 steps, one run,
the summary) ~8 s (37), stack = solo (4 solo runs and a group of 4 of 10 steps) ~10 s (47),
attention and LSTM ~4 s (51), stack of 8 compiled (compile ~33 s + 65 x 48 ms + 3 x 4 s) ~50
s (101), its profile ~8 s (109), stack of 8 reduce-overhead (compile ~15 s: new mode, inductor's
kernels cached; + 3 x 4 s + 2 validations) ~30 s (139), solo reduce-overhead (compile ~15 s +
3 x 2 s) ~22 s (161): 161 s, inside the window's ``PROBE_SECONDS`` (180). Then the pack
(~16 s: its processes' own start-up) fits (177 s), and the compiled stack of 16 (~44 s) only
when the probe ran ahead of its plan (warm caches). An ``if_time`` row runs when the time left
(``seconds``, ``ablate bench --probe --seconds``) holds its plan at the probe's pace so far
(elapsed over planned, at least 1); the others always run, and the window's limit cuts them.

Two verdicts (:func:`verdict`), each the row with the most tokens/s by ``MARGIN`` over solo and
the ``ablate run`` arguments that take it (:func:`row_args`): ``verdict`` over every row, and
``unstacked`` over the rows that do not stack (solo, its reduce-overhead row, pack), for studies
whose profile pins ``train.stack`` (the reference's gpu profile pins 1). ``scripts/gpu/window.sh``
reads both from the JSON. A row whose arguments would change the run ids is measured and shown
but never a verdict: a window's runs must keep the run ids their registrations name. None does
today (``train.stack``, ``train.compile`` and ``train.compile_mode`` are how runs train, in no
run id); the check is on the probe's own config, not assumed. The JSON and the report are
written after every part, so a cut probe leaves the verdicts of the rows it finished.

On a CPU it also counts kernel-launching operations and host reads per step of the eager rows
(``training.opcount.OpCounter`` around runs of two lengths, the difference per step; the lengths
are whole log intervals of the profile): the count is the same on a GPU, so it is measured where
it costs nothing, not in the GPU's time budget.

The data is a fixed pseudo-random text of tinyshakespeare's 65 characters written to a
temporary file: the probe measures speed, not quality, so it needs no dataset on the machine
(a lent GPU machine has no network), and the same text gives the same token-cache entry.

Without CUDA it runs the same code at a tiny shape (``CPU_SHAPE``, ``CPU_TIMED``) on two cores,
and the CUDA-only figures (MFU, peak memory, CUDA kernel names, copies and synchronisations)
read "not measured (no CUDA)". Its compiled rows and profile there (inductor's C++ on a CPU
takes minutes) run only with ``compiled=True`` (``ablate bench --probe --compiled``). A part
that fails (a run ending ``failed``, an exception) keeps its place with the error's first line:
the probe goes on with the next.
"""

from __future__ import annotations

import os
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
from ablate.bench.probe_profile import profile_steps
from ablate.bench.probe_report import row_name
from ablate.bench.probe_runs import (
    CHARS,
    PROFILE_PRECISION,
    failed,
    failure,
    run_length,
    stack_equals_solo,
    timed_runs,
    train,
)
from ablate.config import build_config, flatten
from ablate.training.opcount import OpCounter

PROFILE = "gpu"  # of the reference study (bench.loops.REFERENCE_STUDY)
PACK = 4  # the packed row: 4 processes on the device at once, each training solo runs
PROBE_SECONDS = 180  # window.sh's PROBE_SECONDS: the plan's budget
MARGIN = 1.1
"""A verdict leaves solo only for a path this much faster (tokens/s): below it, noise."""
# the timed runs' lengths: tokens/s from the steps between them (50 steps of the gpu shape:
# 0.8 s solo on an H200, far above the run-to-run noise of set-up); 5 steps first: CUDA's lazy
# initialisation is in the warm-up run, a compiled row's compiling in its own warm-up run
TIMED, CPU_TIMED = (5, 55), (10, 30)
WARMUP_STEPS = 5  # one short run first on CUDA: its lazy initialisation is not in a row
VALIDATE_EVERY, VALIDATE_BATCHES = 20, 2  # reduce-overhead rows: graphs replayed across batches
PROFILED = 8  # the profile's stack
START_S = 13.0  # the plan's start-up: Python, torch, Lightning, ablate, CUDA, the warm-up run
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
    None runs eager, else ``train.compile`` in that mode (``reduce-overhead`` rows validate
    every ``VALIDATE_EVERY`` steps); ``plan_s``: its seconds in the plan (module docstring);
    ``if_time``: measured only when the time left holds its plan."""

    members: int
    processes: int = 1
    compile_mode: str | None = None
    plan_s: float = 0.0
    if_time: bool = False

    @property
    def eval_every(self) -> int | None:
        return VALIDATE_EVERY if self.compile_mode == "reduce-overhead" else None

    def config(self) -> dict[str, Any]:
        """The config keys this row sets on the profile's."""
        if self.compile_mode is None:
            return {}
        out = {"train.compile": True, "train.compile_mode": self.compile_mode}
        return out | ({"train.eval_batches": VALIDATE_BATCHES} if self.eval_every else {})

    def label(self) -> dict[str, Any]:
        """The keys a result row carries to name it (``probe_report.row_name``)."""
        out: dict[str, Any] = {"members": self.members}
        if self.processes > 1:
            out["processes"] = self.processes
        return out | ({"compile_mode": self.compile_mode} if self.compile_mode else {})


@dataclass(frozen=True)
class Part:
    """A part of the probe that is not a row: ``key`` ``profile`` (of a stack of
    ``PROFILED``; ``compiled``: after the compiled row, reusing its graphs), ``equal`` (stack
    = solo) or ``kernels`` (attention and the LSTM); ``plan_s`` as a row's."""

    key: str
    plan_s: float
    compiled: bool = False


PLAN: tuple[Row | Part, ...] = (
    Row(0, plan_s=5),
    Row(8, plan_s=11),
    Part("profile", 8),
    Part("equal", 10),
    Part("kernels", 4),
    Row(8, compile_mode="default", plan_s=50),
    Part("profile", 8, compiled=True),
    Row(8, compile_mode="reduce-overhead", plan_s=30),
    Row(0, compile_mode="reduce-overhead", plan_s=22),
    Row(0, PACK, plan_s=16, if_time=True),
    Row(16, compile_mode="default", plan_s=44, if_time=True),
)
"""The probe in the order it runs (module docstring): 161 s planned, 177 s with the pack."""
ROWS = tuple(p for p in PLAN if isinstance(p, Row))


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
    the row with its error. ``step_ms``: one step of one member (or process), from tokens/s."""
    from ablate.bench.probe_pack import packed_row  # its processes import the runs, not this

    row = spec.label() | ({"eval_every": spec.eval_every} if spec.eval_every else {})
    flat = flat | spec.config()
    try:
        if spec.processes > 1:
            row = packed_row(flat, spec.processes, window)
        else:
            if not cuda and spec.compile_mode is None:
                row |= counted_runs(flat, spec.members)
            if "error" not in row:
                row |= timed_runs(flat, spec.members, window, cuda, spec.eval_every)
    except Exception as err:  # noqa: BLE001 - a failed row is shown, the others still run
        row["error"] = failed(err)
    if row.get("tokens_per_s"):
        k = max(spec.members, spec.processes)
        d = build_config(flat).data
        row["tokens_per_s_per_member"] = row["tokens_per_s"] / k
        row["step_ms"] = 1e3 * k * d.batch_size * d.seq_len / row["tokens_per_s"]
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


def process_age() -> float | None:
    """Seconds since this process started (Linux's ``/proc``), None where it cannot be read."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - float(stat[19]) / os.sysconf("SC_CLK_TCK")  # field 22: its start
    except (OSError, ValueError, IndexError):
        return None


def inductor_cache() -> dict[str, Any]:
    """Where inductor keeps its compiled kernels for the processes that follow (window.sh sets
    ``TORCHINDUCTOR_CACHE_DIR``; else torch's default under the temporary directory)."""
    import torch._inductor.config as inductor
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    env = "TORCHINDUCTOR_CACHE_DIR"
    source = env if os.environ.get(env) else "torch's default"  # before cache_dir(), which sets it
    return {"dir": cache_dir(), "source": source, "fx_graph_cache": inductor.fx_graph_cache}


def start(precision: str, quick: bool, peak_tflops: float | None) -> dict[str, Any]:
    """The probe's results before any part: the device, its peak, the precision, the process's
    start-up so far, the inductor cache."""
    cuda = torch.cuda.is_available()
    r: dict[str, Any] = {"cuda": cuda, "tiny": quick or not cuda, "device": device_name(cuda)}
    r |= {"precision": precision, "startup": {"process_s": process_age()}}
    r["inductor_cache"] = inductor_cache()
    if cuda:
        peak, source = (peak_tflops * 1e12, "the bench's section 0") if peak_tflops else gpu_peak()
        r |= {"peak_tflops": peak / 1e12, "peak_source": source}
    return r


def planned_s(if_time: bool) -> float:
    """The plan's seconds: of the rows run only if time is left (``if_time``), else of the
    rest, start-up included."""
    optional = [p.plan_s for p in PLAN if isinstance(p, Row) and p.if_time]
    return sum(optional) if if_time else START_S + sum(p.plan_s for p in PLAN) - sum(optional)


def warm_up(flat: dict[str, Any]) -> float:
    """CUDA's lazy initialisation and first kernels in a short run outside every row: its
    wall seconds."""
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ablate-probe-") as root:
        train(build_config(flat | run_length(WARMUP_STEPS)), 0, Path(root))
    return time.perf_counter() - t


@dataclass(frozen=True)
class Setting:
    """What every part of one probe shares: the config, the timed window, the machine."""

    flat: dict[str, Any]
    window: tuple[int, int]
    cuda: bool
    tiny: bool
    compiled: bool
    peak: float | None


def run_part(part: Part, s: Setting) -> dict[str, Any]:
    """A part that is not a row (``Part``); a failure becomes its ``error``."""
    try:
        if part.key == "profile":
            over = {"train.compile": True, "train.compile_mode": "default"} if part.compiled else {}
            return profile_steps(s.flat | over, PROFILED, s.cuda)
        if part.key == "equal":
            return stack_equals_solo(s.flat)
        return {"attention": attention_rows(s.flat, s.cuda)} | {
            "lstm": lstm_dtype(s.flat, s.cuda and not s.tiny)
        }
    except Exception as err:  # noqa: BLE001 - a failed part is shown, the others still run
        return {"error": failed(err)}


def skip_reason(step: Row | Part, compiled: bool, left: float, need: float) -> str | None:
    """Why ``step`` does not run: compiled on a CPU without ``--compiled``, or an ``if_time``
    row the time left (``left`` s) does not hold (``need`` s: its plan at the probe's pace)."""
    if (step.compile_mode if isinstance(step, Row) else step.compiled) and not compiled:
        return "compiled rows on a CPU: --compiled"
    if isinstance(step, Row) and step.if_time and need > left:
        return f"no time left (~{need:.0f} s planned, {max(left, 0):.0f} s left)"
    return None


def part_line(step: Part, out: dict[str, Any]) -> str:
    """A part as the probe's log says it."""
    name = step.key + (" (compiled)" if step.compiled else "")
    if "error" in out or "skipped" in out:
        return f"{name}: {out.get('error') or 'not run: ' + out['skipped']}"
    if step.key == "kernels":
        return f"{name}: attention kernels and the LSTM's dtype"
    if step.key == "equal":
        verdict = "ok" if out["ok"] else "DIFFERS"
        return f"stack = solo: {verdict}, max |diff| {out['max_abs_diff']:.2g}"
    return f"{name}: {out['busy_pct']:.0f}% busy, {out['wall_ms_per_step']:.1f} ms a step"


def run_step(r: dict[str, Any], step: Row | Part, s: Setting, why: str | None) -> str:
    """Run ``step`` (or record ``why`` it does not run) into ``r``; its log line."""
    t = time.perf_counter()
    if isinstance(step, Row):
        if why:
            row = step.label() | {"skipped": why}
        else:
            row = measure_row(s.flat, step, s.window, s.peak, s.cuda)
        row |= {"changes_run_id": id_changing(s.flat, row), "probe_s": time.perf_counter() - t}
        r["rows"].append(row)
        r["verdict"], r["unstacked"] = verdict(r["rows"]), verdict(r["rows"], stacked=False)
        return f"{row_name(row)}: {progress_line(row)}"
    out = {"skipped": why} if why else run_part(step, s)
    out["probe_s"] = time.perf_counter() - t
    if step.key == "kernels":
        r["attention"], r["lstm"] = out.pop("attention", []), out.pop("lstm", None)
        r["kernels"] = out  # its seconds, or why it did not run
    elif step.key == "equal":
        r["equal"] = out
    else:
        r["profile"]["compiled" if step.compiled else "eager"] = out
    return part_line(step, out)


def measure(
    precision: str = PROFILE_PRECISION,
    *,
    quick: bool = False,
    compiled: bool | None = None,
    peak_tflops: float | None = None,
    seconds: float = PROBE_SECONDS,
    log: Callable[[str], Any] = print,
    progress: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any]:
    """The probe's results (``probe_report.render`` writes them): ``PLAN``'s rows and parts,
    the verdicts. ``quick``: the CPU's tiny shape on CUDA too (a smoke test of the code, as
    ``ablate bench --gpu --quick``). ``compiled``: the compiled rows (default: on CUDA only).
    ``peak_tflops``: the GPU bench's section 0 figure, else looked up (CUDA only). ``seconds``:
    the budget ``if_time`` rows are held to. ``progress`` gets the results after every part."""
    t0 = time.perf_counter()
    r = start(precision, quick, peak_tflops)
    cuda, tiny = r["cuda"], r["tiny"]
    with tempfile.TemporaryDirectory(prefix="ablate-probe-data-") as tmp:
        flat = probe_flat(synthetic_text(Path(tmp)), precision, cuda, tiny)
        s = Setting(
            flat,
            CPU_TIMED if tiny else TIMED,
            cuda,
            tiny,
            cuda if compiled is None else compiled,
            r.get("peak_tflops", 0) * 1e12,
        )
        m, d = build_config(flat).model, build_config(flat).data
        r |= {"timed_window": list(s.window), "count_window": list(count_window(flat))}
        r["shape"] = (
            f"{m.n_layers}L/{m.n_heads}H/{m.d_model}d, ctx {d.seq_len}, batch {d.batch_size}, "
            f"dropout {m.dropout}"
        )
        r |= {"rows": [], "attention": [], "lstm": None, "profile": {}, "equal": None}
        r["plan"] = {
            "seconds": seconds,
            "planned_s": planned_s(False),
            "if_time_s": planned_s(True),
        }
        if cuda:
            r["startup"]["warmup_s"] = warm_up(flat)
        planned = START_S
        for step in PLAN:
            elapsed = time.perf_counter() - t0
            need = max(1.0, elapsed / planned) * step.plan_s  # at the probe's pace so far
            log("  " + run_step(r, step, s, skip_reason(step, s.compiled, seconds - elapsed, need)))
            planned += step.plan_s
            r["wall_s"] = time.perf_counter() - t0
            if progress is not None:
                progress(r)
    r["wall_s"] = time.perf_counter() - t0
    return r


def run_probe(
    out: Path,
    precision: str = PROFILE_PRECISION,
    compiled: bool | None = None,
    seconds: float | None = None,
) -> dict[str, Any]:
    """``ablate bench --probe``: measure (within ``seconds``, default ``PROBE_SECONDS``), write
    ``out`` and its JSON after every part and at the end (on a CPU too)."""
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
        lambda: measure(
            precision,
            compiled=compiled,
            seconds=seconds or PROBE_SECONDS,
            log=run.say,
            progress=partial,
        ),
    )
    for key in ("verdict", "unstacked"):
        v = (r.get("stacked") or {}).get(key)
        run.say(f"{key}: {v['choice'] if v else 'none'}")
    run.say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s']:.0f} s)")
    return r
