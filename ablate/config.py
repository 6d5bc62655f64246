"""Typed run configuration: one pydantic model per concern, combined into ``RunConfig``.

Every ablation axis is one string field chosen from a small registry (the model's registries
for the model axes, so plugins count; a ``Literal`` elsewhere), so a bad name is rejected with
the list of valid ones. Unknown keys are errors everywhere. Values derived
from others (head size, FFN hidden size, the LR after batch-size scaling) are properties, never
stored, so a saved config can't disagree with itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from ablate.accel import attn_backend_problem
from ablate.errors import ConfigError, check_known, suggest
from ablate.registry import check_name


def _registered(axis: str) -> AfterValidator:
    """The value must name a class in ``axis``'s registry (built-ins and plugins, checked at
    validation time, so a plugin registered after import is valid)."""
    return AfterValidator(lambda value: check_name(axis)(value))


Arch = Annotated[str, _registered("arch")]
NormPlacement = Annotated[str, _registered("norm_placement")]
Norm = Annotated[str, _registered("norm")]
PosEncoding = Annotated[str, _registered("pos_encoding")]
Activation = Annotated[str, _registered("activation")]
Attention = Annotated[str, _registered("attention")]
Init = Literal["gpt2", "vaswani"]
Tokenizer = Literal["char", "word", "bpe"]
DataOrder = Literal["rows", "tokens", "random"]
Decay = Literal["cosine", "linear", "constant", "cosine_min"]
LRScaling = Literal["none", "linear", "sqrt"]
Precision = Literal["32-true", "bf16-mixed", "16-mixed", "bf16-true"]
WandbMode = Literal["auto", "online", "offline", "disabled"]

GATED_ACTIVATIONS = ("swiglu", "geglu")


class _Section(BaseModel):
    # allow_inf_nan=False: a float setting is finite everywhere (``optim.lr: .inf`` is an error)
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False
    )


class ModelConfig(_Section):
    """The one model every study varies. Each axis is a single registry-name field."""

    arch: Arch = "transformer"
    """``transformer`` or the ``lstm`` baseline (shares embedding, head, tying and training)."""
    d_model: int = Field(128, ge=1)
    n_layers: int = Field(4, ge=1)
    n_heads: int = Field(4, ge=1)
    n_kv_heads: int | None = Field(None, ge=1)
    """Key/value heads for grouped-query attention (1 = multi-query). Default: ``n_heads``."""
    d_ff: int | None = Field(None, ge=1)
    """Feed-forward width of the non-gated FFN. Default: ``4 * d_model``."""
    glu_param_match: bool = True
    """Gated FFNs get ``2/3 * d_ff`` hidden units: parameters match the plain FFN (Shazeer 2020)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    tie_embeddings: bool = True
    max_seq_len: int = Field(256, ge=1)
    """Size of the learned position table (the other encodings work at any length)."""
    bias: bool = True
    norm_placement: NormPlacement = "pre"
    norm: Norm = "layernorm"
    norm_eps: float = Field(1e-5, gt=0.0)
    pos_encoding: PosEncoding = "learned"
    activation: Activation = "gelu"
    attention: Attention = "plain"
    """The attention module: ``plain`` (softmax over scaled dot products), ``qk_norm``
    (queries and keys layer-normalised per head first), or a plugin's."""
    rope_theta: float = Field(10000.0, gt=0.0)
    init: Init = "gpt2"
    """``gpt2``: N(0, init_std) weights, residual projections scaled by 1/sqrt(2 n_layers).
    ``vaswani``: Xavier-uniform linears, N(0, 1/d_model) embeddings multiplied by sqrt(d_model) in
    the forward pass: the setting Xiong et al. (2020) analyse for Post-LN vs Pre-LN."""
    init_std: float = Field(0.02, gt=0.0)

    @model_validator(mode="after")
    def _check_heads(self) -> ModelConfig:
        if self.arch == "transformer":
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
                )
            if self.n_heads % self.kv_heads:
                raise ValueError(
                    f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.kv_heads})"
                )
            if self.pos_encoding == "rope" and self.head_dim % 2:
                raise ValueError(f"rope needs an even head size, got {self.head_dim}")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model

    @property
    def ffn_hidden(self) -> int:
        """FFN hidden units: ``d_ff``, or ``int(2 * d_ff / 3)`` for parameter-matched GLUs."""
        if self.activation in GATED_ACTIVATIONS and self.glu_param_match:
            return max(1, int(2 * self.ff_dim / 3))
        return self.ff_dim


class DataConfig(_Section):
    dataset: str = "tinyshakespeare"
    """A registered dataset name or a path to a local UTF-8 text file."""
    tokenizer: Tokenizer = "char"
    bpe_vocab_size: int = Field(1024, ge=32)
    seq_len: int = Field(64, ge=1)
    batch_size: int = Field(12, ge=1)
    stride: int | None = Field(None, ge=1)
    """Offset between consecutive training windows: 1 = sliding window. Default: ``seq_len``."""
    shuffle: bool = True
    """Visit training windows in a seeded random order each epoch (False: in order)."""
    order: DataOrder = "rows"
    """How training batches are cut from the token stream. ``rows``: ``batch_size`` contiguous
    rows, a batch is one column window of every row, so the token order depends on the batch
    size. ``tokens``: one seeded order of ``seq_len`` windows of the whole stream, consumed
    ``batch_size`` at a time, so at one seed every batch size sees the same tokens in the same
    order (compare batch sizes paired by seed). ``random``: every sequence starts at a uniform
    random offset of the whole stream, as nanoGPT's ``get_batch`` draws them, from generators
    keyed by the seed and the sequence's place in the stream, with replacement (a run of k
    draws from N offsets repeats about ``1 - N(1 - (1 - 1/N)^k)/k`` of them), and as under
    ``tokens`` the stream does not depend on the batch size
    (``stride`` and ``shuffle`` do not apply)."""
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    test_fraction: float = Field(0.0, ge=0.0, lt=1.0)
    eval_batch_size: int | None = Field(None, ge=1)
    """Batch size for validation/test batchify. Default: ``batch_size``."""
    pin_memory: bool = False
    """Pin training batches in page-locked memory; on CUDA they are pinned whatever this says."""

    @model_validator(mode="after")
    def _check_split(self) -> DataConfig:
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError("val_fraction + test_fraction must leave data for training")
        if self.order == "random" and (self.stride is not None or not self.shuffle):
            key = "data.stride" if self.stride is not None else "data.shuffle"
            raise ValueError(
                f"{key} has no meaning under data.order: random (every offset is a window, "
                "drawn at random): remove it, or choose data.order rows or tokens"
            )
        return self

    @property
    def window_stride(self) -> int:
        return self.stride or self.seq_len

    @property
    def eval_bs(self) -> int:
        return self.eval_batch_size or self.batch_size


class OptimConfig(_Section):
    lr: float = Field(1e-3, gt=0.0)
    """Base (peak) learning rate at ``ref_batch_size``; see ``lr_scaling``."""
    min_lr: float = Field(0.0, ge=0.0)
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    decay: Decay = "cosine"
    cycles: float = Field(0.5, gt=0.0)
    weight_decay: float = Field(0.1, ge=0.0)
    beta1: float = Field(0.9, ge=0.0, lt=1.0)
    beta2: float = Field(0.99, ge=0.0, lt=1.0)
    eps: float = Field(1e-8, gt=0.0)
    grad_clip: float | None = Field(1.0, gt=0.0)
    lr_scaling: LRScaling = "none"
    """Scale ``lr`` with batch size against ``ref_batch_size``: linear (Goyal et al.) or sqrt."""
    ref_batch_size: int | None = Field(None, ge=1)
    fused: bool | None = None
    """Fused AdamW kernel; ``None`` = on wherever torch has one for the device (CUDA, CPU)."""

    @model_validator(mode="after")
    def _check(self) -> OptimConfig:
        if self.lr_scaling != "none" and self.ref_batch_size is None:
            raise ValueError("lr_scaling needs ref_batch_size")
        if self.min_lr > self.lr:
            raise ValueError(f"min_lr ({self.min_lr}) exceeds lr ({self.lr})")
        return self

    def scaled_lr(self, batch_size: int) -> float:
        """lr * k (linear) or lr * sqrt(k) (sqrt), k = batch_size / ref_batch_size."""
        if self.lr_scaling == "none":
            return self.lr
        k = batch_size / self.ref_batch_size
        return self.lr * (k if self.lr_scaling == "linear" else k**0.5)


def _stack_setting(value: Any) -> str:
    """``train.stack``: ``auto``, ``off`` or a positive integer, as text. YAML (and ``--set``)
    read ``off`` as false and ``4`` as an int."""
    text = "off" if value is False else str(value).strip().lower()
    if (
        type(value) is bool
        and value
        or not (text in ("auto", "off") or (text.isdigit() and int(text) > 0))
    ):
        raise ValueError("choose auto, off or a positive integer")
    return text


# the validator is part of the type, so a single key's check (``field_adapter``) runs it too
StackSetting = Annotated[str, BeforeValidator(_stack_setting)]


class TrainConfig(_Section):
    seed: int = 0
    max_steps: int = Field(200, ge=1)
    eval_interval: int = Field(50, ge=1)
    eval_batches: int | None = Field(20, ge=1)
    """Validation batches per evaluation during training; ``None`` = the full split."""
    final_eval_batches: int | None = Field(None, ge=1)
    """Validation batches for the final evaluation; ``None`` = the full split."""
    log_interval: int = Field(10, ge=1)
    grad_norm_interval: int = Field(50, ge=0)
    """Log global and per-layer gradient norms every N steps (0 = never); step 0 always."""
    eval_lengths: list[float] = Field(default_factory=list)
    """Extra final evaluations at these multiples of ``seq_len`` (length extrapolation)."""
    early_stopping_patience: int | None = Field(None, ge=1)
    """Stop after this many evaluations without val-loss improvement (``None`` = never)."""
    accelerator: Literal["auto", "cpu", "gpu"] = "cpu"
    devices: int = Field(1, ge=1)
    precision: Precision = "32-true"
    compile: bool = False
    """``torch.compile`` the training step (``ablate.training.step.losses_fn``). How runs
    train, not what they are: not in the run id (compiled and eager runs agree to float
    rounding, equal in distribution)."""
    compile_mode: Literal["default", "reduce-overhead"] = "default"
    """``torch.compile``'s mode under ``compile``: ``reduce-overhead`` adds CUDA graphs (a step
    replayed with one launch). Off by default: whether graphs pay is the GPU probe's to measure.
    How runs train, not what they are: not in the run id."""
    attn_backend: Literal["auto", "flash", "efficient", "math"] = "auto"
    threads: int | None = Field(None, ge=1)
    """torch intra-op threads; ``None`` = torch's default."""
    deterministic: bool = True
    checkpoint_interval: int = Field(100, ge=1)
    progress: bool = True
    stack: StackSetting = "off"
    """Train runs that differ only in seed and optimizer scalars as one stacked model, at most
    this many per process: ``auto`` (chosen from the device and model size), ``off`` (one run
    per process) or a positive integer. How runs train, not what they are: not in the run id."""


class TrackingConfig(_Section):
    wandb: bool = True
    project: str | None = None
    """W&B project; default ``$WANDB_PROJECT`` or ``ablate``."""
    entity: str | None = None
    mode: WandbMode = "auto"
    """``auto``: online when a W&B login is configured, else offline."""
    tags: list[str] = Field(default_factory=list)


class RunConfig(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="after")
    def _check_cross(self) -> RunConfig:
        m, d = self.model, self.data
        if m.arch == "transformer" and m.pos_encoding == "learned" and d.seq_len > m.max_seq_len:
            raise ValueError(
                f"data.seq_len ({d.seq_len}) exceeds model.max_seq_len ({m.max_seq_len})"
            )
        t = self.train
        problem = attn_backend_problem(
            t.attn_backend,
            arch=m.arch,
            pos_encoding=m.pos_encoding,
            precision=t.precision,
            accelerator=t.accelerator,
            head_dim=m.head_dim,
        )
        if problem:  # a kernel that cannot run this model: fail at plan time, not mid-run
            raise ValueError(problem)
        return self

    @property
    def lr(self) -> float:
        """Peak LR after batch-size scaling."""
        return self.optim.scaled_lr(self.data.batch_size)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def run_id(self, content: dict[str, Any] | None = None) -> str:
        """Stable id of everything that changes the result (not tracking or display options).

        ``content``: what the config names but does not contain (plugin source hashes, a local
        dataset's content key), computed where runs are planned (``ablate.study.run_content``).
        """
        d = self.to_dict()
        d.pop("tracking")
        d["train"].pop("progress")
        # how runs train, not what they are: stacked or alone, compiled or eager, CUDA graphs
        d["train"].pop("stack")
        d["train"].pop("compile_mode")
        # every run hashes as eager, the value every stored run had while ``compile`` was part
        # of the id (popping the key would move all of them)
        d["train"]["compile"] = False
        # defaults every run had before their field existed: earlier run ids stay valid
        if d["data"]["order"] == "rows":
            d["data"].pop("order")
        if d["model"]["attention"] == "plain":
            d["model"].pop("attention")
        if (
            content
        ):  # only when present: ids of runs without plugins or local files stay as they were
            d["content"] = content
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


# --- building configs from dicts, files and ``key=value`` overrides -------------------------------


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-3`` as a float (YAML 1.1 wants ``1.0e-3``) and rejects a
    key repeated in one mapping (PyYAML keeps the last silently: two ``grid:`` blocks would
    drop the first and train a different grid)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # ``<<: *base`` merges are overridden by explicit keys by design
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {first + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
    list("-+0123456789."),
)


def yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


SECTIONS: dict[str, type[BaseModel]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "tracking": TrackingConfig,
}
"""The sections of a ``RunConfig``: the first part of every dotted key."""


def valid_keys() -> list[str]:
    """Every dotted key a RunConfig accepts, e.g. ``model.d_model``."""
    return [f"{s}.{f}" for s, cls in SECTIONS.items() for f in cls.model_fields]


@cache
def field_adapter(key: str) -> TypeAdapter:
    """A validator of one dotted key's value: its type and range (cross-field rules aside)."""
    section, name = key.split(".", 1)
    info = SECTIONS[section].model_fields[name]
    return TypeAdapter(Annotated[info.annotation, info])


def check_key(key: Any, where: str | None = None, source: str | Path | None = None) -> str:
    """``key`` itself if it is a dotted RunConfig key; else ``ConfigError`` at ``where`` (default:
    the key) saying what is wrong, with the closest valid name."""
    where = str(key) if where is None else where
    if isinstance(key, str) and key in valid_keys():
        return key
    if not isinstance(key, str) or "." not in key:
        raise ConfigError(
            "expected a dotted config key such as 'model.d_model'"
            + suggest(str(key), valid_keys()),
            key=where,
            source=source,
        )
    section = key.split(".", 1)[0]
    check_known(section, list(SECTIONS), what=f"section '{section}'", key=where, source=source)
    raise ConfigError(f"unknown key{suggest(key, valid_keys())}", key=where, source=source)


def set_dotted(tree: dict[str, Any], key: str, value: Any, source: str | Path | None = None):
    """``tree['a']['b'] = value`` for ``key='a.b'``, after checking the key exists."""
    check_key(key, source=source)
    section, field = key.split(".", 1)
    sub = tree.setdefault(section, {})
    if not isinstance(sub, dict):
        raise ConfigError("must be a mapping", key=section, source=source)
    sub[field] = value


def flatten(
    tree: Any,
    source: str | Path | None = None,
    *,
    where: str = "",
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Nested sections and/or dotted keys -> ``{dotted key: value}``, rejecting unknown keys.

    ``{'model': {'d_model': 8}, 'optim.lr': 1e-3}`` -> ``{'model.d_model': 8, 'optim.lr': 1e-3}``;
    ``None`` -> ``{}``. ``where`` is the mapping's key path in its file (errors name
    ``<where>.<key>``). Keys named in ``extra`` (e.g. ``derived`` in a study profile) are kept
    as they are, under their own name, for the caller to take out.
    """
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(
            f"must be a mapping of config keys, got {type(tree).__name__}", key=where, source=source
        )
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{where}.{key}" if where else str(key)
        if key in extra:
            flat[key] = value
        elif key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(
                    "a section must be a mapping of its keys", key=path, source=source
                )
            for sub, v in value.items():
                flat[check_key(f"{key}.{sub}", f"{path}.{sub}", source)] = v
        elif isinstance(key, str) and "." not in key:  # neither a section nor an extra: raises
            check_known(key, [*SECTIONS, *extra], what=f"section '{key}'", key=path, source=source)
        else:
            flat[check_key(key, path, source)] = value
    return flat


def parse_override(text: str, source: str | Path | None = "--set") -> tuple[str, Any]:
    """``'model.d_model=64'`` -> ``('model.d_model', 64)``; the value is read as YAML."""
    if "=" not in text:
        raise ConfigError(f"expected key=value, got '{text}'", source=source)
    key, raw = text.split("=", 1)
    key = check_key(key.strip(), source=source)
    try:
        value = yaml_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return key, value


def _error_from_validation(err: ValidationError, source: str | Path | None) -> ConfigError:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"])
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if "input" in e and e["type"] not in ("missing",) and not isinstance(e["input"], dict):
        msg = f"{msg} (got {e['input']!r})"
    return ConfigError(msg, key=loc, source=source)


def build_config(flat: dict[str, Any] | None = None, source: str | Path | None = None) -> RunConfig:
    """Validate flat dotted overrides on top of the defaults into a RunConfig."""
    tree: dict[str, Any] = {}
    for key, value in (flat or {}).items():
        set_dotted(tree, key, value, source)
    try:
        return RunConfig.model_validate(tree)
    except ValidationError as err:
        raise _error_from_validation(err, source) from None


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        guess = Path("studies") / f"{path.name}.yaml"  # a study's name where its file was meant
        hint = f" (the study's file is {guess})" if not path.suffix and guess.is_file() else ""
        raise ConfigError(f"file not found{hint}", source=path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read ({err.strerror or err})", source=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"not UTF-8 text (invalid byte 0x{raw[err.start]:02x} at offset {err.start})",
            source=path,
        ) from None
    try:
        return yaml_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(err, "problem", err)
        raise ConfigError(f"{where}invalid YAML ({problem})", source=path) from None


def load_run_config(path: str | Path | None = None, overrides: list[str] = ()) -> RunConfig:
    """A run config from an optional YAML file plus ``key=value`` overrides (later wins)."""
    flat: dict[str, Any] = {}
    if path is not None:
        tree = load_yaml(path) or {}
        if not isinstance(tree, dict):
            raise ConfigError("run config must be a mapping", source=path)
        flat.update(flatten(tree, source=path))
    for text in overrides:
        key, value = parse_override(text)
        flat[key] = value
    return build_config(flat, source=path)
