"""The probe's profile of a stack of 8 (``ablate.bench.probe``): ``STEPS`` steps of a stacked
group's own training loop (``train_group``: data loading, logging and its host reads included)
under ``torch.profiler``, eager and compiled, summarised into ``probe.json`` (never the trace):
device time by kind of kernel (:func:`kernel_kind`), the device's busy share of the wall time,
device-to-host copies, synchronisations and host reads.

The window is set by the optimizer: a global ``Optimizer.step`` post-hook (public torch API)
steps the profiler after every training step, whose schedule skips the first ``WAIT`` steps,
warms up over one and records the next ``STEPS``; the wall time is that of the recorded
``ProfilerStep`` ranges (to the last kernel's end on CUDA, whose kernels run behind the host).

On CUDA the kernels are the device's (a single stream's kernels do not overlap; the busy time is
the union of their intervals all the same). On a CPU (``"activity": "cpu"``) the same summary
reads the aten operations (their self time: what would be kernels on a GPU) and, compiled, the
inductor graphs' calls, whose C++ kernels run inside them; busy is their time over the wall, the
rest being Python and the loop's host work. CUDA's copies and synchronisations are then None.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from ablate.bench.probe_runs import failure, run_length, train
from ablate.config import build_config

STEPS, WAIT = 12, 3
KINDS = ("gemm", "attention", "triton", "elementwise", "optimizer", "other")
"""``triton``: inductor's generated kernels (Triton on CUDA, C++ inside a graph's call on a
CPU); ``optimizer``: AdamW, clipping's norms (fused and foreach kernels); ``elementwise``:
pointwise, normalisation, softmax, dropout, reductions, casts, copies, fills and concatenation;
``other``: the rest (memcpy and memset, indexing, the embedding, Python-side tensor checks)."""
# checked in this order: inductor's names may name the ops they fuse, flash kernels are CUTLASS
_WORDS = (
    ("triton", ("triton", "cpp_fused", "compiledfxgraph", "compiledfunction", "compiled region")),
    ("attention", ("flash", "fmha", "attention", "attn", "sdpa", "mem_eff", "cudnn")),
    ("optimizer", ("adam", "multi_tensor_apply", "foreach")),
    (
        "gemm",
        ("gemm", "gemv", "nvjet", "xmma", "cutlass", "cublas", "wmma", "aten::mm", "aten::addmm")
        + ("aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::_addmm_activation"),
    ),
    (
        "elementwise",
        ("elementwise", "reduce", "norm", "softmax", "dropout", "bernoulli", "gelu", "relu")
        + ("silu", "tanh", "sigmoid", "aten::add", "aten::mul", "aten::div", "aten::sub")
        + ("aten::where", "aten::exp", "aten::sum", "aten::mean", "aten::neg", "aten::pow")
        + ("sqrt", "aten::clamp", "aten::masked", "aten::_to_copy", "aten::to", "nll_loss")
        + ("aten::copy_", "aten::fill_", "aten::zero", "aten::cat", "catarray"),
    ),
)
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
HOST_READS = ("aten::_local_scalar_dense",)  # .item(), a bool of a tensor: one read each


def kernel_kind(name: str) -> str:
    """The kind (``KINDS``) of a CUDA kernel or a CPU operation, by its name."""
    low = name.lower()
    for kind, words in _WORDS:
        if any(w in low for w in words):
            return kind
    return "other"


class Event(NamedTuple):
    """What the summary reads of a profiler event: ``kernel``: a device kernel (or copy) on
    CUDA, an operation that counts as one on a CPU; times in microseconds, ``self_us`` the
    event's own (a CPU operation's, without the operations it calls); ``nested``: called by
    another aten operation (``aten::item`` aside), not by Python: a CPU kernel's own reads
    (fused AdamW's of its step count on a CPU) are not the loop's."""

    name: str
    kernel: bool
    start_us: float
    end_us: float
    self_us: float
    nested: bool = False


def _union_us(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``spans`` (start, end)."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def summarise(events: list[Event], steps: int, cuda: bool) -> dict[str, Any]:
    """The summary of one recorded window of ``steps`` steps: kernel milliseconds per step by
    kind, busy % (kernel time, as a union on CUDA, over the wall), and counts per window."""
    marks = [e for e in events if e.name.startswith("ProfilerStep")]
    kernels = [e for e in events if e.kernel]
    if not marks or not kernels:
        return {"error": "the profile recorded no steps or no kernels"}
    start = min(e.start_us for e in marks)
    end = max([e.end_us for e in marks] + ([e.end_us for e in kernels] if cuda else []))
    by_kind = dict.fromkeys(KINDS, 0.0)
    for e in kernels:
        by_kind[kernel_kind(e.name)] += e.end_us - e.start_us if cuda else e.self_us
    busy = _union_us([(e.start_us, e.end_us) for e in kernels]) if cuda else sum(by_kind.values())
    wall = end - start
    out: dict[str, Any] = {
        "wall_ms_per_step": wall / steps / 1e3,
        "kernel_ms_per_step": {k: v / steps / 1e3 for k, v in by_kind.items()},
        "busy_pct": 100 * busy / wall if wall > 0 else None,
        "host_reads": sum(e.name in HOST_READS and not e.nested for e in events),
        "dtoh_copies": sum(e.kernel and "dtoh" in e.name.lower() for e in events),
        "syncs": sum(e.name in SYNCS for e in events),
    }
    if not cuda:
        out |= {"dtoh_copies": None, "syncs": None}
    return out


def events_of(prof: Any, cuda: bool) -> list[Event]:
    """A finished window's events: on CUDA its device events are the kernels, on a CPU its
    aten operations and inductor graphs' calls."""
    from torch.autograd import DeviceType

    def nested(e: Any) -> bool:
        parent = e.cpu_parent
        while parent is not None and parent.name == "aten::item":
            parent = parent.cpu_parent
        return parent is not None and parent.name.startswith("aten::")

    out = []
    for e in prof.events():
        device = e.device_type != DeviceType.CPU
        kernel = device if cuda else e.name.startswith("aten::") or kernel_kind(e.name) == "triton"
        span, own = e.time_range, e.self_cpu_time_total
        out.append(Event(e.name, kernel, span.start, span.end, own, nested(e)))
    return out


def profile_steps(flat: dict[str, Any], members: int, cuda: bool) -> dict[str, Any]:
    """The summary of ``STEPS`` steps of a group of ``members`` trained with ``flat`` (compiled
    when it says so: after the compiled row, whose graphs the run reuses)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    got: dict[str, list[Event]] = {}
    plan = schedule(wait=WAIT, warmup=1, active=STEPS, repeat=1)

    def ready(prof: Any) -> None:
        got["events"] = events_of(prof, cuda)

    cfg = build_config(flat | run_length(WAIT + 1 + STEPS + 1))
    with profile(activities=acts, schedule=plan, on_trace_ready=ready) as prof:
        hook = register_optimizer_step_post_hook(lambda *_: prof.step())
        try:
            with tempfile.TemporaryDirectory(prefix="ablate-probe-") as root:
                summaries = train(cfg, members, Path(root))
        finally:
            hook.remove()
    if error := failure(summaries):
        return {"error": error}
    if "events" not in got:
        return {"error": "the profiler's recorded window never closed"}
    head = {"activity": "cuda" if cuda else "cpu", "members": members, "steps": STEPS}
    return head | {"compiled": cfg.train.compile} | summarise(got["events"], STEPS, cuda)
