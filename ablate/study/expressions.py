"""Derived values: a safe arithmetic expression language over a run's resolved config.

A study's ``derived:`` maps a config key to an expression such as
``"2_000_000 // (data.batch_size * data.seq_len)"``. Only numbers, dotted config keys,
``+ - * / // % **`` and ``min max int round abs sqrt`` are allowed; the text is parsed with
``ast`` and checked node by node (never ``eval``), and evaluation bounds integer sizes and
exponents, so a typo cannot run code or compute for hours.
"""

from __future__ import annotations

import ast
import math
import operator
from pathlib import Path
from typing import Any

from ablate.config import valid_keys
from ablate.errors import ConfigError, suggest

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_FUNCS = {"min": min, "max": max, "int": int, "round": round, "abs": abs, "sqrt": math.sqrt}


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def parse_expression(text: Any, where: str, source: Path) -> ast.Expression:
    """Parse and check a derived-value expression (numbers, config keys, arithmetic)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = repr(text)
    if not isinstance(text, str):
        raise ConfigError("must be an arithmetic expression (a string)", key=where, source=source)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ConfigError(f"invalid expression ({err.msg})", key=where, source=source) from None

    def check(node: ast.AST) -> None:
        if isinstance(node, ast.Expression):
            return check(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return None
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            check(node.left)
            return check(node.right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return check(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id not in _FUNCS or node.keywords:
                raise ConfigError(
                    f"unknown function '{node.func.id}' (allowed: {', '.join(_FUNCS)})",
                    key=where,
                    source=source,
                )
            for a in node.args:
                check(a)
            return None
        name = _dotted(node)
        if name is not None:
            if name not in valid_keys():
                raise ConfigError(
                    f"unknown key '{name}'{suggest(name, valid_keys())}", key=where, source=source
                )
            return None
        raise ConfigError(
            f"unsupported expression '{ast.unparse(node)}': use numbers, config keys, "
            f"+ - * / // % ** and {', '.join(_FUNCS)}",
            key=where,
            source=source,
        )

    check(tree)
    return tree


MAX_EXPONENT = 1024
MAX_INT_BITS = 256
"""Derived values are sizes, steps and rates: an intermediate beyond 2**256 is a mistake, and
``9 ** 9 ** 9`` would otherwise compute for hours (a 370-million-digit integer)."""


def _bounded(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise ValueError(f"result too large (more than 2**{MAX_INT_BITS})")
    return value


def _safe_pow(base: Any, exp: Any) -> Any:
    """``base ** exp`` after checking the result stays small: ``|exp| <= MAX_EXPONENT`` and, for
    integers, ``bit_length(base) * exp <= MAX_INT_BITS`` (checked before computing)."""
    if abs(exp) > MAX_EXPONENT:
        raise ValueError(f"exponent {exp} too large (at most {MAX_EXPONENT})")
    if isinstance(base, int) and isinstance(exp, int) and exp > 0:
        if abs(base).bit_length() * exp > MAX_INT_BITS + exp:
            raise ValueError(f"{base} ** {exp} is too large (more than 2**{MAX_INT_BITS})")
    return base**exp


def eval_expression(tree: ast.Expression, values: dict[str, Any]) -> Any:
    """Evaluate a parsed derived expression; ``ValueError`` for results beyond the bounds."""

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return _bounded(node.value)
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow):
                return _bounded(_safe_pow(left, right))
            return _bounded(_BINOPS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        return values[_dotted(node)]

    return ev(tree)
