"""Plan-time checks of resolved run configs: what would otherwise fail only when a run starts.

``check_runs`` is called by the study loader (and ``ablate train``) after every run's config is
resolved, so bad input is one ``ConfigError`` line naming the file and key, exit 2, before
anything is written:

* seeds outside ``[0, 2**32 - 1]`` (what numpy and Lightning's seeding accept);
* ``train.accelerator: gpu`` on a machine without a CUDA device. ``device=False`` skips this,
  e.g. for a mode that picks its own device (``--smoke``);
* a stacked group (``train.stack`` a number) in a precision stacked groups do not train in:
  ``16-mixed`` needs a loss scaler per member, which the stacked path does not have
  (``bf16-mixed`` needs none);
* absurd sizes: more than ``MAX_PARAMS`` parameters, or activations above ``MAX_ACT_BYTES``;
* data files (``data=False`` skips these), local ones and registered ones already fetched:
  empty, not UTF-8, or too short for one window of ``seq_len + 1`` tokens per row of
  ``batch_size`` in every split. Memory and time do not grow with the file: a file whose
  token cache exists is checked by its exact token counts (no text read); otherwise its first
  ``PREFIX_BYTES`` are decoded (the whole file when it fits: exact char/word counts, UTF-8
  bytes bound BPE's; a larger file bounds every split by its size), once per check however
  many runs use it. ``tokenize=True`` builds the token cache first, so the count is exact
  (``ablate train`` trains next in the same process, so that costs nothing extra).

Non-finite floats (``optim.lr: .inf``) are rejected by the config models themselves
(``allow_inf_nan=False``). ``check_compile`` (``train.compile`` without a C++ compiler) is
called by whatever is about to train (``ablate run``, ``--smoke``, ``ablate train``), not by
the loader: ``ablate plan`` and ``ablate register`` plan runs that train elsewhere.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ablate.config import GATED_ACTIVATIONS, ConfigError, DataConfig, RunConfig

SEED_MAX = 2**32 - 1
MAX_PARAMS = 10**12
"""4 TB of fp32 weights: no single-run ablation comes near; a typo (``d_model: 4e9``) does."""
MAX_ACT_BYTES = 2**50
"""1 PiB of activations per step (Korthikanti et al. 2022 estimate): a typo, not a config."""

PREFIX_BYTES = 4 << 20
"""A data file not tokenized yet is checked on its first 4 MiB (strict UTF-8, and the exact
token counts of a file that fits); the token cache checks the rest as it streams the file."""
KEY = "data.dataset"
SPLITS = ("train", "val", "test")

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


def _check_stack(cfg: RunConfig, where: Where, source: Path | None) -> None:
    from ablate.training.stacked.plan import PRECISIONS, not_stackable

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


def _check_device(cfg: RunConfig, where: Where, source: Path | None, have_gpu: Callable) -> None:
    t = cfg.train
    if t.accelerator == "gpu" and not have_gpu():
        key = where("train.accelerator")
        hint = (
            "run another profile (--profile cpu), or --smoke to try its code path on the CPU"
            if key.startswith("profiles.")
            else "use 'cpu' or 'auto'"
        )
        raise ConfigError(
            f"is 'gpu' but no CUDA GPU is available here ({hint})", key=key, source=source
        )


@dataclass
class _Text:
    """What the plan-time check read of a data file: its size, and its whole text when it
    fits in ``PREFIX_BYTES`` (else only its first ``PREFIX_BYTES`` were checked)."""

    path: Path
    size: int
    text: str | None


def _scan(path: Path) -> _Text:
    """Strict UTF-8 check of the first ``PREFIX_BYTES`` of ``path`` (the whole file when it
    is that small); the one-line errors of ``read_text``."""
    try:
        with path.open("rb") as f:
            raw = f.read(PREFIX_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}", key=KEY) from None
    if not raw:
        raise ConfigError(f"{path} is empty", key=KEY)
    whole = len(raw) <= PREFIX_BYTES
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:  # a prefix may end inside a character: final=False keeps those bytes pending
        text = decoder.decode(raw[:PREFIX_BYTES], final=whole)
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (invalid byte 0x{raw[err.start]:02x} at offset {err.start})",
            key=KEY,
        ) from None
    return _Text(path, path.stat().st_size, text if whole else None)


def _split_tokens(cfg: RunConfig, scan: _Text) -> dict[str, int]:
    """At most how many tokens each split can hold, from the text read at plan time: exact
    for char and word, UTF-8 bytes of each part for BPE; every split is bounded by the file's
    size (+1 for word's last ``<eos>``) when only a prefix was read."""
    d = cfg.data
    if scan.text is None:
        return dict.fromkeys(SPLITS, scan.size + 1)
    text = scan.text
    if d.tokenizer == "word":  # splits the token stream
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return _split(sum(len(line.split()) + 1 for line in lines), d)  # + <eos> per line
    chars = _split(len(text), d)  # char and bpe split the text
    if d.tokenizer == "char":
        return chars
    out, pos = {}, 0
    for split, n in chars.items():
        out[split] = len(text[pos : pos + n].encode("utf-8"))
        pos += n
    return out


def _split(n: int, d: DataConfig) -> dict[str, int]:
    from ablate.data import split_bounds

    a, b = split_bounds(n, d.val_fraction, d.test_fraction)
    return {"train": a, "val": b - a, "test": n - b}


def _check_length(
    cfg: RunConfig,
    tokens: dict[str, int],
    exact: bool,
    path: Path,
    where: Where,
    source: Path | None,
) -> None:
    """Every split must hold one window of ``seq_len + 1`` tokens in each of its rows."""
    d = cfg.data
    splits = [("train", d.batch_size, "data.batch_size"), ("val", d.eval_bs, None)]
    if d.test_fraction > 0:
        splits.append(("test", d.eval_bs, None))
    for split, rows, rows_key in splits:
        if tokens[split] // rows < d.seq_len + 1:
            rows_key = rows_key or (
                "data.eval_batch_size" if d.eval_batch_size else "data.batch_size"
            )
            has = "has" if exact else "has at most"
            raise ConfigError(
                f"{path} is too short: its {split} split {has} {tokens[split]} "
                f"{d.tokenizer} tokens, fewer than {rows} rows ({rows_key}) x {d.seq_len + 1} "
                "(seq_len + 1)",
                key=where("data.seq_len"),
                source=source,
            )


def _local_file(name: str) -> Path | None:
    """The file ``data.dataset`` names, without downloading anything: ``None`` for a remote
    or plugin source, or a registered dataset not fetched yet (its sha256 pins it)."""
    from ablate.data import DATASETS, resolve_dataset
    from ablate.data.datasets import local_copy

    if name in DATASETS:
        return resolve_dataset(name) if local_copy(name) else None  # verifies the sha256
    if ":" in name and not Path(name).expanduser().exists():
        return None
    return resolve_dataset(name)


def _check_data(
    cfg: RunConfig,
    where: Where,
    source: Path | None,
    scans: dict[str, _Text | None],
    tokenize: bool,
) -> None:
    name = cfg.data.dataset
    try:
        if name not in scans:
            path = _local_file(name)
            scans[name] = _scan(path) if path is not None else None
        scan = scans[name]
        if scan is None:
            return
        from ablate.data.token_cache import cached_split_sizes, token_splits

        tokens = cached_split_sizes(cfg.data)
        if tokens is None and tokenize:
            tokens = {s: t.numel() for s, t in token_splits(cfg.data).tokens.items()}
    except ConfigError as err:
        raise ConfigError(err.message, key=where("data.dataset"), source=source) from None
    exact = tokens is not None
    tokens = tokens if tokens is not None else _split_tokens(cfg, scan)
    _check_length(cfg, tokens, exact, scan.path, where, source)


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
    scans: dict[str, _Text | None] = {}
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
        if device:
            _check_device(cfg, where, source, have_gpu)
        if data:
            _check_data(cfg, where, source, scans, tokenize)


def check_compile(configs: Iterable[RunConfig], source: str | Path | None = None) -> None:
    """``train.compile: true`` on a machine without a C++ compiler: one ``ConfigError`` line,
    before any run starts (not once per run)."""
    from ablate.accel import compile_problem

    if any(cfg.train.compile for cfg in configs):
        problem = compile_problem()
        if problem:
            raise ConfigError(problem, key="train.compile", source=source)
