"""The stacked probe (``ablate bench --probe``, section 6 of ``ablate bench --gpu``) runs on a
CPU, so its first run on a GPU is not its first run: the command writes its section with a row
per solo run and stack, CPU figures where a CPU has them and "not measured" where only CUDA
does; a failed row stays visible; the decision paragraph follows docs/gpu.md's rule."""

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from ablate.bench import probe, probe_report
from ablate.cli import app

RUNS = ("solo", "stack of 1", "stack of 4", "stack of 8")


def _table(md: str, first_header: str) -> dict[str, dict[str, str]]:
    """The markdown table whose first header cell is ``first_header``: row name -> cells."""
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.setdefault(cells[0], dict(zip(header, cells, strict=True)))
    return rows


def _number(cell: str) -> float:
    assert re.fullmatch(r"[\d,]+(\.\d+)?", cell), cell
    return float(cell.replace(",", ""))


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the probe runs at full size")
def test_the_probe_command_writes_its_section_on_a_cpu(tmp_path):
    out = tmp_path / "probe.md"
    result = CliRunner().invoke(app, ["bench", "--probe", "--out", str(out)])
    assert result.exit_code == 0, result.output
    md = out.read_text()
    assert f"## {probe_report.HEADING}" in md and "**FAILED**" not in md
    runs = _table(md, "run")
    assert set(RUNS) <= set(runs)
    for name in RUNS:
        row = runs[name]
        assert row["status"] == "ok", row
        assert _number(row["tokens/s (all members)"]) > 0
        assert _number(row["host reads / step"]) >= 0
        assert _number(row["kernel-launching ops / step"]) > 0
        assert row["MFU"] == row["peak memory GiB (per member)"] == probe_report.NOT_MEASURED
    # the attention table: one step's SDPA ops seen on the CPU, CUDA kernel names not measured
    attention = [line for line in md.splitlines() if "dropout" in line and "| solo |" in line]
    assert attention and all(probe_report.NOT_MEASURED in line for line in attention)
    assert all("attention" in line for line in attention)  # an aten SDPA op was seen
    assert "What this decides" in md and "LSTM" in md
    r = json.loads(out.with_suffix(".json").read_text())["stacked"]
    assert [row["members"] for row in r["rows"]] == [0, 1, 4, 8]
    assert r["precision"] == probe.PROFILE_PRECISION and not r["cuda"]
    assert r["lstm"]["lstm"] == "float32"  # the recurrence leaves autocast (model/lstm.py)


def _result(cuda: bool, stack_error: str | None = None) -> dict:
    """A probe result as ``probe.measure`` returns it, with made-up figures."""
    rows = []
    figures = ((1e5, 0.05), (1.1e5, 0.06), (3e5, 0.2), (4e5, 0.25))  # tokens/s, MFU
    for k, (tps, mfu) in zip((0, 1, 4, 8), figures, strict=True):
        row = {"members": k, "tokens_per_s": tps, "host_reads_per_step": 0.1}
        row |= {"ops_per_step": 300.0, "attn_kernel": "flash", "attn_backend": "flash"}
        if cuda:
            row |= {"mfu": mfu, "peak_mem_gib": 2.0, "peak_mem_per_member_gib": 2.0 / max(k, 1)}
        if k and stack_error:
            row = {"members": k, "error": stack_error}
        rows.append(row)
    attention = [
        {"members": 0, "case": "learned, dropout 0.2 (the profile)", "pinned": "flash"}
        | {"ops": {"_scaled_dot_product_flash_attention": 6}, "kernels": ["flash_fwd_kernel"]}
    ]
    return {
        "cuda": cuda,
        "tiny": not cuda,
        "device": "a device",
        "precision": "bf16-mixed",
        "peak_tflops": 989.0,
        "peak_source": "a table",
        "timed_window": [20, 100],
        "count_window": [10, 30],
        "shape": "6L/6H/384d, ctx 256, batch 64, dropout 0.2",
        "rows": rows,
        "attention": attention,
        "lstm": {"precision": "bf16-mixed", "shape": [2, 816], "lstm": "float16"}
        | {"logits": "float32"},
    }


def test_a_failed_row_stays_in_the_table_and_decides_for_packing():
    error = probe.failed(RuntimeError("expected scalar type Float but found BFloat16\nmore"))
    assert error == "failed: RuntimeError: expected scalar type Float but found BFloat16"
    md = probe_report.render(_result(cuda=True, stack_error=error))
    runs = _table(md, "run")
    assert runs["stack of 4"]["status"] == error
    assert runs["stack of 4"]["tokens/s (all members)"] == "-"
    assert runs["solo"]["MFU"] == "5.0%"
    assert "**Pack** until the stacked rows run" in md


def test_the_decision_follows_the_mfu_of_the_best_stack():
    md = probe_report.render(_result(cuda=True))
    assert "stack of 8" in md and "25.0% MFU against solo's 5.0%" in md and "**stack**" in md
    assert "float16" in md
    cpu = probe_report.render(_result(cuda=False))
    assert "Nothing is decided on a CPU" in cpu
    assert _table(cpu, "run")["stack of 4"]["MFU"] == probe_report.NOT_MEASURED
