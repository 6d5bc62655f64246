"""The stacked probe: ``ablate bench --probe`` and section 6 of ``ablate bench --gpu``.

The first GPU command of a session (docs/gpu.md) decides between stacking a study's runs
(``train.stack``) and packing them as processes (``--runs-per-gpu``). It measures, at the
reference study's gpu shape (6L/6H/384d, ctx 256, batch 64, dropout 0.2, bf16-mixed), a solo
run and stacked groups of 1, 4 and 8:

* tokens/s and MFU: runs trained by ``train_run`` / ``train_group`` into a temporary store, as
  ``ablate run`` trains them, so what is timed is the path the studies take (Lightning's loop
  for solo, the group's loop for stacks, the one AdamW path for both). Two runs of ``TIMED``
  steps; tokens/s = the extra steps' tokens (all members) / the extra wall time. Each run ends
  synchronized (its final evaluation reads the loss), so set-up, final evaluation and
  checkpoint cancel. (The runs' own ``tokens_per_s``, kept in the JSON, is their last log
  interval; Lightning's solo figure reads its clock before the read that waits for the GPU, so
  on a GPU it can leave queued work out.) MFU = the summary's ``flops_per_token`` x tokens/s
  / the dense bf16 peak (``machine.GPU_BF16_PEAK``, else a measured matmul).
* peak memory: ``torch.cuda.max_memory_allocated`` over the longer timed run, and per member.
* host reads and kernel-launching operations per step: ``training.opcount.OpCounter`` around the
  whole run at two lengths (``count_window``), the difference per step. The lengths are whole
  log intervals of the profile, so the log step's reads are in the figure at the cadence a
  real run has them (the profile's grad-norm steps, every 50, fall outside), and set-up, final
  evaluation and checkpoint cancel. Counted before the timed runs, which the counter's Python
  hook per operation would slow; so the counted runs also take the one-time set-up (CUDA's
  lazy initialisation, the first kernels) out of the timed ones.
* which SDPA kernel ran: one forward + backward of the solo model and of a stack of 4 under
  ``torch.profiler``, with dropout (the profile's 0.2) and without, and with ALiBi: the aten
  SDPA op the dispatcher picked (any device) and the CUDA kernels' names (CUDA only).
* the LSTM's output dtype under bf16-mixed autocast (the architecture study's lstm arm), from a
  forward hook on its ``nn.LSTM``.

The data is a fixed pseudo-random text of tinyshakespeare's 65 characters written to a
temporary file: the probe measures speed, not quality, so it needs no dataset on the machine
(a lent GPU machine has no network), and the same text gives the same token-cache entry.

Without CUDA it runs the same code at a tiny shape (``CPU_SHAPE``, ``CPU_TIMED``) in well under
a minute on two cores, and the CUDA-only figures (MFU, peak memory, CUDA kernel names) read
"not measured (no CUDA)": a test runs it so its first run on a GPU is not its first run. A row
that fails (a run ending ``failed``, an exception) keeps its place in the table with the error's
first line: the probe goes on with the next row.
"""

from __future__ import annotations

import gc
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
from ablate.config import RunConfig, build_config, flatten
from ablate.store import RunStore
from ablate.training.opcount import OpCounter

PROFILE = "gpu"  # of the reference study (bench.loops.REFERENCE_STUDY)
PROFILE_PRECISION = "bf16-mixed"  # what every gpu profile trains at
MEMBERS = (0, 1, 4, 8)  # 0: a solo run (train_run); k: a stacked group of k (train_group)
# the timed runs' lengths: tokens/s from the steps between them (80 steps of the gpu shape:
# about a second solo on an H100-class GPU, far above the run-to-run noise of set-up)
TIMED, CPU_TIMED = (20, 100), (10, 30)
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
SDPA_STACK = 4  # the stack whose attention is profiled
CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # tinyshakespeare's
TEXT_CHARS = 1_000_000
QUIET = {"tracking.wandb": False, "train.progress": False}


def failed(err: BaseException | str) -> str:
    """A row's error as one line: ``failed: <first line>``."""
    text = err if isinstance(err, str) else f"{type(err).__name__}: {err}"
    lines = [s.strip() for s in str(text).strip().splitlines() if s.strip()]
    return "failed: " + (lines[0] if lines else "unknown error")[:200]


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


def member_configs(cfg: RunConfig, members: int) -> list[RunConfig]:
    """The group's runs: ``cfg`` at seeds 0..members-1 (a seed study's stack)."""
    return [
        cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": s})})
        for s in range(members)
    ]


def train(cfg: RunConfig, members: int, root: Path) -> list[dict[str, Any]]:
    """Train ``cfg`` solo (``members=0``) or as a stacked group into a store at ``root``; the
    runs' summaries."""
    from ablate.training.stacked.group import train_group
    from ablate.training.train import train_run

    store = RunStore(root)
    if members == 0:
        return [train_run(cfg, store.run("probe", cfg.run_id()))]
    cfgs = member_configs(cfg, members)
    return train_group(cfgs, [store.run("probe", c.run_id()) for c in cfgs])


def failure(summaries: list[dict[str, Any]]) -> str | None:
    """The first run that did not complete, as ``failed: ...``; None when all did."""
    for s in summaries:
        if s.get("status") != "completed":
            return failed(s.get("error") or f"run ended {s.get('status')}")
    return None


def run_length(steps: int) -> dict[str, Any]:
    """Config keys for a run of ``steps`` steps with no evaluation before the final one."""
    return {"train.max_steps": steps, "train.eval_interval": 10**6}


def timed_runs(
    flat: dict[str, Any], members: int, window: tuple[int, int], cuda: bool
) -> dict[str, Any]:
    """Tokens/s of all members from the wall time of two runs of ``window`` steps (each ends
    synchronized: its final evaluation reads the loss), so set-up, final evaluation and
    checkpoint cancel; the peak CUDA memory of the longer; the run's FLOPs per token and
    attention kernel, and the summaries' own figure (their last log interval)."""
    from ablate.bench.machine import sync

    walls, summaries = [], []
    for steps in window:
        cfg = build_config(flat | run_length(steps))
        if cuda:
            gc.collect()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        with tempfile.TemporaryDirectory(prefix="ablate-probe-") as root:
            t = time.perf_counter()
            summaries = train(cfg, members, Path(root))
            sync()
            walls.append(time.perf_counter() - t)
        if error := failure(summaries):
            return {"error": error}
    d = build_config(flat).data
    tokens = (window[1] - window[0]) * max(members, 1) * d.batch_size * d.seq_len
    out = {
        "tokens_per_s": tokens / (walls[1] - walls[0]) if walls[1] > walls[0] else None,
        "wall_s": walls,
        "summary_tokens_per_s": sum(s.get("tokens_per_s") or 0.0 for s in summaries),
        "flops_per_token": summaries[0]["flops_per_token"],
        "attn_kernel": summaries[0].get("attn_kernel"),
        "attn_backend": cfg.train.attn_backend,
    }
    if cuda:
        out["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


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
    flat: dict[str, Any], members: int, window: tuple[int, int], peak: float | None, cuda: bool
) -> dict[str, Any]:
    """One row: the counted runs first (they also warm the path up: one-time set-up such as
    CUDA's lazy initialisation would otherwise fall into the timed runs), then the timed ones.
    A failed run ends the row with its error."""
    row: dict[str, Any] = {"members": members}
    try:
        row |= counted_runs(flat, members)
        if "error" not in row:
            row |= timed_runs(flat, members, window, cuda)
    except Exception as err:  # noqa: BLE001 - a failed row is shown, the others still run
        row["error"] = failed(err)
    if row.get("tokens_per_s"):
        k = max(members, 1)
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
    """Which SDPA kernel ran, solo and in a stack of ``SDPA_STACK``, per attention case."""
    rows = []
    for members in (0, SDPA_STACK):
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


def measure(
    precision: str = PROFILE_PRECISION,
    *,
    quick: bool = False,
    peak_tflops: float | None = None,
    log: Callable[[str], Any] = print,
) -> dict[str, Any]:
    """The probe's results (``probe_report.render`` writes them): the rows solo and stacked,
    the attention kernels, the LSTM's dtype. ``quick``: the CPU's tiny shape on CUDA too (a
    smoke test of the code, as ``ablate bench --gpu --quick``). ``peak_tflops``: the GPU
    bench's section 0 figure, else looked up (CUDA only)."""
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
        r["rows"] = []
        for k in MEMBERS:
            row = measure_row(flat, k, window, r.get("peak_tflops", 0) * 1e12, cuda)
            r["rows"].append(row)
            what = row.get("error") or f"{row.get('tokens_per_s') or 0:,.0f} tokens/s"
            log(f"  {'solo' if k == 0 else f'stack of {k}'}: {what}")
        r["attention"] = attention_rows(flat, cuda)
        r["lstm"] = lstm_dtype(flat, cuda and not tiny)
    r["wall_s"] = time.perf_counter() - t0
    return r


def run_probe(out: Path, precision: str = PROFILE_PRECISION) -> dict[str, Any]:
    """``ablate bench --probe``: measure, write ``out`` and its JSON (on a CPU too)."""
    from datetime import datetime

    from ablate.bench import probe_report
    from ablate.bench.markdown import Sections

    r: dict[str, Any] = {"started": datetime.now().isoformat(timespec="seconds")}
    run = Sections(r, after=lambda: probe_report.write(r, out))
    run.run("stacked", probe_report.HEADING, lambda: measure(precision, log=run.say))
    run.say(f"wrote {out} and {out.with_suffix('.json')} ({r['wall_s']:.0f} s)")
    return r
