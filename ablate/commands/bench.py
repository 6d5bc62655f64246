"""``ablate bench``: the benchmarks (:mod:`ablate.bench`), one report each."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ablate.commands.options import fail
from ablate.config import ConfigError

DEFAULT_OUT = Path("reports/bench.md")


def bench(
    quick: Annotated[bool, typer.Option(help="Small sizes: a smoke test.")] = False,
    out: Annotated[Path, typer.Option(help="Where to write the report.")] = DEFAULT_OUT,
    gpu: Annotated[
        bool,
        typer.Option(help="The GPU acceptance bench (reports/bench_gpu.md); no CUDA: says so."),
    ] = False,
    chaos: Annotated[
        bool,
        typer.Option(
            help="Crash safety: kill -9 workers and drivers of a 24-run study (local and Ray) "
            "until it completes; reports/bench_chaos.md and section 6 of bench.md."
        ),
    ] = False,
    probe: Annotated[
        bool,
        typer.Option(
            help="The probe (reports/bench_probe.md): solo and a stack of 8, eager, compiled and "
            "with CUDA graphs, a profile of its steps, a stack = solo check, then a pack of 4 "
            "and a compiled stack of 16 if time is left, at the reference gpu shape, and the "
            "verdicts window.sh applies; without CUDA at a tiny shape, CUDA figures 'not "
            "measured'."
        ),
    ] = False,
    compiled: Annotated[
        bool | None,
        typer.Option(
            "--compiled/--no-compiled",
            help="With --probe: measure its compiled rows (default: on CUDA only; on a CPU "
            "inductor's C++ takes minutes).",
        ),
    ] = None,
    seconds: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="With --probe: its budget (default 180, window.sh's PROBE_SECONDS); the rows "
            "it runs only if time is left (the pack, the stack of 16) run when the time left "
            "holds their planned seconds.",
        ),
    ] = None,
    section: Annotated[
        str | None,
        typer.Option(
            help="Measure one section of the CPU bench (overhead, speed, quality, efficiency, "
            "study, data, stacked, stepcost, startup; nanogpt: nanoGPT's procedure on "
            "the reference study's 8 seeds, ~16 min, only when named) and put it into the existing "
            "report."
        ),
    ] = None,
) -> None:
    """Measure framework overhead, model speed, time-to-quality and efficiency."""
    if chaos:
        from ablate.bench.chaos import run_chaos

        try:
            run_chaos(quick=quick, out=_out(out, "reports/bench_chaos.md"))
        except RuntimeError as err:
            fail(err, code=1)
    elif probe:
        from ablate.bench.probe import run_probe

        run_probe(_out(out, "reports/bench_probe.md"), compiled=compiled, seconds=seconds)
    elif gpu:
        from ablate.bench.gpu import run_gpu_bench

        run_gpu_bench(quick=quick, out=_out(out, "reports/bench_gpu.md"))
    else:
        _cpu_bench(quick, out, section)


def _out(out: Path, own: str) -> Path:
    """``--out`` as given, else the bench's own report (not the CPU bench's)."""
    return Path(own) if out == DEFAULT_OUT else out


def _cpu_bench(quick: bool, out: Path, section: str | None) -> None:
    from ablate.bench.cpu import check_section, run_bench

    try:
        check_section(section)
    except ValueError as err:
        fail(err)
    try:
        run_bench(quick=quick, out=out, only=section)
    except ConfigError as err:  # e.g. the data cannot be had offline: one line, nothing written
        fail(err)
