"""The probe (``ablate bench --probe``, section 6 of ``ablate bench --gpu``) runs on a CPU, so
its first run on a GPU is not its first run: the command writes its section with solo, packed
and stacked rows (1, 4, 8), compiled rows (run here with ``--compiled`` only, slow), CPU figures
where a CPU has them and "not measured" where only CUDA does, the stacked model's goals, and two
verdicts with the ``ablate run`` arguments window.sh applies; a failed row stays visible, and a
row whose arguments would change run ids is never a verdict."""

import json
import re
from pathlib import Path

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from typer.testing import CliRunner

from ablate.bench import probe, probe_report, probe_runs
from ablate.bench.probe_runs import train
from ablate.cli import app

EAGER = ("solo", "pack of 4", "stack of 1", "stack of 4", "stack of 8")
COMPILED = ("solo, compiled", "stack of 8, compiled", "stack of 8, reduce-overhead")


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
    assert list(runs) == [*EAGER, *COMPILED]
    for name in EAGER:
        row = runs[name]
        assert row["status"] == "ok", row
        assert _number(row["tokens/s (all members)"]) > 0
        assert row["MFU"] == row["peak memory GiB (per member)"] == probe_report.NOT_MEASURED
        assert row["compile s"] == "-"
        if name != "pack of 4":  # the operations of one process's step, counted on a CPU
            assert _number(row["host reads / step"]) >= 0
            assert _number(row["kernel-launching ops / step"]) > 0
    for name in COMPILED:  # inductor's C++ takes minutes on a CPU: --compiled runs them
        assert runs[name]["status"] == "not run: compiled rows on a CPU: --compiled"
    # the stacked model's goals, from the rows' own figures
    r = json.loads(out.with_suffix(".json").read_text())["stacked"]
    rate = {probe_report.row_name(row): row.get("tokens_per_s") for row in r["rows"]}
    for name, goal in probe_report.GOALS:
        assert f"- {name} vs solo: x{rate[name] / rate['solo']:.2f} (goal ≥ {goal:g})" in md
    # the attention table: one step's SDPA ops seen on the CPU, CUDA kernel names not measured
    attention = [line for line in md.splitlines() if "dropout" in line and "| solo |" in line]
    assert attention and all(probe_report.NOT_MEASURED in line for line in attention)
    assert all("attention" in line for line in attention)  # an aten SDPA op was seen
    assert "**Verdict.**" in md and "LSTM" in md
    pack = r["rows"][1]
    assert len(pack["per_process_tokens_per_s"]) == 4 and all(pack["per_process_tokens_per_s"])
    # the verdicts: the fastest path in all (solo unless 10% faster), and how to take it
    solo = r["rows"][0]
    for key, rows in (("verdict", r["rows"]), ("unstacked", [r["rows"][0], pack])):
        best = max(
            (row for row in rows if row.get("tokens_per_s")), key=lambda x: x["tokens_per_s"]
        )
        expected = best if best["tokens_per_s"] >= probe.MARGIN * solo["tokens_per_s"] else solo
        assert r[key]["row"] == probe_report.row_name(expected), key
        assert r[key]["args"] == probe.row_args(expected) and r[key]["x_solo"] > 0
    assert r["precision"] == probe.PROFILE_PRECISION and not r["cuda"]
    assert r["lstm"]["lstm"] == "float32"  # the recurrence leaves autocast (model/lstm.py)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the probe runs at full size")
def test_a_compiled_row_compiles_in_its_warm_up_run_only(tmp_path, monkeypatch):
    """The compiled solo row with inductor, as on a GPU: its warm-up run compiles, its two timed
    runs reuse the graphs (dynamo's counters, read after each of the row's three runs: no new
    graph after the first, no graph break), so its tokens/s exclude compiling, which is its own
    column."""
    graphs = []

    def counted(*args, **kwargs):
        out = train(*args, **kwargs)
        assert not counters["graph_break"], dict(counters["graph_break"])
        graphs.append(counters["stats"]["unique_graphs"])
        return out

    monkeypatch.setattr(probe_runs, "train", counted)
    flat = probe.probe_flat(probe.synthetic_text(tmp_path), "bf16-mixed", False, True)
    counters.clear()
    row = probe.measure_row(flat, probe.ROWS[5], probe.CPU_TIMED, None, cuda=False)
    assert probe_report.row_name(row) == "solo, compiled" and "error" not in row, row
    assert len(graphs) == 3 and graphs[0] >= 1 and graphs == graphs[:1] * 3, graphs
    assert row["tokens_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["wall_s"]) == 2  # the timed runs only


def _result(cuda: bool, stack_error: str | None = None, moved: tuple[str, ...] = ()) -> dict:
    """A probe result as ``probe.measure`` returns it, with made-up figures: every row of the
    probe, the compiled stack of 8 the fastest; ``moved``: keys the compiled rows' arguments are
    made to move run ids by (none really does: ``test_no_way_of_training_moves_a_run_id``)."""
    rows = []
    tps = (1e5, 2.5e5, 0.95e5, 3e5, 3.2e5, 1.2e5, 4e5, 4.5e5)
    for spec, rate in zip(probe.ROWS, tps, strict=True):
        row = spec.label() | {"tokens_per_s": rate, "flops_per_token": 7e7}
        row |= {"attn_kernel": "flash", "attn_backend": "flash"}
        row["tokens_per_s_per_member"] = rate / max(spec.members, spec.processes)
        row["changes_run_id"] = list(moved) if spec.compile_mode else []
        if spec.compile_mode:
            row["compile_s"] = 30.0
        if cuda:
            row |= {"mfu": rate * 7e7 / 989e12 * 10}
            if spec.processes == 1:
                row |= {"peak_mem_gib": 2.0, "peak_mem_per_member_gib": 2.0 / max(spec.members, 1)}
        elif spec.processes == 1:
            row |= {"host_reads_per_step": 0.1, "ops_per_step": 300.0}
        if spec.members and stack_error:
            row = spec.label() | {"error": stack_error, "changes_run_id": []}
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
        "timed_window": [5, 55],
        "count_window": [10, 30],
        "shape": "6L/6H/384d, ctx 256, batch 64, dropout 0.2",
        "rows": rows,
        "verdict": probe.verdict(rows),
        "unstacked": probe.verdict(rows, stacked=False),
        "attention": attention,
        "lstm": {"precision": "bf16-mixed", "shape": [2, 816], "lstm": "float16"}
        | {"logits": "float32"},
    }


def test_a_failed_row_stays_in_the_table_and_the_verdict_takes_the_others():
    error = probe.failed(RuntimeError("expected scalar type Float but found BFloat16\nmore"))
    assert error == "failed: RuntimeError: expected scalar type Float but found BFloat16"
    md = probe_report.render(_result(cuda=True, stack_error=error))
    runs = _table(md, "run")
    for name in ("stack of 1", "stack of 4", "stack of 8", "stack of 8, compiled"):
        assert runs[name]["status"] == error
        assert runs[name]["tokens/s (all members)"] == "-"
    assert runs["solo"]["MFU"] == "7.1%" and runs["pack of 4"]["MFU"] == "17.7%"
    assert runs["solo"]["host reads / step"] == probe_report.COUNTED_ON_CPU
    assert runs["solo, compiled"]["compile s"] == "30.0" and runs["solo"]["compile s"] == "-"
    assert "- stack of 1 vs solo: not measured (goal ≥ 0.9)" in md
    assert "All rows: **pack** (pack of 4: 250,000 tokens/s, x2.50 solo)" in md
    assert "`--workers 4 --runs-per-gpu 4`" in md


def test_the_verdicts_are_the_most_tokens_per_second_that_keep_run_ids():
    r = _result(cuda=True, moved=("model.example",))
    v, u = r["verdict"], r["unstacked"]
    # the compiled stack of 8 (x4.50) is faster, but made to move run ids here
    assert v["choice"] == "stack" and v["row"] == "stack of 8"
    assert v["args"] == "--set train.stack=auto"
    assert [m["row"] for m in v["measured_only"]] == [
        "stack of 8, compiled",
        "stack of 8, reduce-overhead",
    ]
    # unstacked: solo, pack and compiled solo (made to move run ids)
    assert u["choice"] == "pack" and u["args"] == "--workers 4 --runs-per-gpu 4"
    assert u["measured_only"] == []
    md = probe_report.render(r)
    assert "All rows: **stack** (stack of 8: 320,000 tokens/s, x3.20 solo)" in md
    assert "Faster but measured only: stack of 8, compiled (x4.00 solo)" in md
    assert "Unstacked: **pack** (pack of 4: 250,000 tokens/s, x2.50 solo)" in md
    assert "- stack of 1 vs solo: x0.95 (goal ≥ 0.9)" in md
    assert "- stack of 8 vs solo: x3.20 (goal ≥ 3)" in md and "float16" in md
    # as they are (compile is in no run id), the compiled rows are verdicts, with their arguments
    free = [dict(row, changes_run_id=[]) for row in r["rows"]]
    assert probe.verdict(free)["args"] == (
        "--set train.stack=auto --set train.compile=true --set train.compile_mode=reduce-overhead"
    )
    assert probe.verdict(free, stacked=False)["choice"] == "pack"
    close = [dict(row, tokens_per_s=1.05e5) if row["members"] else row for row in r["rows"]]
    close[1]["tokens_per_s"] = 1.09e5  # pack 9% faster: within the margin, solo stays
    assert probe.verdict(close)["choice"] == "solo" and probe.verdict(close)["args"] == ""
    assert probe.verdict(close[1:]) is None  # no solo figure: nothing to compare with
    cpu = probe_report.render(_result(cuda=False))
    assert "only rehearse the window's use of them" in cpu
    assert _table(cpu, "run")["stack of 4"]["MFU"] == probe_report.NOT_MEASURED


def test_no_way_of_training_moves_a_run_id(tmp_path: Path):
    """Checked on the probe's own config: a verdict may set train.stack, train.compile and
    compile_mode, and a registered confirmation keeps the run ids it names."""
    flat = probe.probe_flat(probe.synthetic_text(tmp_path), "bf16-mixed", False, True)
    by_name = {probe_report.row_name(s.label()): s.label() for s in probe.ROWS}
    assert probe.id_changing(flat, by_name["stack of 8"]) == []
    assert probe.id_changing(flat, by_name["pack of 4"]) == []
    assert probe.id_changing(flat, by_name["solo, compiled"]) == []
    assert probe.id_changing(flat, by_name["stack of 8, reduce-overhead"]) == []
    assert probe.row_choice(by_name["stack of 8, reduce-overhead"]) == "stack-graphed"
