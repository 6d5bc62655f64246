"""The paper tables: per study ``table.md`` and ``table.tex`` (one row per arm, the claim metric's
mean ± the half-width of its 95% t-interval, the best in bold, what each test decided), the
tables across studies and scales (``<reports>/table.md`` and ``.tex``), well-formed LaTeX that
pdflatex compiles where it is installed, and the README's example filled from a report."""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pytest
import yaml
from scipy import stats

from ablate.report import build_reports
from ablate.report.latex import booktabs, marks, tex
from ablate.report.readme import END, START, answer_section, fill_readme

ACT = "model.activation"
RELU = [1.70, 1.71, 1.705]
GELU = [1.75, 1.77, 1.76]
CLAIM = {"id": "relu-wins", "text": "ReLU beats GELU", "expect": "better"}
CLAIM |= {"a": {ACT: "relu"}, "b": {ACT: "gelu"}}


def _report(root, write_run, *, name="act", relu=RELU, gelu=GELU, out="reports", device="cpu"):
    store = root / f"runs-{name}-{device}"
    for seed, (r, g) in enumerate(zip(relu, gelu, strict=True)):
        write_run(store, name, {ACT: "relu"}, seed, "completed", r)
        write_run(store, name, {ACT: "gelu"}, seed, "completed", g)
    from ablate.store import RunStore

    for run in RunStore(store).runs(name):
        run.write_summary({**run.read_summary(), "environment": {"device": device}})
    spec = root / f"{name}.yaml"
    grid = {ACT: ["relu", "gelu"]}
    spec.write_text(
        yaml.safe_dump({"name": name, "grid": grid, "seeds": [0, 1, 2]} | {"claims": [CLAIM]})
    )
    (path,) = build_reports([str(spec)], store=store, out=root / out, quiet=True)
    return path


def _half(values) -> float:
    v = np.asarray(values)
    return stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))


def test_the_study_table_has_a_row_per_arm_the_best_in_bold(tmp_path, write_run):
    path = _report(tmp_path, write_run)
    md = (path.parent / "table.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    relu, gelu = rows["relu"], rows["gelu"]
    assert f"| **{np.mean(RELU):.4f} ± {_half(RELU):.4f}** |" in relu  # the lowest: bold
    assert f"| {np.mean(GELU):.4f} ± {_half(GELU):.4f} |" in gelu
    # the t-test decides it (paired, 3 seeds); the sign-flip test cannot go below 2/2^3
    assert relu.endswith("| 3 | 0–2 | 1\\* |") and gelu.endswith("| 1\\* |")
    assert "1 relu-wins (reproduces by t-test only)" in md
    latex = (path.parent / "table.tex").read_text()
    assert "\\textbf{1.7050 $\\pm$ 0.0124}" in latex and "1$^{*}$" in latex
    _well_formed(latex)


def _well_formed(latex: str) -> None:
    """Balanced environments and braces, ASCII, and the same number of ``&`` in every row."""
    assert latex.isascii()
    opened = re.findall(r"\\(begin|end)\{(\w+)\}", latex)
    stack = []
    for kind, env in opened:
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, env
    assert not stack
    assert latex.count("{") - latex.count("\\{") == latex.count("}") - latex.count("\\}")
    body = latex.split("\\midrule", 1)[1].split("\\bottomrule")[0]
    header = latex.split("\\toprule", 1)[1].split("\\midrule")[0]
    rows = [r for r in (header + body).split("\\\\") if r.strip() and r.strip() != "\\midrule"]
    counts = {r.replace("\\&", "").count("&") for r in rows}
    spec = re.search(r"\\begin\{tabular\}\{(.*)\}\n", latex)[1]
    assert counts == {len(re.findall(r"p\{[^}]*\}|[lrc]", spec)) - 1}, counts


def _pdflatex(tmp_path, latex: str) -> None:
    """Compile the table in a minimal document (booktabs only) where pdflatex exists."""
    if shutil.which("pdflatex") is None:
        return  # the checks above ran; only the compile needs TeX
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n"
        + latex
        + "\\end{document}\n"
    )
    res = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 1000


def test_latex_escapes_and_marks():
    assert tex("a_b & 50% ± −1 ≈ lr* ∝ b^α #1 {x}") == (
        "a\\_b \\& 50\\% $\\pm$ $-$1 $\\approx$ lr* $\\propto$ b\\textasciicircum{}$\\alpha$ "
        "\\#1 \\{x\\}"
    )
    assert marks("1*†, 3*, 5") == "1$^{*\\dagger }$, 3$^{*}$, 5"
    latex = booktabs(
        ["a_1", "b"], [["x", "1"], None, ["y", "2"]], align="lr", caption="c", label="t"
    )
    _well_formed(latex)
    assert latex.count("\\midrule") == 2


def test_the_tables_across_scales_put_cpu_and_gpu_side_by_side(tmp_path, write_run):
    cpu = _report(tmp_path, write_run)
    # the GPU reports: the same study, GELU ahead there (the other way round)
    gpu = _report(tmp_path, write_run, relu=GELU, gelu=RELU, out="reports/gpu", device="cuda")
    md = (tmp_path / "reports" / "table.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| study |"))
    assert "| CPU: a − b [95% CI] | CPU: n | CPU: verdict | GPU: a − b [95% CI] |" in header
    (row,) = [line for line in md.splitlines() if "| relu-wins |" in line]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "activation=gelu vs activation=relu"  # the CPU orientation, for both
    d = np.subtract(GELU, RELU)
    m, half = d.mean(), _half(d)
    lo, hi = m - half, m + half
    places = 1 - math.floor(math.log10(hi - lo))
    assert cells[3] == f"{m:.{places}f} [{lo:.{places}f}, {hi:.{places}f}]"
    assert cells[6] == f"{-m:.{places}f} [{-hi:.{places}f}, {-lo:.{places}f}]"  # flipped back
    assert cells[5] == "reproduces by t-test only (exploratory)"
    assert cells[8] == "contradicted by t-test only (exploratory)"
    scale = next(line for line in md.splitlines() if "| scale |" in line)
    assert scale.count("51,000 params, 38,400 tokens") == 2
    latex = (tmp_path / "reports" / "table.tex").read_text()
    _well_formed(latex)
    _pdflatex(tmp_path, latex)
    _pdflatex(tmp_path, (cpu.parent / "table.tex").read_text())
    assert (gpu.parent / "table.md").is_file()


def test_the_readme_example_is_the_reports_answer(tmp_path, write_run):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nBefore.\n\n{START.format(study='act')}\nold\n{END}\n\nAfter.\n")
    path = _report(tmp_path, write_run)  # `ablate report` fills it
    text = readme.read_text()
    block = text.split(START.format(study="act") + "\n")[1].split("\n" + END)[0]
    assert block == answer_section(path.read_text()).replace(
        "](provenance.md#", "](reports/act/provenance.md#"
    )
    assert block.startswith("1 claim(s)") and "| relu-wins |" in block
    assert text.startswith("# x\n\nBefore.\n\n") and text.endswith(f"{END}\n\nAfter.\n")
    assert fill_readme(readme, "other", path) is False  # no markers for it: left as it is


@pytest.mark.parametrize("study", ["norm_placement_ladder"])
def test_the_shipped_readme_shows_the_shipped_answer(study):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    assert START.format(study=study) in readme
    block = readme.split(START.format(study=study) + "\n")[1].split("\n" + END)[0]
    report = (root / "reports" / study / "report.md").read_text()
    expected = answer_section(report).replace(
        "](provenance.md#", f"](reports/{study}/provenance.md#"
    )
    assert block == expected  # `make report` fills it: never typed
    assert len(readme.split()) <= 1200
    quoted = [line for line in readme.splitlines() if line.startswith(("> ", "- "))]
    assert all(len(line.split()) <= 60 for line in quoted)
    assert "run --confirm" not in readme
