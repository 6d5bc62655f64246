"""The probe (``ablate bench --probe``, section 6 of ``ablate bench --gpu``) runs on a CPU, so
its first run on a GPU is not its first run: the command writes its section with its plan's
rows (solo and stacked, eager, compiled and reduce-overhead with validation, a pack and a bigger
stack if time is left), the profile of a stack's steps, the stack = solo check, CPU figures
where a CPU has them and "not measured" where only CUDA does, the goals, and two verdicts with
the ``ablate run`` arguments window.sh applies; a failed row stays visible, a row the time left
does not hold is not run, and a row whose arguments would change run ids is never a verdict.

One module-scoped run of the command at the tiny shape, with the plan's stacks shrunk to 2 (and
16 to 4: the same kinds of row), is shared by the tests that read it; the whole probe with its
compiled rows (inductor's C++ on a CPU: minutes) is an acceptance check (``make test-accept``).
"""

import dataclasses
import json
import math
import re

import pytest
import torch
from torch._dynamo.utils import counters
from typer.testing import CliRunner

from ablate.bench import probe, probe_kernels, probe_report, probe_runs
from ablate.bench.probe_profile import KINDS, Event, kernel_kind, summarise
from ablate.bench.probe_runs import RTOL_BF16, loss_differences, train
from ablate.cli import app
from ablate.store import RunStore

NOT_COMPILED = "not run: compiled rows on a CPU: --compiled"
SMALL = {8: 2, 16: 4}  # the plan's stacks -> the tests' (the same kinds of row, less to train)
EAGER = ("solo", "stack of 2")
COMPILED = ("stack of 2, compiled", "stack of 2, reduce-overhead", "solo, reduce-overhead")
IF_TIME = ("pack of 4", "stack of 4, compiled")


def _small_plan() -> tuple:
    return tuple(
        dataclasses.replace(step, members=SMALL[step.members])
        if isinstance(step, probe.Row) and step.members
        else step
        for step in probe.PLAN
    )


def _probe(tmp, *args: str) -> tuple[str, dict]:
    """The command at the small plan: its report and its JSON's probe results."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(probe, "PLAN", _small_plan())
        mp.setattr(probe, "PROFILED", 2)
        mp.setattr(probe_kernels, "STACK", 2)
        out = tmp / "probe.md"
        result = CliRunner().invoke(app, ["bench", "--probe", "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return out.read_text(), json.loads(out.with_suffix(".json").read_text())["stacked"]


@pytest.fixture(scope="module")
def cpu_probe(tmp_path_factory):
    """The probe without its compiled rows, and a budget of 1 s: the if-time rows not run."""
    if torch.cuda.is_available():
        pytest.skip("on CUDA the probe runs at full size")
    return _probe(tmp_path_factory.mktemp("probe"), "--seconds", "1")


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


def test_the_probe_command_writes_its_section_on_a_cpu(cpu_probe):
    md, r = cpu_probe
    assert f"## {probe_report.HEADING}" in md and "**FAILED**" not in md
    runs = _table(md, "run")
    assert list(runs) == [*EAGER, *COMPILED, *IF_TIME]  # the plan's order
    for name in EAGER:
        row = runs[name]
        assert row["status"] == "ok", row
        tokens = _number(row["tokens/s (all members)"])
        assert tokens > 0 and _number(row["ms / step"]) > 0
        assert row["MFU"] == row["peak memory GiB (per member)"] == probe_report.NOT_MEASURED
        assert row["compile s"] == "-"
        assert _number(row["host reads / step"]) >= 0  # one process's step, counted on a CPU
        assert _number(row["kernel-launching ops / step"]) > 0
    for name in COMPILED:  # inductor's C++ takes minutes on a CPU: --compiled runs them
        assert runs[name]["status"] == NOT_COMPILED
    # the pack's plan is 16 s and the budget 1 s; the stack of 16 is a compiled row
    assert runs["pack of 4"]["status"].startswith("not run: no time left (~16 s planned")
    assert runs["stack of 4, compiled"]["status"] == NOT_COMPILED
    rows = {probe_report.row_name(row): row for row in r["rows"]}
    solo, stack = rows["solo"], rows["stack of 2"]
    # a step's ms from tokens/s: the stack's step is 2 members' batches
    assert stack["step_ms"] == pytest.approx(1e3 * 2 * 4 * 32 / stack["tokens_per_s"])
    assert "- the fastest solo step: " + f"{solo['step_ms']:.1f} ms (goal ≤ 15 ms)" in md
    assert "- stack of 8 vs solo: not measured (goal ≥ 3)" in md  # the plan's names
    assert all(row["probe_s"] >= 0 for row in r["rows"])
    # the attention table: one step's SDPA ops seen on the CPU, CUDA kernel names not measured
    attention = [line for line in md.splitlines() if "dropout" in line and "| solo |" in line]
    assert attention and all(probe_report.NOT_MEASURED in line for line in attention)
    assert all("attention" in line for line in attention)  # an aten SDPA op was seen
    assert "**Verdict.**" in md and "LSTM" in md
    assert r["lstm"]["lstm"] == "float32"  # the recurrence leaves autocast (model/lstm.py)
    # the verdicts: the fastest path in all (solo unless 10% faster), and how to take it
    for key, among in (("verdict", [solo, stack]), ("unstacked", [solo])):
        best = max(among, key=lambda x: x["tokens_per_s"])
        expected = best if best["tokens_per_s"] >= probe.MARGIN * solo["tokens_per_s"] else solo
        assert r[key]["row"] == probe_report.row_name(expected), key
        assert r[key]["args"] == probe.row_args(expected) and r[key]["x_solo"] > 0
    assert r["precision"] == probe.PROFILE_PRECISION and not r["cuda"]
    # start-up, the plan and the inductor cache, in the JSON and the report
    assert r["startup"]["process_s"] > 0 and "warmup_s" not in r["startup"]  # CUDA only
    assert r["plan"] == {"seconds": 1, "planned_s": 161, "if_time_s": 60}
    assert r["inductor_cache"]["dir"] and f"`{r['inductor_cache']['dir']}`" in md


def test_the_profile_of_a_stack_sums_cpu_operations_by_kind(cpu_probe):
    """The eager profile on a CPU: 12 recorded steps of the stack's own loop, the operations'
    own time by kind inside the wall time, CUDA's copies and syncs not measured."""
    md, r = cpu_probe
    p = r["profile"]["eager"]
    assert (p["activity"], p["members"], p["steps"], p["compiled"]) == ("cpu", 2, 12, False)
    kinds = p["kernel_ms_per_step"]
    assert set(kinds) == set(KINDS) and kinds["gemm"] > 0 and kinds["elementwise"] > 0
    assert kinds["optimizer"] > 0 and kinds["triton"] == 0  # fused AdamW; nothing compiled
    # on a CPU busy is the operations' time over the wall: both per step, so the same ratio
    assert p["busy_pct"] == pytest.approx(100 * sum(kinds.values()) / p["wall_ms_per_step"])
    assert 0 < p["busy_pct"] < 100
    assert p["dtoh_copies"] is None and p["syncs"] is None and p["host_reads"] >= 0
    assert r["profile"]["compiled"]["skipped"] == NOT_COMPILED.removeprefix("not run: ")
    table = _table(md, "profiled steps")
    assert list(table) == ["eager"] and table["eager"]["syncs"] == probe_report.NOT_MEASURED
    assert f"Not profiled: compiled: {NOT_COMPILED}." in md


def test_a_stack_of_4_equals_its_solo_runs_in_the_probe(cpu_probe):
    md, r = cpu_probe
    e = r["equal"]
    assert e["ok"] and e["missing"] == [] and e["rtol"] == RTOL_BF16
    # every member's train/loss at each log step, and the final val/loss
    per_member = probe_runs.EQUAL_STEPS // probe_runs.EQUAL_LOG
    assert e["compared"] >= probe_runs.EQUAL_MEMBERS * per_member
    assert e["max_rel_diff"] <= RTOL_BF16
    assert f"Stack = solo: ok, max |diff| {e['max_abs_diff']:.2g}" in md


def test_loss_differences_find_a_member_that_differs_or_logged_less():
    solo = [[(2, "train/loss", 4.0), (2, "lr", 1e-3), (4, "val/loss", 3.0)]] * 2
    assert loss_differences(solo, solo) | {"rtol": None} == {
        "ok": True,
        "max_abs_diff": 0.0,
        "max_rel_diff": 0.0,
        "rtol": None,
        "compared": 4,  # two members' two losses; lr is not a loss
        "missing": [],
    }
    near = [solo[0], [(2, "train/loss", 4.0 * (1 + RTOL_BF16 / 2)), (4, "val/loss", 3.0)]]
    assert loss_differences(solo, near)["ok"]
    far = [solo[0], [(2, "train/loss", 4.04), (4, "val/loss", 3.0)]]  # 1e-2: a real difference
    d = loss_differences(solo, far)
    assert not d["ok"] and d["max_abs_diff"] == pytest.approx(0.04)
    assert d["max_rel_diff"] == pytest.approx(0.01)
    short = [solo[0], [(2, "train/loss", 4.0)]]
    d = loss_differences(solo, short)
    assert not d["ok"] and d["missing"] == ["member 1: val/loss at step 4"]
    assert not loss_differences([[]], [[]])["ok"]  # nothing compared proves nothing


@pytest.mark.parametrize(
    "name, kind",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", "gemm"),
        ("aten::addmm", "gemm"),
        ("aten::bmm", "gemm"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", "attention"),
        ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("triton_per_fused__to_copy_add_native_layer_norm_0", "triton"),
        ("triton_tem_fused_mm_3", "triton"),
        ("## Call CompiledFxGraph fabc123 ##", "triton"),
        (
            "void at::native::(anonymous)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
            "optimizer",
        ),
        ("aten::_fused_adamw_", "optimizer"),
        ("aten::_foreach_norm", "optimizer"),
        ("void at::native::vectorized_elementwise_kernel<4, GeluCUDAKernelImpl>", "elementwise"),
        ("void at::native::(anonymous)::vectorized_layer_norm_kernel<float>", "elementwise"),
        ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps>>", "elementwise"),
        ("aten::native_dropout", "elementwise"),
        ("aten::copy_", "elementwise"),
        ("Memcpy DtoH (Device -> Pageable)", "other"),
        ("aten::embedding_dense_backward", "other"),
        ("aten::index", "other"),
    ],
)
def test_a_kernel_kind_by_its_name(name, kind):
    assert kernel_kind(name) == kind


def test_the_profile_summary_of_hand_made_events():
    """Two steps of 1000 us; on CUDA two overlapping GEMMs (union 300 us, sum 400 us), an
    AdamW kernel and a device-to-host copy, one sync and two host reads, one of them inside an
    aten operation (a CPU kernel's own, not the loop's)."""
    events = [
        Event("ProfilerStep#4", False, 0, 1000, 50),
        Event("ProfilerStep#5", False, 1000, 2000, 50),
        Event("sm90_xmma_gemm_bf16", True, 100, 300, 0),
        Event("sm90_xmma_gemm_bf16", True, 200, 400, 0),
        Event("multi_tensor_apply_kernel<FusedAdamMathFunctor>", True, 1500, 1600, 0),
        Event("Memcpy DtoH (Device -> Pageable)", True, 1900, 2100, 0),
        Event("cudaStreamSynchronize", False, 1900, 2100, 200),
        Event("aten::_local_scalar_dense", False, 1900, 2100, 10),
        Event("aten::_local_scalar_dense", False, 500, 510, 10, nested=True),
    ]
    s = summarise(events, 2, cuda=True)
    assert s["wall_ms_per_step"] == pytest.approx(2.1 / 2)  # to the copy's end, after the steps
    assert s["kernel_ms_per_step"] == {
        "gemm": pytest.approx(0.2),
        "attention": 0.0,
        "triton": 0.0,
        "elementwise": 0.0,
        "optimizer": pytest.approx(0.05),
        "other": pytest.approx(0.1),
    }
    assert s["busy_pct"] == pytest.approx(100 * (300 + 100 + 200) / 2100)
    assert (s["host_reads"], s["dtoh_copies"], s["syncs"]) == (1, 1, 1)
    # on a CPU the kernels are operations, their own time summed (no union), to the steps' end
    cpu = [
        Event("ProfilerStep#4", False, 0, 1000, 600),
        Event("aten::mm", True, 100, 500, 300),
        Event("aten::add", True, 500, 700, 100),
    ]
    s = summarise(cpu, 1, cuda=False)
    assert s["busy_pct"] == pytest.approx(40.0) and s["wall_ms_per_step"] == pytest.approx(1.0)
    assert s["dtoh_copies"] is None and s["syncs"] is None
    assert "error" in summarise(cpu[1:], 1, cuda=False)  # no step recorded


def test_a_row_run_only_if_time_is_left_needs_its_plan_at_the_probe_pace():
    pack = next(step for step in probe.ROWS if step.processes > 1)
    assert pack.if_time and pack.plan_s == 16
    assert probe.skip_reason(pack, True, left=20, need=16) is None
    assert probe.skip_reason(pack, True, left=10, need=16) == (
        "no time left (~16 s planned, 10 s left)"
    )
    solo = probe.PLAN[0]
    assert probe.skip_reason(solo, True, left=-5, need=5) is None  # the window's limit cuts it
    compiled = next(step for step in probe.PLAN if isinstance(step, probe.Part) and step.compiled)
    assert probe.skip_reason(compiled, False, left=100, need=8) == NOT_COMPILED[9:]
    # the plan: what always runs fits the window's budget; the pack fits beside it
    assert probe.planned_s(False) <= probe.PROBE_SECONDS
    assert probe.planned_s(False) + pack.plan_s <= probe.PROBE_SECONDS


@pytest.mark.accept  # inductor's C++ on 2 cores: minutes
@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the probe runs at full size")
def test_the_whole_probe_with_its_compiled_rows_on_a_cpu(tmp_path, monkeypatch):
    """Every row and part runs (a budget of 900 s): the pack's 4 processes, the compiled
    rows, the reduce-overhead rows evaluating every 20 steps within their timed runs (the CUDA
    graph path's code, which on a CPU adds no graphs), the compiled profile reusing the
    compiled row's graphs."""
    evaluated = {}

    def recorded(cfg, members, root):
        out = train(cfg, members, root)
        if cfg.train.compile_mode == "reduce-overhead":
            rows = RunStore(root).run("probe", cfg.run_id()).read_metrics()
            key = (members, cfg.train.max_steps)
            evaluated[key] = sorted(s for s, m, _ in rows if m == "val/loss")
        return out

    monkeypatch.setattr(probe_runs, "train", recorded)
    md, r = _probe(tmp_path, "--compiled", "--seconds", "900")
    runs = _table(md, "run")
    assert all(row["status"] == "ok" for row in runs.values()), runs
    rows = {probe_report.row_name(row): row for row in r["rows"]}
    for name in (*COMPILED, "stack of 4, compiled"):
        assert rows[name]["tokens_per_s"] > 0 and rows[name]["compile_s"] > 0, name
    for name in COMPILED[1:]:
        assert rows[name]["eval_every"] == probe.VALIDATE_EVERY
    # the longer timed run (30 steps) validated at step 20, its graphs replayed after it; its
    # final evaluation is the summary's, off the interval, logged as no val/loss row
    window = r["timed_window"][1]
    assert evaluated[(2, window)] == evaluated[(0, window)] == [probe.VALIDATE_EVERY]
    pack = rows["pack of 4"]
    assert len(pack["per_process_tokens_per_s"]) == 4 and all(pack["per_process_tokens_per_s"])
    compiled = r["profile"]["compiled"]
    assert compiled["compiled"] and compiled["activity"] == "cpu", compiled
    assert compiled["kernel_ms_per_step"]["triton"] > 0  # the graphs' calls hold their kernels
    assert r["equal"]["ok"] and math.isfinite(r["wall_s"])


@pytest.mark.accept  # inductor's C++ on 2 cores: tens of seconds
@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA the probe runs at full size")
def test_a_compiled_row_compiles_in_its_warm_up_run_only(tmp_path, monkeypatch):
    """A compiled solo row with inductor, as on a GPU: its warm-up run compiles, its two timed
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
    spec = probe.Row(0, compile_mode="default")
    row = probe.measure_row(flat, spec, probe.CPU_TIMED, None, cuda=False)
    assert probe_report.row_name(row) == "solo, compiled" and "error" not in row, row
    assert len(graphs) == 3 and graphs[0] >= 1 and graphs == graphs[:1] * 3, graphs
    assert row["tokens_per_s"] > 0 and row["compile_s"] > 0
    assert len(row["wall_s"]) == 2  # the timed runs only


def _result(cuda: bool, stack_error: str | None = None, moved: tuple[str, ...] = ()) -> dict:
    """A probe result as ``probe.measure`` returns it, with made-up figures: every row of the
    probe, the compiled stack of 16 the fastest; ``moved``: keys the compiled rows' arguments
    are made to move run ids by (none really does: ``test_no_way_of_training_moves_a_run_id``)."""
    rows = []
    # solo, stack of 8, its compiled and reduce-overhead rows, solo reduce-overhead, pack, 16
    tps = (1e5, 3.2e5, 4e5, 4.5e5, 1.2e5, 2.5e5, 5e5)
    for spec, rate in zip(probe.ROWS, tps, strict=True):
        row = spec.label() | {"tokens_per_s": rate, "flops_per_token": 7e7}
        row |= {"attn_kernel": "flash", "attn_backend": "flash", "probe_s": 10.0}
        row["tokens_per_s_per_member"] = rate / max(spec.members, spec.processes)
        row["step_ms"] = 1e3 * max(spec.members, spec.processes) * 64 * 256 / rate
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
        "profile": {"eager": {"error": "failed: RuntimeError: no kineto"}},
        "equal": {"error": "failed: RuntimeError: out of memory"},
        "startup": {"process_s": 8.0, "warmup_s": 4.0},
        "plan": {"seconds": 180, "planned_s": 161, "if_time_s": 60},
        "inductor_cache": {"dir": "/c", "source": "TORCHINDUCTOR_CACHE_DIR"}
        | {"fx_graph_cache": True},
        "wall_s": 170.0,
    }


def test_a_failed_row_stays_in_the_table_and_the_verdict_takes_the_others():
    error = probe.failed(RuntimeError("expected scalar type Float but found BFloat16\nmore"))
    assert error == "failed: RuntimeError: expected scalar type Float but found BFloat16"
    md = probe_report.render(_result(cuda=True, stack_error=error))
    runs = _table(md, "run")
    for name in ("stack of 8", "stack of 8, compiled", "stack of 16, compiled"):
        assert runs[name]["status"] == error
        assert runs[name]["tokens/s (all members)"] == "-"
    assert runs["solo"]["MFU"] == "7.1%" and runs["pack of 4"]["MFU"] == "17.7%"
    assert runs["solo"]["host reads / step"] == probe_report.COUNTED_ON_CPU
    assert runs["solo, reduce-overhead"]["compile s"] == "30.0" and runs["solo"]["compile s"] == "-"
    assert runs["solo"]["ms / step"] == "163.8" and runs["solo"]["probe s"] == "10.0"
    assert "- stack of 8 vs solo: not measured (goal ≥ 3)" in md
    assert "All rows: **pack** (pack of 4: 250,000 tokens/s, x2.50 solo)" in md
    assert "`--workers 4 --runs-per-gpu 4`" in md
    # failed parts say so in a line of their own
    assert "_The profile: eager: failed: RuntimeError: no kineto._" in md
    assert "Stack = solo: failed: RuntimeError: out of memory." in md
    assert "CUDA warm-up run 4.0 s" in md and "`/c` (TORCHINDUCTOR_CACHE_DIR" in md


def test_the_verdicts_are_the_most_tokens_per_second_that_keep_run_ids():
    r = _result(cuda=True, moved=("model.example",))
    v, u = r["verdict"], r["unstacked"]
    # the compiled rows (up to x5.00) are faster, but made to move run ids here
    assert v["choice"] == "stack" and v["row"] == "stack of 8"
    assert v["args"] == "--set train.stack=auto"
    assert [m["row"] for m in v["measured_only"]] == [
        "stack of 8, compiled",
        "stack of 8, reduce-overhead",
        "stack of 16, compiled",
    ]
    # unstacked: solo, pack and solo reduce-overhead (made to move run ids, and slower)
    assert u["choice"] == "pack" and u["args"] == "--workers 4 --runs-per-gpu 4"
    assert u["measured_only"] == []
    md = probe_report.render(r)
    assert "All rows: **stack** (stack of 8: 320,000 tokens/s, x3.20 solo)" in md
    assert "Faster but measured only: stack of 8, compiled (x4.00 solo)" in md
    assert "Unstacked: **pack** (pack of 4: 250,000 tokens/s, x2.50 solo)" in md
    assert "- stack of 8 vs solo: x3.20 (goal ≥ 3)" in md
    assert "- stack of 8, compiled vs solo: x4.00 (goal ≥ 4)" in md and "float16" in md
    assert "- the fastest solo step: 136.5 ms (goal ≤ 15 ms)" in md  # reduce-overhead's
    # as they are (compile is in no run id), the compiled rows are verdicts, with their arguments
    free = [dict(row, changes_run_id=[]) for row in r["rows"]]
    assert probe.verdict(free)["args"] == "--set train.stack=auto --set train.compile=true"
    graphed = [row for row in free if probe_report.row_name(row) != "stack of 16, compiled"]
    assert probe.verdict(graphed)["args"] == (
        "--set train.stack=auto --set train.compile=true --set train.compile_mode=reduce-overhead"
    )
    assert probe.verdict(free, stacked=False)["choice"] == "pack"
    close = [dict(row, tokens_per_s=1.05e5) if row["members"] else row for row in r["rows"]]
    close = [dict(row, tokens_per_s=1.09e5) if row.get("processes") else row for row in close]
    close = [dict(row, tokens_per_s=1.0e5) if row.get("compile_mode") else row for row in close]
    assert probe.verdict(close)["choice"] == "solo" and probe.verdict(close)["args"] == ""
    assert probe.verdict(close[1:]) is None  # no solo figure: nothing to compare with
    cpu = probe_report.render(_result(cuda=False))
    assert "only rehearse the window's use of them" in cpu
    assert _table(cpu, "run")["stack of 8"]["MFU"] == probe_report.NOT_MEASURED


def test_no_way_of_training_moves_a_run_id(tmp_path):
    """Checked on the probe's own config: a verdict may set train.stack, train.compile and
    compile_mode, and a registered confirmation keeps the run ids it names."""
    flat = probe.probe_flat(probe.synthetic_text(tmp_path), "bf16-mixed", False, True)
    by_name = {probe_report.row_name(s.label()): s.label() for s in probe.ROWS}
    assert list(by_name) == [
        "solo",
        "stack of 8",
        "stack of 8, compiled",
        "stack of 8, reduce-overhead",
        "solo, reduce-overhead",
        "pack of 4",
        "stack of 16, compiled",
    ]
    for label in by_name.values():
        assert probe.id_changing(flat, label) == [], label
    assert probe.row_choice(by_name["stack of 8, reduce-overhead"]) == "stack-graphed"
    assert probe.row_choice(by_name["solo, reduce-overhead"]) == "solo-graphed"
