"""Plan-time checks of resolved run configs: what would otherwise fail only when a run starts.

``check_runs`` is called by the study loader (and ``ablate train``) after every run's config is
resolved, so bad input is one ``ConfigError`` line naming the file and key, exit 2, before
anything is written:

* seeds outside ``[0, 2**32 - 1]`` (what numpy and Lightning's seeding accept);
* ``train.accelerator: gpu`` on a machine without a CUDA device, and a run on the CPU
  (``cpu``, or ``auto`` without a GPU) in a precision this CPU cannot train the model in: an
  LSTM in bf16 where oneDNN has no bf16 LSTM kernel (``ablate.accel.cpu_precision_problem``,
  which asks the CPU itself). ``device=False`` skips these, e.g. for a mode that picks its own
  device and precision (``--smoke``);
* absurd sizes: more than ``MAX_PARAMS`` parameters, or activations above ``MAX_ACT_BYTES``;
* data files (``data=False`` skips these): empty, not UTF-8, or too short for one window of
  ``seq_len + 1`` tokens per row of ``batch_size`` in every split. Each file is read once per
  check, however many runs use it.

Non-finite floats (``optim.lr: .inf``) are rejected by the config models themselves
(``allow_inf_nan=False``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from ablate.config import GATED_ACTIVATIONS, ConfigError, RunConfig

SEED_MAX = 2**32 - 1
MAX_PARAMS = 10**12
"""4 TB of fp32 weights: no single-run ablation comes near; a typo (``d_model: 4e9``) does."""
MAX_ACT_BYTES = 2**50
"""1 PiB of activations per step (Korthikanti et al. 2022 estimate): a typo, not a config."""

BINARY_SUFFIXES = (".bin", ".npy", ".npz", ".arrow", ".parquet")
"""Data files that are token arrays, not text: the text checks do not apply."""

# key -> "where it was set" (the study's key path); identity when not known
Where = Callable[[str], str]


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
    import torch

    return torch.cuda.is_available()


def _check_device(cfg: RunConfig, where: Where, source: Path | None, have_gpu: Callable) -> None:
    t = cfg.train
    if t.accelerator == "gpu" and not have_gpu():
        raise ConfigError(
            "is 'gpu' but no CUDA GPU is available here (use 'cpu' or 'auto')",
            key=where("train.accelerator"),
            source=source,
        )
    if t.accelerator == "cpu" or (t.accelerator == "auto" and not have_gpu()):
        from ablate.accel import cpu_precision_problem

        if problem := cpu_precision_problem(cfg.model.arch, t.precision):
            raise ConfigError(problem, key=where("train.precision"), source=source)


def _upper_token_count(text: str, tokenizer: str) -> int:
    """Tokens the text can yield at most: exact for char and word, UTF-8 bytes for BPE."""
    if tokenizer == "char":
        return len(text)
    if tokenizer == "word":
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return sum(len(line.split()) + 1 for line in lines)  # + <eos> per line
    return len(text.encode("utf-8"))


def _check_length(cfg: RunConfig, n: int, path: Path, where: Where, source: Path | None) -> None:
    """Every split must hold one window of ``seq_len + 1`` tokens in each of its rows."""
    from ablate.data import split_bounds

    d = cfg.data
    a, b = split_bounds(n, d.val_fraction, d.test_fraction)
    splits = [("train", a, d.batch_size, "data.batch_size"), ("val", b - a, d.eval_bs, None)]
    if d.test_fraction > 0:
        splits.append(("test", n - b, d.eval_bs, None))
    for split, tokens, rows, rows_key in splits:
        if tokens // rows < d.seq_len + 1:
            rows_key = rows_key or (
                "data.eval_batch_size" if d.eval_batch_size else "data.batch_size"
            )
            raise ConfigError(
                f"{path} is too short: its {split} split has at most {tokens} tokens, fewer "
                f"than {rows} rows ({rows_key}) x {d.seq_len + 1} (seq_len + 1)",
                key=where("data.seq_len"),
                source=source,
            )


def _check_data(
    cfg: RunConfig, where: Where, source: Path | None, texts: dict[str, tuple[Path, str] | None]
) -> None:
    from ablate.data import DATASETS, read_text, resolve_dataset

    name = cfg.data.dataset
    if name not in texts:
        path = Path(name).expanduser()
        if name in DATASETS or ":" in name or path.suffix in BINARY_SUFFIXES:
            # registered (verified by its sha256 when the run fetches it), a remote or plugin
            # source (nothing is downloaded at plan time) or token arrays: not checked as text
            texts[name] = None
        else:
            try:
                path = resolve_dataset(name)
                texts[name] = (path, read_text(path))
            except ConfigError as err:
                raise ConfigError(err.message, key=where("data.dataset"), source=source) from None
    entry = texts[name]
    if entry is None:
        return
    path, text = entry
    _check_length(cfg, _upper_token_count(text, cfg.data.tokenizer), path, where, source)


def check_runs(
    configs: Sequence[tuple[RunConfig, Where]],
    source: str | Path | None = None,
    *,
    data: bool = True,
    device: bool = True,
) -> None:
    """Check resolved run configs; ``ConfigError`` for the first problem (file and key).

    ``configs`` pairs each config with a function mapping a config key to where the study set
    it (for the error message). ``data`` and ``device`` turn those checks off.
    """
    source = Path(source) if source is not None else None
    texts: dict[str, tuple[Path, str] | None] = {}
    gpu: list[bool] = []

    def have_gpu() -> bool:
        if not gpu:
            gpu.append(gpu_available())
        return gpu[0]

    for cfg, where in configs:
        where = where or _same
        _check_seed(cfg, where, source)
        _check_sizes(cfg, where, source)
        if device:
            _check_device(cfg, where, source, have_gpu)
        if data:
            _check_data(cfg, where, source, texts)
