"""The probe: ``ablate bench --probe`` (and section 6 of ``ablate bench --gpu``).

The first GPU command of a window (docs/gpu.md) decides, for the studies of that same command,
between running their runs one at a time (solo), stacking them (``train.stack``) and packing
them as processes (``--workers 4 --runs-per-gpu 4``). It measures, at the reference study's gpu
shape (6L/6H/384d, ctx 256, batch 64, dropout 0.2, bf16-mixed), three rows:

* solo: runs trained by ``train_run`` into a temporary store, as ``ablate run`` trains them;
* pack of ``PACK``: that many processes at once, each training solo runs
  (:mod:`ablate.bench.probe_pack`), their tokens/s summed;
* stack of ``STACK``: a stacked group through ``train_group`` (the group's loop, the one AdamW
  path), the narrowest entry point a study's stacked runs take.

Each row's tokens/s: two runs of ``TIMED`` steps, the extra steps' tokens (all members or
processes) over the extra wall time. Each run ends synchronized (its final evaluation reads the
loss), so set-up, final evaluation and checkpoint cancel. MFU = the summary's
``flops_per_token`` x tokens/s / the dense bf16 peak (``machine.GPU_BF16_PEAK``, else a measured
matmul); peak memory from ``torch.cuda.max_memory_allocated`` over the longer run. The
``verdict`` (:func:`verdict`) is the row with the most tokens/s, by ``MARGIN`` over solo, and the
``ablate run`` arguments that apply it; ``scripts/gpu/window.sh`` reads it from the JSON. The
JSON and the report are written after every row, so a probe cut by its time limit still leaves a
verdict of the rows it finished (solo and pack first).

On a CPU it also counts kernel-launching operations and host reads per step
(``training.opcount.OpCounter`` around runs of two lengths, the difference per step; the lengths
are whole log intervals of the profile): the count is the same on a GPU, so it is measured where
it costs nothing, not in the GPU's time budget. The attention table says which SDPA kernel ran
(one forward + backward of the solo model and of a stack under ``torch.profiler``, with dropout,
without, and with ALiBi); the LSTM line gives the dtype of the architecture study's lstm arm
under bf16-mixed autocast.

Its cost on a GPU, at the GPU pilot's H200 rates (docs/gpu.md has the arithmetic): a solo step
16.8 ms, a stacked step about 42 ms + 7 ms per member, so the 2 x ``TIMED`` runs take about 1.2 s
solo, 5 s stacked and 2 s packed, and the whole probe, start-ups and set-ups included, about 50 s.

The data is a fixed pseudo-random text of tinyshakespeare's 65 characters written to a
temporary file: the probe measures speed, not quality, so it needs no dataset on the machine
(a lent GPU machine has no network), and the same text gives the same token-cache entry.

Without CUDA it runs the same code at a tiny shape (``CPU_SHAPE``, ``CPU_TIMED``) in under a
minute on two cores, and the CUDA-only figures (MFU, peak memory, CUDA kernel names) read "not
measured (no CUDA)": a test runs it so its first run on a GPU is not its first run. A row that
fails (a run ending ``failed``, an exception) keeps its place in the table with the error's
first line: the probe goes on with the next row.
"""

from __future__ import annotations

import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ablate.accel import kernel_problem
from ablate.bench.probe_report import row_name
from ablate.bench.probe_runs import failed, failure, run_length, timed_runs, train
from ablate.config import RunConfig, build_config, flatten
from ablate.training.opcount import OpCounter

PROFILE = "gpu"  # of the reference study (bench.loops.REFERENCE_STUDY)
PROFILE_PRECISION = "bf16-mixed"  # what every gpu profile trains at
STACK = 4  # the stacked row: a group of 4 (train_group)
PACK = 4  # the packed row: 4 processes on the device at once, each training solo runs
MARGIN = 1.1
"""The verdict leaves solo only for a path this much faster (tokens/s): below it, noise."""
VERDICT_ARGS = {
    "solo": "",
    "stack": "--set train.stack=auto",
    "pack": f"--workers {PACK} --runs-per-gpu {PACK}",
}
"""The ``ablate run`` arguments of each verdict (window.sh gives ``stack``'s only to studies
whose profile leaves ``train.stack`` at its default)."""
# the timed runs' lengths: tokens/s from the steps between them (50 steps of the gpu shape:
# 0.8 s solo on an H200, far above the run-to-run noise of set-up)
TIMED, CPU_TIMED = (10, 60), (10, 30)
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
LSTM_SHAPE = {"model.d_model": 816, "model.n_layers": 2}  # architecture.yaml's gpu lstm arm
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # tinyshakespeare's
TEXT_CHARS = 1_000_000
QUIET = {"tracking.wandb": False, "train.progress": False}


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


def with_kernel(flat: dict[str, Any]) -> dict[str, Any]:
    """``flat`` with ``train.attn_backend: auto`` where its pinned kernel cannot run it (e.g.
    flash at 32-true on CUDA, or with ALiBi): the probe measures, it does not refuse."""
    device = "cuda" if flat["train.accelerator"] == "gpu" else "cpu"
    backend = flat["train.attn_backend"]
    problem = kernel_problem(
        backend,
        device,
        precision=flat["train.precision"],
        attn_bias=flat["model.pos_encoding"] == "alibi",
        head_dim=flat["model.d_model"] // flat["model.n_heads"],
    )
    # the CPU flash kernel takes no dropout ("No available kernel" in torch 2.13), which the
    # plan-time rule does not know: the gpu profile's flash + dropout 0.2 cannot run on a CPU
    problem = problem or (device == "cpu" and backend == "flash" and flat["model.dropout"] > 0)
    return flat | {"train.attn_backend": "auto"} if problem else flat


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
    flat: dict[str, Any],
    members: int,
    window: tuple[int, int],
    peak: float | None,
    cuda: bool,
    processes: int = 1,
) -> dict[str, Any]:
    """One row: on a CPU the counted runs first (they also warm the path up), then the timed
    ones; ``processes`` > 1: the packed row (:mod:`ablate.bench.probe_pack`). A failed run ends
    the row with its error."""
    from ablate.bench.probe_pack import packed_row  # its processes import the runs, not this

    row: dict[str, Any] = {"members": members}
    try:
        if processes > 1:
            row = packed_row(flat, processes, window)
        else:
            if not cuda:
                row |= counted_runs(flat, members)
            if "error" not in row:
                row |= timed_runs(flat, members, window, cuda)
    except Exception as err:  # noqa: BLE001 - a failed row is shown, the others still run
        row["error"] = failed(err)
    if row.get("tokens_per_s"):
        k = max(members, processes)
        row["tokens_per_s_per_member"] = row["tokens_per_s"] / k
        if cuda and peak:
            row["mfu"] = row["flops_per_token"] * row["tokens_per_s"] / peak
        if "peak_mem_gib" in row:
            row["peak_mem_per_member_gib"] = row["peak_mem_gib"] / k
    return row


# --- which SDPA kernel ran, and the LSTM's dtype ------------------------------------------------


def sdpa_names(prof: Any) -> tuple[dict[str, int], list[str]]:
    """From a finished ``torch.profiler.profile``: the aten SDPA backend ops and how often
    each ran, and the CUDA kernels whose names say attention (flash, fmha, cudnn, ...)."""
    from torch.autograd import DeviceType

    ops: Counter = Counter()
    kernels: set[str] = set()
    words = ("flash", "fmha", "attention", "attn", "cudnn", "sdpa", "mem_eff")
    for evt in prof.events():
        name = evt.name
        if evt.device_type == DeviceType.CUDA:
            if any(w in name.lower() for w in words):  # without "void " and template arguments
                kernels.add(re.split(r"[<(]", name.removeprefix("void "))[0][:80])
        elif name.startswith("aten::_scaled_dot_product"):  # the backend's own op
            ops[name.removeprefix("aten::")] += 1
    return dict(sorted(ops.items())), sorted(kernels)


def _models(cfg: RunConfig, n: int, vocab: int, dev: torch.device) -> list[torch.nn.Module]:
    from ablate.model import build_model

    models = []
    for seed in range(n):
        torch.manual_seed(seed)
        models.append(build_model(cfg.model, vocab).to(dev).train())
    return models


def attention_step(cfg: RunConfig, members: int, dev: torch.device) -> Callable[[], None]:
    """One training forward + backward of the solo model (``members=0``) or a stack, as
    ``train_run`` / ``train_group`` compute it (their autocast, pinned kernel, loss)."""
    from ablate.model import stack_models
    from ablate.training.lit import lm_loss
    from ablate.training.step import member_losses

    vocab, d = len(CHARS), cfg.data
    models = _models(cfg, max(members, 1), vocab, dev)
    stack = stack_models(models) if members else None
    shape = (members, d.batch_size, d.seq_len) if members else (d.batch_size, d.seq_len)
    x = torch.randint(vocab, shape, device=dev)
    y = torch.randint(vocab, shape, device=dev)
    bf16 = cfg.train.precision == "bf16-mixed"

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            loss = member_losses(stack, x, y).sum() if stack else lm_loss(models[0](x), y)
        loss.backward()

    return step


def profile_attention(flat: dict[str, Any], members: int, cuda: bool) -> dict[str, Any]:
    """The SDPA ops and kernels of one profiled step (after one unprofiled warm-up step)."""
    from torch.profiler import ProfilerActivity, profile

    from ablate.training.train import attn_context, attn_kernel

    cfg = build_config(flat)
    dev = torch.device("cuda" if cuda else "cpu")
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with attn_context(cfg, dev):
        step = attention_step(cfg, members, dev)
        step()
        with profile(activities=acts) as prof:
            step()
            if cuda:
                torch.cuda.synchronize()
    ops, kernels = sdpa_names(prof)
    pinned = attn_kernel(cfg, dev)
    if cfg.train.attn_backend == "auto":  # pinned with the math kernel as its fallback
        pinned = f"auto: {pinned}"
    return {"pinned": pinned, "ops": ops, "kernels": kernels if cuda else None}


ATTENTION_CASES = (
    ("learned, dropout 0.2 (the profile)", {}),
    ("learned, no dropout", {"model.dropout": 0.0}),
    ("ALiBi, dropout 0.2", {"model.pos_encoding": "alibi"}),
)


def attention_rows(flat: dict[str, Any], cuda: bool) -> list[dict[str, Any]]:
    """Which SDPA kernel ran, solo and in a stack of ``STACK``, per attention case."""
    rows = []
    for members in (0, STACK):
        for case, over in ATTENTION_CASES:
            row: dict[str, Any] = {"members": members, "case": case}
            try:
                row |= profile_attention(with_kernel(flat | over), members, cuda)
            except Exception as err:  # noqa: BLE001 - a failed case is shown, not fatal
                row["error"] = failed(err)
            rows.append(row)
    return rows


def lstm_dtype(flat: dict[str, Any], full: bool) -> dict[str, Any]:
    """The dtype the LSTM's ``nn.LSTM`` returns (and the logits') in one forward under
    bf16-mixed autocast: the architecture study's lstm arm at its gpu width (``full``), else
    at ``flat``'s."""
    from ablate.model import build_model

    shape = LSTM_SHAPE if full else {"model.d_model": flat["model.d_model"]}
    cfg = build_config(flat | shape | {"model.arch": "lstm", "train.precision": PROFILE_PRECISION})
    dev = torch.device("cuda" if flat["train.accelerator"] == "gpu" else "cpu")
    m = cfg.model
    out: dict[str, Any] = {"precision": PROFILE_PRECISION, "shape": [m.n_layers, m.d_model]}
    seen: list[torch.dtype] = []
    try:
        model = build_model(cfg.model, len(CHARS)).to(dev).train()
        lstms = [m for m in model.modules() if isinstance(m, torch.nn.LSTM)]
        for m in lstms:
            m.register_forward_hook(lambda _m, _i, o: seen.append(o[0].dtype))
        x = torch.randint(len(CHARS), (cfg.data.batch_size, cfg.data.seq_len), device=dev)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = model(x)
        out |= {"lstm": str(seen[0]).removeprefix("torch.") if seen else "no nn.LSTM found"}
        out["logits"] = str(logits.dtype).removeprefix("torch.")
    except Exception as err:  # noqa: BLE001 - e.g. a CPU without a bf16 LSTM kernel
        out["error"] = failed(err)
    return out


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


ROWS = ((0, 1), (0, PACK), (STACK, 1))
"""(members, processes) of each row, in the order measured: solo, pack, stack."""


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The path with the most tokens/s in all (solo unless another beats it by ``MARGIN``) and
    the ``ablate run`` arguments that take it; None without a solo figure."""
    solo = next((r for r in rows if row_name(r) == "solo" and r.get("tokens_per_s")), None)
    if solo is None:
        return None
    ok = [r for r in rows if r.get("tokens_per_s")]
    best = max(ok, key=lambda r: r["tokens_per_s"])
    if best["tokens_per_s"] < MARGIN * solo["tokens_per_s"]:
        best = solo
    choice = row_name(best).split(" of ")[0]
    return {
        "choice": choice,
        "row": row_name(best),
        "tokens_per_s": best["tokens_per_s"],
        "x_solo": best["tokens_per_s"] / solo["tokens_per_s"],
        "flops_per_token": best["flops_per_token"],
        "args": VERDICT_ARGS[choice],
    }


def measure(
    precision: str = PROFILE_PRECISION,
    *,
    quick: bool = False,
    peak_tflops: float | None = None,
    log: Callable[[str], Any] = print,
    progress: Callable[[dict[str, Any]], Any] | None = None,
) -> dict[str, Any]:
    """The probe's results (``probe_report.render`` writes them): the rows, the verdict, the
    attention kernels, the LSTM's dtype. ``quick``: the CPU's tiny shape on CUDA too (a smoke
    test of the code, as ``ablate bench --gpu --quick``). ``peak_tflops``: the GPU bench's
    section 0 figure, else looked up (CUDA only). ``progress`` gets the results so far after
    every row."""
    cuda = torch.cuda.is_available()
    tiny = quick or not cuda
    t0 = time.perf_counter()
    r: dict[str, Any] = {"cuda": cuda, "tiny": tiny, "device": device_name(cuda)}
    r["precision"] = precision
    if cuda:
        peak, source = (peak_tflops * 1e12, "the bench's section 0") if peak_tflops else gpu_peak()
        r |= {"peak_tflops": peak / 1e12, "peak_source": source}
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
        for members, processes in ROWS:
            peak = r.get("peak_tflops", 0) * 1e12
            row = measure_row(flat, members, window, peak, cuda, processes)
            r["rows"].append(row)
            r["verdict"] = verdict(r["rows"])
            r["wall_s"] = time.perf_counter() - t0
            what = row.get("error") or f"{row['tokens_per_s']:,.0f} tokens/s"
            log(f"  {row_name(row)}: {what}")
            if progress is not None:
                progress(r)
        r["attention"] = attention_rows(flat, cuda)
        r["lstm"] = lstm_dtype(flat, cuda and not tiny)
    r["wall_s"] = time.perf_counter() - t0
    return r


def run_probe(out: Path, precision: str = PROFILE_PRECISION) -> dict[str, Any]:
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
        lambda: measure(precision, log=run.say, progress=partial),
    )
    v = (r.get("stacked") or {}).get("verdict")
    run.say(f"verdict: {v['choice'] if v else 'none'}")
    run.say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s']:.0f} s)")
    return r
