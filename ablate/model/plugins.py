"""Plugins: modules that add names to the model's axis registries (``ablate.registry``).

Each axis of ``ModelConfig`` that picks a class is a registry (name -> class) the model looks
up at build time: ``arch`` (``ARCHS``: a ``LanguageModel``, built as ``cls(cfg, vocab_size)``),
``norm_placement`` (``BLOCKS``: a transformer block), ``norm`` (``NORMS``), ``pos_encoding``
(``POSITIONS``: a ``NoPositions`` subclass), ``activation`` (``FFNS``: the whole feed-forward
module) and ``attention`` (``ATTENTIONS``: a ``CausalSelfAttention`` subclass). Every other
class is built as ``cls(cfg)`` from the ``ModelConfig``. ``CALLS`` says how the model calls
each one; the interface check calls it the same way.

A plugin is a Python module (a dotted name, or a ``.py`` file) that adds classes with
``@ablate.register(axis, name)``. A class says whether it computes k members at once
(``member_aware = True``, ``ablate.model.members``: built as ``cls(cfg, members)``, every tensor
leading with the member dimension, called on ``(k, B, T, d_model)``); one that does not (the
default for a plain ``nn.Module``) is built as ``cls(cfg)``, called on ``(B, T, d_model)``, and
its runs train alone. Subclasses of the built-in bases inherit ``member_aware = True``.
Registration checks the class against the axis's interface on a tiny config (an ``nn.Module``
subclass, built from a ``ModelConfig``, mapping a small input to the right output shape; a
member-aware one holding its members apart); ``load_plugins`` imports plugins and turns every
failure into a one-line ``ConfigError`` naming the plugin. The sha256 of each registered
plugin's source is part of the run id of every run that uses it (``plugin_hashes``), so editing
a plugin never reuses runs made with the old code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ablate.errors import ConfigError
from ablate.registry import AXES, table

C = TypeVar("C", bound=type)


class PluginError(ConfigError):
    """A plugin that cannot be used: its import fails, or a class it registers is invalid."""


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered plugin class came from."""

    axis: str
    name: str
    qualname: str
    source: str
    """The file the class is defined in."""
    sha256: str
    """sha256 of that file's bytes at registration."""


_PLUGINS: dict[tuple[str, str], PluginInfo] = {}
_LOADED: dict[str, str] = {}  # plugin spec (module name or resolved path) -> module name


def plugin_hashes(model_cfg: Any) -> dict[str, str]:
    """``{axis: sha256 of the plugin source}`` for every axis of ``model_cfg`` set to a plugin."""
    out = {}
    for axis in AXES:
        info = _PLUGINS.get((axis, getattr(model_cfg, axis, None)))
        if info is not None:
            out[axis] = info.sha256
    return out


def plugins_used(model_cfg: Any) -> list[PluginInfo]:
    return [
        _PLUGINS[(a, getattr(model_cfg, a))] for a in AXES if (a, getattr(model_cfg, a)) in _PLUGINS
    ]


# --- registration ---------------------------------------------------------------------------------


def _source_of(cls: type) -> tuple[str, str]:
    try:
        path = inspect.getsourcefile(cls) or ""
    except TypeError:  # defined interactively
        path = ""
    if path and Path(path).is_file():
        return path, hashlib.sha256(Path(path).read_bytes()).hexdigest()
    # no file: hash the class's own source if inspect can find it, else its name
    try:
        text = inspect.getsource(cls)
    except (OSError, TypeError):
        text = f"{cls.__module__}.{cls.__qualname__}"
    return "<interactive>", hashlib.sha256(text.encode()).hexdigest()


def register(axis: str, name: str) -> Callable[[C], C]:
    """Class decorator: add the class to ``axis``'s registry under ``name``.

    ``@ablate.register("norm", "scalenorm")`` on ``class ScaleNorm(nn.Module)`` with
    ``__init__(self, cfg: ModelConfig)`` and ``forward(x) -> x``-shaped; then
    ``model.norm: scalenorm`` selects it. Raises ``PluginError`` for an unknown axis, a name
    already taken by another class, or a class that does not fit the axis's interface.
    """
    try:
        reg = table(axis)
    except ConfigError as err:
        raise PluginError(err.message) from None
    if not isinstance(name, str) or not name or "," in name or "=" in name:
        raise PluginError(f"bad {axis} name {name!r}: use a plain non-empty string")

    def deco(cls: C) -> C:
        old = reg.get(name)
        # re-importing the same plugin (a second study, a worker) re-registers the same class
        same = old is not None and (old.__module__, old.__qualname__) == (
            cls.__module__,
            cls.__qualname__,
        )
        if old is not None and not same:
            where = f"{old.__module__}.{old.__qualname__}"
            raise PluginError(
                f"{axis} {name!r} is already registered (by {where}); choose another name"
            )
        check_interface(axis, name, cls)
        reg[name] = cls
        source, sha = _source_of(cls)
        _PLUGINS[(axis, name)] = PluginInfo(axis, name, cls.__qualname__, source, sha)
        return cls

    return deco


CALLS = {
    "arch": "model(idx) -> logits: (k, B, T) token ids -> (k, B, T, vocab)",
    "norm_placement": "block(x, rotary, attn_bias) -> x: (k, B, T, d_model) -> (k, B, T, d_model)",
    "norm": "norm(x) -> x: (k, B, T, d_model) -> (k, B, T, d_model)",
    "pos_encoding": "pos.embed(x) -> x, pos.rotary(T, device), pos.attn_bias(T, device)",
    "activation": "ffn(x) -> x: (k, B, T, d_model) -> (k, B, T, d_model)",
    "attention": "attn(x, rotary, attn_bias) -> x: (k, B, T, d_model) -> (k, B, T, d_model)",
}
"""How the model calls a class of each axis (``rotary``: the RoPE tables or None; ``attn_bias``:
ALiBi's ``(H, T, T)`` bias or None). ``k`` is the member dimension
(``ablate.model.members``): a class that is not member-aware is called without it, ``(B, T,
d_model)``, and its runs train alone."""


def _call(axis: str, module, x, members: int):
    """``module`` called on ``x`` exactly as the model calls a class of ``axis``."""
    if axis == "pos_encoding":
        T = x.size(-2)
        module.rotary(T, x.device), module.attn_bias(T, x.device)
        return module.embed(x)
    if axis in ("norm_placement", "attention"):
        cfg = _tiny_config(axis, "")
        pos = table("pos_encoding")[cfg.pos_encoding](cfg, members).to(x.device)
        T = x.size(-2)
        return module(x, pos.rotary(T, x.device), pos.attn_bias(T, x.device))
    return module(x)


def _tiny_config(axis: str, name: str):
    from ablate.config import ModelConfig

    # rotary positions: a block or attention is called with real RoPE tables, as the model
    # calls it with rope (and with None otherwise)
    base = ModelConfig(
        d_model=16, n_heads=2, n_layers=1, max_seq_len=8, d_ff=32, pos_encoding="rope"
    )
    return base.model_copy(update={axis: name}) if name else base


def _build(axis: str, cls: type, cfg, members: int, vocab: int):
    from ablate.model.members import member_aware

    if axis == "arch":
        return cls(cfg, vocab, members) if member_aware(cls) else cls(cfg, vocab)
    return cls(cfg, members) if member_aware(cls) else cls(cfg)


def _check_members(what: str, axis: str, name: str, cls: type, members: int) -> None:
    """A member-aware class holds every tensor with the member dimension first, and member 0's
    output does not change when only member 1's input does (members share no operation)."""
    import torch

    from ablate.model.members import member_tensors

    torch.manual_seed(0)
    module = _build(axis, cls, _tiny_config(axis, name), members, 11).eval()
    for key, (t, member, _) in member_tensors(module).items():
        if member and (t.dim() == 0 or t.shape[0] != members):
            raise PluginError(
                f"{what} is member-aware (member_aware = True) but its tensor {key!r} has "
                f"shape {tuple(t.shape)}, not {members} members first: build it from "
                "ablate.model.members (Linear, Embedding) or set member_aware = False"
            )
    shape = (members, 2, 5) if axis == "arch" else (members, 2, 5, 16)
    x = torch.randint(0, 11, shape) if axis == "arch" else torch.randn(shape)
    other = x.clone()
    other[1] = torch.randint(0, 11, shape[1:]) if axis == "arch" else torch.randn(shape[1:])
    with torch.no_grad():
        same = torch.equal(
            _call(axis, module, x, members)[0], _call(axis, module, other, members)[0]
        )
    if not same:
        raise PluginError(
            f"{what} is member-aware (member_aware = True) but member 0's output changed with "
            "member 1's input: members must share no operation"
        )


def check_interface(axis: str, name: str, cls: type) -> None:
    """Build ``cls`` from a tiny config and run a ``(k, 2, 5, d_model)`` input (``(k, 2, 5)``
    ids for ``arch``) through it, ``k = 2`` for a member-aware class (without ``k`` for one
    that is not): on the meta device (no memory), else on the CPU if an op has no meta kernel.
    A member-aware class is checked on the CPU for its members (``_check_members``). Raises
    ``PluginError`` saying what does not fit."""
    import torch
    import torch.nn as nn

    from ablate.model.base import LanguageModel
    from ablate.model.members import member_aware
    from ablate.model.transformer import CausalSelfAttention, NoPositions

    what = f"{axis} {name!r} ({getattr(cls, '__qualname__', cls)})"
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise PluginError(f"{what} must be a torch.nn.Module subclass")
    if axis == "pos_encoding" and not issubclass(cls, NoPositions):
        raise PluginError(
            f"{what} must subclass ablate.model.transformer.NoPositions (embed/rotary/attn_bias)"
        )
    if axis == "arch" and not issubclass(cls, LanguageModel):
        raise PluginError(f"{what} must subclass ablate.model.LanguageModel")
    if axis == "norm_placement" and not isinstance(getattr(cls, "final_norm", None), bool):
        raise PluginError(f"{what} must set the class attribute final_norm (True or False)")
    if axis == "attention" and not issubclass(cls, CausalSelfAttention):
        raise PluginError(
            f"{what} must subclass ablate.model.transformer.CausalSelfAttention (qk/attend)"
        )
    cfg = _tiny_config(axis, name)
    k = 2 if member_aware(cls) else 1
    B, T, V = 2, 5, 11
    lead = (k,) if member_aware(cls) else ()
    if axis == "arch":
        x, want = torch.zeros(*lead, B, T, dtype=torch.long), (k, B, T, V)
    else:
        x, want = torch.zeros(*lead, B, T, cfg.d_model), (*lead, B, T, cfg.d_model)
    errors = []
    for device in ("meta", "cpu"):
        try:
            with torch.device(device):
                module = _build(axis, cls, cfg, k, V)
        except Exception as err:  # noqa: BLE001 - any failure is the plugin's
            errors.append(f"{type(err).__name__}: {err}".splitlines()[0])
            continue
        try:
            with torch.device(device), torch.no_grad():
                y = _call(axis, module, x.to(device), k)
        except TypeError as err:  # called as the model calls it, it takes other arguments
            raise PluginError(
                f"{what} cannot be called as the model calls it, {CALLS[axis]} "
                f"({str(err).splitlines()[0]})"
            ) from None
        except Exception as err:  # noqa: BLE001 - any failure is the plugin's
            errors.append(f"{type(err).__name__}: {err}".splitlines()[0])
            continue
        if tuple(y.shape) != want:
            raise PluginError(
                f"{what} maps an input of shape {tuple(x.shape)} to {tuple(y.shape)}, "
                f"expected {want}"
            )
        if member_aware(cls):
            _check_members(what, axis, name, cls, k)
        return
    raise PluginError(f"{what} cannot be built from a ModelConfig and run: {errors[-1]}")


# --- loading --------------------------------------------------------------------------------------


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec


def load_plugin(spec: str, *, base: Path | None = None, key: str = "plugins", source=None) -> str:
    """Import one plugin: a dotted module name, or a ``.py`` path (relative to ``base``).

    Returns the module name. Importing the same plugin again does nothing. Any failure is a
    one-line ``ConfigError`` naming the plugin, the key and the source file, and so is a plugin
    that registers nothing (its classes lack ``@ablate.register``: it would change nothing).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(
            f"a plugin must be a module name or a .py path, got {spec!r}", key=key, source=source
        )
    spec = spec.strip()
    if _is_path(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        path = path.resolve()
        ident = str(path)
        if ident in _LOADED:
            return _LOADED[ident]
        if not path.is_file():
            raise ConfigError(f"plugin {spec!r}: no such file ({path})", key=key, source=source)
        digest = hashlib.sha256(ident.encode()).hexdigest()[:10]
        mod_name = f"ablate_plugin_{path.stem}_{digest}"
        before = set(_PLUGINS)
        try:
            mod_spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[mod_name] = module
            mod_spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - report any import failure in one line
            sys.modules.pop(mod_name, None)
            raise _import_error(spec, err, key, source) from None
    else:
        ident = mod_name = spec
        if ident in _LOADED:
            return _LOADED[ident]
        before = set(_PLUGINS)
        try:
            importlib.import_module(spec)
        except Exception as err:  # noqa: BLE001
            raise _import_error(spec, err, key, source) from None
    if not set(_PLUGINS) - before and not _registered_by(mod_name):
        raise ConfigError(
            f"plugin {spec!r} registers nothing: it imports, but no class in it is decorated "
            f"with @ablate.register(axis, name) (axes: {', '.join(AXES)})",
            key=key,
            source=source,
        )
    _LOADED[ident] = mod_name
    return mod_name


def _registered_by(module: str) -> list[tuple[str, str]]:
    """The (axis, name) registrations of classes defined in ``module`` or below it (a module
    plugin imported before, whose registrations happened then)."""
    out = []
    for axis, name in _PLUGINS:
        owner = getattr(table(axis).get(name), "__module__", "") or ""
        if owner == module or owner.startswith(module + "."):
            out.append((axis, name))
    return out


def _import_error(spec: str, err: Exception, key: str, source) -> ConfigError:
    if isinstance(err, PluginError):
        msg = err.message
    else:
        msg = f"import failed ({type(err).__name__}: {err})".splitlines()[0]
    return ConfigError(f"plugin {spec!r}: {msg}", key=key, source=source)


def load_plugins(specs: Any, *, base: Path | None = None, key: str = "plugins", source=None):
    """``load_plugin`` for each entry of a list (a study's ``plugins:``, ``--plugin`` options)."""
    if specs is None:
        return []
    if isinstance(specs, str):
        specs = [specs]
    if not isinstance(specs, list | tuple):
        raise ConfigError("must be a list of module names or .py paths", key=key, source=source)
    return [
        load_plugin(s, base=base, key=f"{key}[{i}]" if key == "plugins" else key, source=source)
        for i, s in enumerate(specs)
    ]


def plugin_paths(specs: Sequence[str], base: Path | None = None) -> list[str]:
    """Plugin specs made absolute (paths) so another process can import them from anywhere."""
    out = []
    for s in specs:
        if _is_path(s):
            p = Path(s).expanduser()
            out.append(str((base / p if base is not None and not p.is_absolute() else p).resolve()))
        else:
            out.append(s)
    return out
