"""The probe (``ablate bench --probe``, section 6 of ``ablate bench --gpu``) runs on a CPU, so
its first run on a GPU is not its first run: the command writes its section with a solo, a
packed and a stacked row, CPU figures where a CPU has them and "not measured" where only CUDA
does, and a verdict with the ``ablate run`` arguments window.sh applies; a failed row stays
visible."""

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from ablate.bench import probe, probe_report
from ablate.cli import app

RUNS = ("solo", "pack of 4", "stack of 4")


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
        assert row["MFU"] == row["peak memory GiB (per member)"] == probe_report.NOT_MEASURED
        if name != "pack of 4":  # the operations of one process's step, counted on a CPU
            assert _number(row["host reads / step"]) >= 0
            assert _number(row["kernel-launching ops / step"]) > 0
    # the attention table: one step's SDPA ops seen on the CPU, CUDA kernel names not measured
    attention = [line for line in md.splitlines() if "dropout" in line and "| solo |" in line]
    assert attention and all(probe_report.NOT_MEASURED in line for line in attention)
    assert all("attention" in line for line in attention)  # an aten SDPA op was seen
    assert "**Verdict.**" in md and "LSTM" in md
    r = json.loads(out.with_suffix(".json").read_text())["stacked"]
    assert [probe_report.row_name(row) for row in r["rows"]] == list(RUNS)
    pack = r["rows"][1]
    assert len(pack["per_process_tokens_per_s"]) == 4 and all(pack["per_process_tokens_per_s"])
    v = r["verdict"]  # the fastest path in all (solo unless 10% faster), and how to take it
    best = max(r["rows"], key=lambda row: row["tokens_per_s"])
    solo = r["rows"][0]["tokens_per_s"]
    expected = best if best["tokens_per_s"] >= probe.MARGIN * solo else r["rows"][0]
    assert v["row"] == probe_report.row_name(expected)
    assert v["args"] == probe.VERDICT_ARGS[v["choice"]] and v["x_solo"] > 0
    assert r["precision"] == probe.PROFILE_PRECISION and not r["cuda"]
    assert r["lstm"]["lstm"] == "float32"  # the recurrence leaves autocast (model/lstm.py)


def _result(cuda: bool, stack_error: str | None = None) -> dict:
    """A probe result as ``probe.measure`` returns it, with made-up figures."""
    rows = []
    figures = ((1e5, 0.05), (2.5e5, 0.125), (3e5, 0.15))  # tokens/s, MFU: solo, pack, stack
    for (k, procs), (tps, mfu) in zip(probe.ROWS, figures, strict=True):
        row = {"members": k, "tokens_per_s": tps, "flops_per_token": 7e7}
        row |= {"attn_kernel": "flash", "attn_backend": "flash"}
        if procs > 1:
            row["processes"] = procs
        if cuda:
            row |= {"mfu": mfu}
            if procs == 1:
                row |= {"peak_mem_gib": 2.0, "peak_mem_per_member_gib": 2.0 / max(k, 1)}
        else:
            row |= {"host_reads_per_step": 0.1, "ops_per_step": 300.0} if procs == 1 else {}
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
        "timed_window": [10, 60],
        "count_window": [10, 30],
        "shape": "6L/6H/384d, ctx 256, batch 64, dropout 0.2",
        "rows": rows,
        "verdict": probe.verdict(rows),
        "attention": attention,
        "lstm": {"precision": "bf16-mixed", "shape": [2, 816], "lstm": "float16"}
        | {"logits": "float32"},
    }


def test_a_failed_row_stays_in_the_table_and_the_verdict_takes_the_others():
    error = probe.failed(RuntimeError("expected scalar type Float but found BFloat16\nmore"))
    assert error == "failed: RuntimeError: expected scalar type Float but found BFloat16"
    md = probe_report.render(_result(cuda=True, stack_error=error))
    runs = _table(md, "run")
    assert runs["stack of 4"]["status"] == error
    assert runs["stack of 4"]["tokens/s (all members)"] == "-"
    assert runs["solo"]["MFU"] == "5.0%" and runs["pack of 4"]["MFU"] == "12.5%"
    assert runs["solo"]["host reads / step"] == probe_report.COUNTED_ON_CPU
    assert "**pack** (pack of 4: 250,000 tokens/s, x2.50 solo)" in md
    assert "`--workers 4 --runs-per-gpu 4`" in md


def test_the_verdict_is_the_most_tokens_per_second_by_a_margin_over_solo():
    r = _result(cuda=True)
    assert r["verdict"]["choice"] == "stack" and r["verdict"]["args"] == "--set train.stack=auto"
    md = probe_report.render(r)
    assert "**stack** (stack of 4: 300,000 tokens/s, x3.00 solo)" in md and "float16" in md
    close = [dict(row, tokens_per_s=1.05e5) if row["members"] else row for row in r["rows"]]
    close[1]["tokens_per_s"] = 1.09e5  # pack 9% faster: within the margin, solo stays
    assert probe.verdict(close)["choice"] == "solo" and probe.verdict(close)["args"] == ""
    assert probe.verdict(close[1:]) is None  # no solo figure: nothing to compare with
    cpu = probe_report.render(_result(cuda=False))
    assert "only rehearses the window's use of it" in cpu
    assert _table(cpu, "run")["stack of 4"]["MFU"] == probe_report.NOT_MEASURED
