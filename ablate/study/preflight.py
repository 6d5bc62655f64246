"""Plan-time checks of resolved run configs: what would otherwise fail only when a run starts.

``check_runs`` is called by the study loader (and ``ablate train``) after every run's config is
resolved, so bad input is one ``ConfigError`` line naming the file and key, exit 2, before
anything is written:

* seeds outside ``[0, 2**32 - 1]`` (what numpy and Lightning's seeding accept);
* ``train.devices`` other than 1: a run trains on one device;
* ``train.accelerator: gpu`` on a machine without a CUDA device. ``device=False`` skips this,
  e.g. for a mode that picks its own device (``ablate run smoke``);
* a stacked group (``train.stack`` a number) in a precision stacked groups do not train in:
  ``16-mixed`` needs a loss scaler per member, which the stacked path does not have
  (``bf16-mixed`` needs none);
* absurd sizes: more than ``MAX_PARAMS`` parameters, or activations above ``MAX_ACT_BYTES``;
* data files (``data=False`` skips these): the only check that reads files,
  :func:`ablate.study.data_files.check_data_file`: empty, not UTF-8, or too short for one
  window of ``seq_len + 1`` tokens per row of ``batch_size`` in every split.

Non-finite floats (``optim.lr: .inf``) are rejected by the config models themselves
(``allow_inf_nan=False``). ``check_compile`` (``train.compile`` without a C++ compiler) is
called by whatever is about to train (``ablate run``, ``run smoke``, ``ablate train``), not by
the loader: ``ablate plan`` and ``ablate register`` plan runs that train elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ablate.config import GATED_ACTIVATIONS, ConfigError, RunConfig
from ablate.study.data_files import TextScan, Where, check_data_file

SEED_MAX = 2**32 - 1
MAX_PARAMS = 10**12
"""4 TB of fp32 weights: no single-run ablation comes near; a typo (``d_model: 4e9``) does."""
MAX_ACT_BYTES = 2**50
"""1 PiB of activations per step (Korthikanti et al. 2022 estimate): a typo, not a config."""


def _same(key: str) -> str:
    return key


def estimate_params(cfg: RunConfig, vocab: int = 256) -> int:
    """Rough parameter count: ``V*d + L*(attn + ffn)`` with ``attn = 2*d*d + 2*d*kv_dim`` and
    ``ffn = (3 if gated else 2) * d * hidden`` (an LSTM: ``L * 8 * d * d``), plus a learned
    position table. Within a few percent of the real count; used only as a sanity bound."""
    m = cfg.model
    d, layers = m.d_model, m.n_layers
    emb = vocab * d * (1 if m.tie_embeddings else 2)
    if m.arch == "lstm":
        return emb + layers * 8 * d * d
    kv = m.kv_heads * (d // m.n_heads)
    ffn = (3 if m.activation in GATED_ACTIVATIONS else 2) * d * m.ffn_hidden
    pos = m.max_seq_len * d if m.pos_encoding == "learned" else 0
    return emb + pos + layers * (2 * d * d + 2 * d * kv + ffn)


def estimate_activation_bytes(cfg: RunConfig) -> int:
    """Activation memory of one training step: ``L * s * b * d * (34 + 5 * a * s / d)`` bytes
    (Korthikanti et al. 2022, 16-bit activations, no recomputation)."""
    m, d = cfg.model, cfg.data
    a = m.n_heads if m.arch == "transformer" else 0
    return int(m.n_layers * d.seq_len * d.batch_size * (34 * m.d_model + 5 * a * d.seq_len))


def _check_sizes(cfg: RunConfig, where: Where, source: Path | None) -> None:
    vocab = cfg.data.bpe_vocab_size if cfg.data.tokenizer == "bpe" else 256
    params = estimate_params(cfg, vocab)
    if params > MAX_PARAMS:
        m = cfg.model
        key = max(("model.d_model", "model.n_layers", "model.d_ff"), key=lambda k: _scale(cfg, k))
        raise ConfigError(
            f"~{params:.2g} parameters (d_model={m.d_model}, n_layers={m.n_layers}, "
            f"ffn hidden={m.ffn_hidden}): more than the {MAX_PARAMS:.0e} sanity limit",
            key=where(key),
            source=source,
        )
    act = estimate_activation_bytes(cfg)
    if act > MAX_ACT_BYTES:
        key = max(
            ("data.batch_size", "data.seq_len", "model.d_model", "model.n_layers"),
            key=lambda k: _scale(cfg, k),
        )
        raise ConfigError(
            f"~{act:.2g} bytes of activations per step: more than the 1 PiB sanity limit",
            key=where(key),
            source=source,
        )


def _scale(cfg: RunConfig, key: str) -> float:
    """How far a size key is above its default (to name the likely typo)."""
    defaults = {
        "model.d_model": 128,
        "model.n_layers": 4,
        "model.d_ff": 512,
        "data.batch_size": 12,
        "data.seq_len": 64,
    }
    section, name = key.split(".")
    value = getattr(getattr(cfg, section), name) or 0
    return value / defaults[key]


def _check_seed(cfg: RunConfig, where: Where, source: Path | None) -> None:
    seed = cfg.train.seed
    if not 0 <= seed <= SEED_MAX:
        raise ConfigError(
            f"seed must be in [0, 2**32 - 1], got {seed}", key=where("train.seed"), source=source
        )


def gpu_available() -> bool:
    """Whether torch sees a CUDA device; torch (seconds to import) is asked only on a machine
    with a GPU driver."""
    from ablate.accel import gpu_driver

    if not gpu_driver():
        return False
    import torch

    return torch.cuda.is_available()


def _check_stack(cfg: RunConfig, where: Where, source: Path | None) -> None:
    from ablate.stacking import PRECISIONS, not_stackable

    t = cfg.train
    # ``auto`` and models that train alone anyway (the LSTM) are left to the plan's line
    if t.stack in ("off", "auto") or not_stackable(cfg) != f"precision {t.precision}":
        return
    raise ConfigError(
        f"is {t.precision}, but train.stack={t.stack} trains stacked groups, which run "
        f"{' or '.join(PRECISIONS)} only ({t.precision} needs a loss scaler per member): use "
        "bf16-mixed, or train.stack=off",
        key=where("train.precision"),
        source=source,
    )


def _check_devices(cfg: RunConfig, where: Where, source: Path | None) -> None:
    # a study's throughput comes from many runs at once, not from one run over several devices
    if cfg.train.devices != 1:
        raise ConfigError(
            f"is {cfg.train.devices}, but a run trains on one device (runs share a machine "
            "through --workers, --runs-per-gpu and train.stack)",
            key=where("train.devices"),
            source=source,
        )


def _check_device(cfg: RunConfig, where: Where, source: Path | None, have_gpu: Callable) -> None:
    t = cfg.train
    if t.accelerator == "gpu" and not have_gpu():
        key = where("train.accelerator")
        hint = (
            "run another profile (--profile cpu), or `ablate run smoke` to try its code path on "
            "the CPU"
            if key.startswith("profiles.")
            else "use 'cpu' or 'auto'"
        )
        raise ConfigError(
            f"is 'gpu' but no CUDA GPU is available here ({hint})", key=key, source=source
        )


def check_runs(
    configs: Sequence[tuple[RunConfig, Where]],
    source: str | Path | None = None,
    *,
    data: bool = True,
    device: bool = True,
    tokenize: bool = False,
) -> None:
    """Check resolved run configs; ``ConfigError`` for the first problem (file and key).

    ``configs`` pairs each config with a function mapping a config key to where the study set
    it (for the error message). ``data`` and ``device`` turn those checks off. ``tokenize``
    builds the token cache of a dataset not tokenized yet, so the length check is exact
    (``ablate train``: the run would build it next, in this process).
    """
    source = Path(source) if source is not None else None
    scans: dict[str, TextScan | None] = {}
    gpu: list[bool] = []

    def have_gpu() -> bool:
        if not gpu:
            gpu.append(gpu_available())
        return gpu[0]

    for cfg, where in configs:
        where = where or _same
        _check_seed(cfg, where, source)
        _check_sizes(cfg, where, source)
        _check_stack(cfg, where, source)
        _check_devices(cfg, where, source)
        if device:
            _check_device(cfg, where, source, have_gpu)
        if data:
            check_data_file(cfg, where, source, scans, tokenize)


def check_compile(configs: Iterable[RunConfig], source: str | Path | None = None) -> None:
    """``train.compile: true`` on a machine without a C++ compiler: one ``ConfigError`` line,
    before any run starts (not once per run)."""
    from ablate.accel import compile_problem

    if any(cfg.train.compile for cfg in configs):
        problem = compile_problem()
        if problem:
            raise ConfigError(problem, key="train.compile", source=source)
