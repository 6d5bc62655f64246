"""The code's shape: no function over 80 lines or with more than 8 parameters, except the typer
commands (their parameters are the command line's options)."""

import ast
from pathlib import Path

import ablate

MAX_LINES = 80
MAX_PARAMS = 8


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    n = len(names) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if names and names[0].arg in ("self", "cls") else 0)


def _is_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """``@app.command()``, ``@run_app.command("confirm")``: a typer command."""
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and target.attr == "command":
            return True
    return False


def _oversized() -> dict[str, str]:
    """``path:function`` -> what is over, for every function of the package over a limit."""
    root = Path(ablate.__file__).parent
    out = {}
    for path in sorted(root.rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) or _is_command(fn):
                continue
            lines, params = fn.end_lineno - fn.lineno + 1, _params(fn)
            if lines > MAX_LINES or params > MAX_PARAMS:
                where = f"{path.relative_to(root).as_posix()}:{fn.name}"
                out[where] = f"{lines} lines, {params} parameters"
    return out


def test_no_function_is_over_80_lines_or_8_parameters():
    assert _oversized() == {}


def test_the_check_sees_what_it_counts():
    tree = ast.parse(
        "def f(a, b, *c, d, e=1, **g): pass\n"
        "class K:\n    def m(self, a): pass\n"
        "@app.command()\ndef run(a, b, c, d, e, f, g, h, i): pass\n"
    )
    fns = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    f, m, run = fns["f"], fns["m"], fns["run"]
    assert _params(f) == 6 and _params(m) == 1
    assert _is_command(run) and not _is_command(f)


def _shipped_axes() -> set[str]:
    """Every config key a shipped study varies (grid, variants, ladder rungs), and the field
    name of those that pick a class (``pos_encoding``; ``lr`` is also a summary field)."""
    import yaml

    from ablate.registry import AXES

    keys: set[str] = set()
    for path in (Path(ablate.__file__).parent.parent / "studies").glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        keys |= set(data.get("grid") or {})
        for variant in data.get("variants") or []:
            keys |= set(variant.get("set") or {})
        for rung in (data.get("ladder") or {}).get("rungs") or []:
            keys |= set(rung.get("set") or {})
    return keys | {k.split(".", 1)[1] for k in keys if k.split(".", 1)[1] in AXES}


def test_the_report_names_no_shipped_study_axis():
    """A study's own figures are declared in its YAML (ablate/study/figures.py); the report's
    code compares no string with a shipped study's axis."""
    axes = _shipped_axes()
    assert {"model.norm_placement", "pos_encoding", "data.batch_size"} <= axes
    root = Path(ablate.__file__).parent / "report"
    named = {
        f"{path.name}:{node.lineno}: {node.value}"
        for path in sorted(root.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in axes
    }
    assert named == set()
