"""What a planned study costs in FLOPs, before anything trains (``ablate plan --flops``).

Training FLOPs of a run are the model's own accounting, ``model.flops_per_token(seq_len)``
(``6 N + 6 d vocab + 12 L d T``: forward + backward, the number every run's ``summary.json``
records), times the tokens it trains on, ``max_steps * batch_size * seq_len``. Evaluation is a
forward pass, a third of that per token, over the validation tokens the schedule reads: every
``eval_interval`` steps ``eval_batches`` batches (capped by the split), then the whole split once
and once more at each ``train.eval_lengths`` multiple. Device time is FLOPs over a measured
rate (:func:`measured_rate`): the last CUDA probe's (``reports/bench_probe.json``), else the GPU
pilot's solo runs (``reports/gpu/pilot/stores.tgz``), never an assumed utilisation. Each study's
data reuse (:mod:`ablate.data.reuse`) is printed under the table.

A profile's ``tier`` names the GPU window its runs train in: the table sums each tier, and
:func:`largest_task` gives the longest single task of a study (a run, or the largest stacked
group ``train.stack`` could form: a command must hold it whole, since a task cut at a
command's end starts over on a fresh machine).
"""

from __future__ import annotations

import functools
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.config import ConfigError, DataConfig, ModelConfig, RunConfig
from ablate.data.reuse import DataReuse, data_reuse, describe, split_sizes
from ablate.stacking import not_stackable, plan_groups
from ablate.study import Study

FALLBACK_VOCAB = 256
"""Vocabulary assumed when the dataset is not at hand (a byte-level upper bound for char data)."""


@dataclass(frozen=True)
class RunFlops:
    """One planned run's size and FLOPs."""

    non_embedding_params: int
    flops_per_token: int
    train_tokens: int
    train_flops: float
    eval_flops: float | None
    """Forward FLOPs of every evaluation (periodic, final, ``eval_lengths``); ``None`` when
    the dataset is not on this machine (its validation split's size is unknown)."""

    @property
    def total_flops(self) -> float:
        return self.train_flops + (self.eval_flops or 0.0)


def _data_sizes(data: DataConfig) -> tuple[int, int | None]:
    """``(vocab size, validation tokens)`` of a data config; the fallback vocab and ``None``
    when the dataset is not on this machine (nothing is downloaded for a plan)."""
    sizes = split_sizes(data)
    return (FALLBACK_VOCAB, None) if sizes is None else (sizes[0], sizes[2])


@functools.lru_cache(maxsize=64)
def _model_cost(model_json: str, vocab: int, seq_lens: tuple[int, ...]) -> tuple[int, ...]:
    """``(non-embedding params, flops_per_token at each of seq_lens...)``, built on the meta
    device (no memory, no weights); 0 at a length past the model's (it is not evaluated)."""
    import torch

    from ablate.model import build_model

    with torch.device("meta"):
        model = build_model(ModelConfig.model_validate_json(model_json), vocab)
    limit = model.max_len or max(seq_lens)
    fpt = (model.flops_per_token(t) if t <= limit else 0 for t in seq_lens)
    return model.param_counts()["non_embedding"], *fpt


def run_flops(cfg: RunConfig) -> RunFlops:
    """The FLOPs of training (and evaluating) ``cfg`` once, from its model's own accounting."""
    d, t = cfg.data, cfg.train
    vocab, val_tokens = _data_sizes(d)
    lengths = [int(round(m * d.seq_len)) for m in t.eval_lengths if m != 1]
    params, fpt, *fpt_at = _model_cost(cfg.model.model_dump_json(), vocab, (d.seq_len, *lengths))
    train_tokens = t.max_steps * d.batch_size * d.seq_len
    eval_flops = None
    if val_tokens is not None:
        per_eval = min(d.eval_bs * d.seq_len * (t.eval_batches or val_tokens), val_tokens)
        periodic = (t.max_steps // t.eval_interval) * per_eval * fpt
        final = val_tokens * (fpt + sum(fpt_at))
        eval_flops = (periodic + final) / 3  # forward only: a third of forward + backward
    return RunFlops(params, fpt, train_tokens, float(fpt * train_tokens), eval_flops)


def run_reuse(cfg: RunConfig) -> DataReuse | None:
    """How often ``cfg`` draws each distinct training window (``data.reuse``); ``None`` when
    the dataset is not on this machine."""
    sizes = split_sizes(cfg.data)
    return None if sizes is None else data_reuse(cfg.data, cfg.train.max_steps, sizes[1])


def reuse_line(study: Study) -> str:
    """``'<study>: data: 0.32 windows drawn per distinct window (...)'``, with a warning when a
    run draws more windows than its split has: the same sequences again."""
    reuses = [run_reuse(run.config) for run in study.runs]
    if not reuses or None in reuses:
        return f"{study.name}: data reuse unknown (the dataset is not on this machine)"
    line = f"{study.name}: data: {describe(reuses)}"
    worst = max(r.per_window for r in reuses)
    if worst > 1:
        line += (
            f"\nwarning: {study.name}: runs draw up to {worst:.1f}x as many windows as the "
            "split has: the same sequences again (data.order: random draws fresh ones)"
        )
    return line


def study_flops(study: Study) -> dict[str, RunFlops]:
    """``run_flops`` of every planned run, by run id."""
    return {run.run_id: run_flops(run.config) for run in study.runs}


AUTO_WORST_CASE = 2**31
"""``auto``'s group size where nothing is measured: no constant bounds it (the device's free
memory does), so at worst every run of one shape trains in one group."""


def worst_case_limit(cfg: RunConfig) -> int:
    """The most members ``cfg``'s runs could stack in: its ``train.stack`` N, or for ``auto``
    and ``off`` (a window may turn ``auto`` on with ``--set``) all of them
    (``AUTO_WORST_CASE``); 1 when the model cannot stack."""
    if not_stackable(cfg):
        return 1
    stack = cfg.train.stack
    return AUTO_WORST_CASE if stack in ("auto", "off") else int(stack)


def largest_task(study: Study) -> tuple[int, float]:
    """(members, FLOPs with evaluation) of the study's costliest task: one run, or the
    largest stacked group :func:`worst_case_limit` allows."""
    costs = study_flops(study)
    groups = plan_groups(study.runs, lambda r: r.config, worst_case_limit)
    sizes = [(len(g), sum(costs[r.run_id].total_flops for r in g)) for g in groups]
    return max(sizes, key=lambda x: x[1], default=(0, 0.0))


def tiers(studies: Sequence[Study]) -> dict[int | None, list[Study]]:
    """The studies by their profile's ``tier`` (None: no tier), lowest tier first."""
    out: dict[int | None, list[Study]] = {}
    for study in sorted(studies, key=lambda s: (s.tier is None, s.tier or 0)):
        out.setdefault(study.tier, []).append(study)
    return out


def device_minutes(flops: float, rate: float) -> float:
    """Minutes of one device at ``rate`` FLOP/s."""
    return flops / rate / 60


@dataclass(frozen=True)
class Rate:
    """A measured training rate: FLOP/s (the models' own accounting) and where it comes from."""

    flops_per_s: float
    source: str


PROBE_JSON = Path("reports/bench_probe.json")
PILOT_STORES = Path("reports/gpu/pilot/stores.tgz")


def probe_rate(path: Path = PROBE_JSON) -> Rate | None:
    """The rate of the path the last probe chose, where it ran on CUDA at full size
    (``ablate bench --probe``'s JSON: its ``verdict``); None otherwise."""
    try:
        probe = json.loads(path.read_text())
        r, v = probe["stacked"], probe["stacked"]["verdict"]
        rate = float(v["flops_per_token"]) * float(v["tokens_per_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not r.get("cuda") or r.get("tiny") or not rate > 0:
        return None
    what = f"the CUDA probe of {probe.get('started', '?')} on {r.get('device', '?')}"
    return Rate(rate, f"{what} ({v['choice']}, training steps only; {path})")


def _archived_runs(path: Path) -> dict[str, dict[str, bytes]]:
    """``<study>/<run id>`` -> its ``summary.json`` and ``run.yaml`` bytes, from a store's
    archive (``stores.tgz``)."""
    out: dict[str, dict[str, bytes]] = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            run, _, name = m.name.rpartition("/")
            if m.isfile() and name in ("summary.json", "run.yaml"):
                out.setdefault(run, {})[name] = tar.extractfile(m).read()
    return out


def pilot_rate(path: Path = PILOT_STORES) -> Rate | None:
    """The mean rate of the completed runs in the GPU pilot's archived store: each run's
    FLOPs (training and evaluation, as :func:`run_flops` counts them) over its wall time."""
    rates, devices = [], set()
    try:
        for files in _archived_runs(path).values():
            summary = json.loads(files.get("summary.json") or "{}")
            if summary.get("status") != "completed" or "run.yaml" not in files:
                continue
            cfg = RunConfig.model_validate(yaml.safe_load(files["run.yaml"])["config"])
            rates.append(run_flops(cfg).total_flops / float(summary["wall_time_s"]))
            devices.add(str((summary.get("environment") or {}).get("device")))
    except (OSError, tarfile.TarError, ValueError, KeyError, TypeError):
        return None
    if not rates:
        return None
    where = ", ".join(sorted(devices))
    source = f"the GPU pilot's {len(rates)} solo runs on {where}, evaluations included ({path})"
    return Rate(sum(rates) / len(rates), source)


def measured_rate() -> Rate:
    """The rate ``ablate plan --flops`` costs minutes at: the last CUDA probe's, else the GPU
    pilot's (``ConfigError`` when neither file is here)."""
    rate = probe_rate() or pilot_rate()
    if rate is None:
        raise ConfigError(
            f"no measured GPU rate: neither {PROBE_JSON} from a CUDA probe nor {PILOT_STORES} "
            "(give one with --tflops)",
            key="--flops",
        )
    return rate


def _si(flops: float | None) -> str:
    if flops is None:
        return "?"
    return f"{flops / 1e15:,.2f} PFLOP" if flops >= 1e15 else f"{flops / 1e12:,.3g} TFLOP"


def _minutes(m: float) -> str:
    return f"{m:.1f}" if m >= 1 else f"{m:.2g}"


def cost_groups(study: Study) -> list[tuple[str, list[RunFlops]]]:
    """The study's runs grouped by identical per-run cost, in plan order: ``(label, runs)``,
    the label naming the first variant and how many more cost the same."""
    costs = study_flops(study)
    groups: dict[tuple, tuple[list[str], list[RunFlops]]] = {}
    for run in study.runs:
        c = costs[run.run_id]
        key = (c.non_embedding_params, c.train_tokens, c.train_flops, c.eval_flops)
        variants, runs = groups.setdefault(key, ([], []))
        if run.variant not in variants:
            variants.append(run.variant)
        runs.append(c)
    out = []
    for variants, runs in groups.values():
        more = f" +{len(variants) - 1} alike" if len(variants) > 1 else ""
        out.append(((variants[0] or "-") + more, runs))
    return out


def _row(table: Table, study: str, label: str, runs: list[RunFlops], minutes, **kw) -> None:
    train = sum(r.train_flops for r in runs)
    unknown = any(r.eval_flops is None for r in runs)
    sizes = {(r.non_embedding_params, r.train_tokens) for r in runs}
    params, tokens = (f"{n:,}" for n in next(iter(sizes))) if len(sizes) == 1 else ("", "")
    table.add_row(
        study,
        escape(label),
        str(len(runs)),
        params,
        tokens,
        _si(train),
        "?" if unknown else _si(sum(r.eval_flops for r in runs)),
        _minutes(minutes(sum(r.total_flops for r in runs))),
        **kw,
    )


def print_flops(studies: Sequence[Study], *, rate: Rate, console: Console) -> float:
    """One row per group of equally costly variants (seeds summed), one per study and the
    total, in minutes at ``rate``; under it each tier's longest task and each study's data
    reuse. Returns the total training FLOPs of all studies. Minutes include evaluation."""
    title = f"FLOPs; minutes at {rate.flops_per_s / 1e12:.0f} TFLOP/s, measured: {rate.source}"
    table = Table(title=escape(title), title_justify="left")
    for col in ("study", "variants", "runs", "params (non-emb)", "tokens/run", "train", "eval"):
        table.add_column(col, justify="left" if col in ("study", "variants") else "right")
    table.add_column("minutes", justify="right")

    def minutes(flops: float) -> float:
        return device_minutes(flops, rate.flops_per_s)

    everything: list[RunFlops] = []
    notes = []
    by_tier = tiers(studies)
    for tier, members in by_tier.items():
        in_tier: list[RunFlops] = []
        for study in members:
            name = escape(study.name)
            groups = cost_groups(study)
            for label, runs in groups:
                _row(table, name, label, runs, minutes)
            runs = [r for _, group in groups for r in group]
            _row(table, f"[bold]{name}[/]", "all", runs, minutes, end_section=True)
            in_tier += runs
        if tier is not None:
            label = f"[bold]tier {tier}[/]"
            _row(table, label, _names(members), in_tier, minutes, end_section=True)
            notes.append(_longest(tier, members, minutes))
        everything += in_tier
    if len(studies) > 1:
        _row(table, "[bold]total[/]", "", everything, minutes)
    console.print(table)
    for line in notes + [reuse_line(s) for s in studies]:
        console.print(escape(line), soft_wrap=True)
    return sum(r.train_flops for r in everything)


def _names(studies: Sequence[Study]) -> str:
    return ", ".join(s.name for s in studies)


def _longest(tier: int, studies: Sequence[Study], minutes) -> str:
    """One line: the tier's longest single task (a run or a stacked group) in minutes."""
    study = max(studies, key=lambda s: largest_task(s)[1])
    members, flops = largest_task(study)
    what = "run" if members == 1 else f"stacked group of {members} runs"
    return (
        f"tier {tier}: longest task {_minutes(minutes(flops))} min ({study.name}: a {what}, "
        f"{_si(flops)}; a group is train.stack's N, or under auto every run of one shape)"
    )
