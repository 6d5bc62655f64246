"""What a training step costs a GPU's host, counted on the CPU: a stacked step of 4 or 8
members dispatches at most 1.2x the kernel-launching aten operations and makes at most 1.2x the
Python function calls of a solo step of the same model (one model of k members: one SDPA call
per layer, one batched matmul per linear layer for the whole stack), neither path reads a value
back to the host on a step that does not log, and a whole `ablate run` reads the host about
once per log step."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import yaml

from ablate.bench.stepcost import StepCost, step_cost
from ablate.config import build_config
from ablate.store import RunStore
from ablate.training.opcount import OpCounter, PythonCalls
from ablate.training.train import train_run

TINY = {
    "model.d_model": 32,
    "model.n_layers": 2,
    "model.n_heads": 2,
    "model.max_seq_len": 16,
    "data.seq_len": 16,
    "data.batch_size": 4,
    "train.eval_batches": 1,
    "train.final_eval_batches": 1,
    "train.threads": 1,
}


def test_the_counter_leaves_out_views_and_counts_host_reads():
    x = torch.ones(4, 3)
    with OpCounter() as c:
        y = x.reshape(12).view(3, 4).t().detach().unsqueeze(0)  # metadata only
        z = (y + 1).sum()
        assert z.item() == 24.0
        _ = z.tolist()
    assert dict(c.ops) == {"add": 1, "sum": 1, "_local_scalar_dense": 1}
    assert c.host_reads == 2 and c.kernels == 3


def _sdpa_calls(ops: dict[str, float]) -> float:
    return sum(v for k, v in ops.items() if "scaled_dot_product" in k and "backward" not in k)


def test_the_python_call_counter_counts_python_calls_only():
    def f(n):
        return [g(i) for i in range(n)]  # a comprehension is a call of its own before 3.12

    def g(i):
        return abs(i)  # a C function: not a Python call

    with PythonCalls() as empty:
        pass
    with PythonCalls() as c:
        f(5)
    # f and five g (and the comprehension's own frame before Python 3.12)
    assert c.calls - empty.calls in (6, 7)


@pytest.fixture(scope="module")
def quiet_costs() -> dict[int, StepCost]:
    """``step_cost`` of TINY solo (0) and in stacks of 4 and 8, on this machine as it is."""
    return {k: step_cost(TINY, k) for k in (0, 4, 8)}


def _assert_within_1_2_solo(costs: dict[int, StepCost]) -> None:
    solo = costs[0]
    assert solo.host_reads == 0, solo.ops
    assert _sdpa_calls(solo.ops) == 2  # one per layer
    for k, stack in costs.items():
        assert stack.host_reads == 0, (k, stack.ops)
        assert _sdpa_calls(stack.ops) == 2, k  # one per layer for every member
        assert stack.kernels <= 1.2 * solo.kernels, (k, stack.kernels, solo.kernels, stack.ops)
        assert stack.python_calls <= 1.2 * solo.python_calls, (
            k, stack.python_calls, solo.python_calls
        )  # fmt: skip


def test_stacks_of_4_and_8_cost_the_host_at_most_1_2_solo_steps_and_never_read_it(quiet_costs):
    """Operations and Python calls per step, whole runs through Lightning (``train_run``,
    ``train_group``): the member dimension keeps a step's host work independent of k."""
    _assert_within_1_2_solo(quiet_costs)


class _Finalized:
    """Cyclic garbage with a Python finalizer, as a long test session leaves behind."""

    def __init__(self):
        self.me = self

    def __del__(self):
        _ = [abs(i) for i in range(3)]  # Python calls, on the thread whose collection runs it


@pytest.fixture
def busy_machine():
    """A CPU-burning process per core beside the test (at nice 19, as a study trained beside
    the suite), and a thread of this process making cyclic garbage with finalizers until the
    test ends: a collection on the training thread would run them there."""
    burn = [sys.executable, "-c", "import os\nos.nice(19)\nwhile True: pass"]
    procs = [subprocess.Popen(burn) for _ in range(os.cpu_count() or 1)]
    stop = threading.Event()

    def litter():
        while not stop.wait(0.002):
            _ = [_Finalized() for _ in range(50)]

    thread = threading.Thread(target=litter, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join()
    for p in procs:
        p.kill()
        p.wait()


def test_a_stacks_counts_are_the_same_on_a_busy_machine(quiet_costs, busy_machine, tmp_path):
    """The counts measure the code, not the machine: with every core busy and garbage whose
    finalizers a collection would run in a counted run, a stacked step of 8 costs what it cost
    quietly (the operations exactly; the Python calls within 1%: which of the training and the
    checkpoint writer's threads finishes first at a run's end moves a few calls), still within
    1.2 solo steps, and a solo run still reads the host once per log step."""
    busy = step_cost(TINY, 8)
    assert busy.ops == quiet_costs[8].ops and busy.host_reads == 0
    assert busy.python_calls == pytest.approx(quiet_costs[8].python_calls, rel=0.01)
    _assert_within_1_2_solo({0: quiet_costs[0], 8: busy})
    assert _solo_reads(tmp_path, 60) - _solo_reads(tmp_path, 20) == 4


def _solo_reads(tmp_path: Path, steps: int) -> int:
    """Host reads of a whole solo run in this process, with Lightning's progress bar and
    gradient norms at every log step."""
    every = {"train.log_interval": 10, "train.grad_norm_interval": 10, "train.progress": True}
    later = {"train.eval_interval": 1000, "train.checkpoint_interval": 1000}
    cfg = build_config({**TINY, **every, **later, "train.max_steps": steps})
    with OpCounter() as counter:
        summary = train_run(cfg, RunStore(tmp_path).run(f"s{steps}", cfg.run_id()))
    assert summary["status"] == "completed"
    return counter.host_reads


def test_a_solo_run_reads_the_host_once_per_log_step_with_its_bar_and_grad_norms(tmp_path):
    # 4 more log steps, each with its loss, divergence check, gradient norms, progress.json
    # and progress bar: 4 more reads
    assert _solo_reads(tmp_path, 60) - _solo_reads(tmp_path, 20) == 4


# loaded into every process a command starts (PYTHONPATH): counts it whole, to a file per pid
SITECUSTOMIZE = """
import os
if os.environ.get("ABLATE_OPCOUNT_DIR"):
    from ablate.training.opcount import count_process
    count_process(os.environ["ABLATE_OPCOUNT_DIR"])
"""


def test_a_whole_ablate_run_reads_the_host_at_most_once_per_log_step(tmp_path):
    """The whole `ablate run` process of a one-run study, its set-up, Lightning's loop, logging,
    callbacks, evaluations, checkpoints and final evaluation included, at the default log (10),
    gradient norm (50) and checkpoint (100) intervals and the gpu profiles' evaluation interval
    (250): at most 0.15 reads per step, where one read per log step is 0.1 and the rest is
    what a run reads once (Lightning's data set-up, its move of the model to the CPU when fit
    ends: one per tensor) or per evaluation (its loss, the validation loader's seed)."""
    site, counts = tmp_path / "site", tmp_path / "counts"
    site.mkdir()
    counts.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    model = {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16}
    train = {"max_steps": 1000, "eval_interval": 250, "eval_batches": 2, "final_eval_batches": 2}
    base = {
        "model": model,
        "data": {"seq_len": 16, "batch_size": 4},
        "train": {**train, "threads": 1},
    }
    study = tmp_path / "tiny.yaml"
    body = {"name": "tiny", "description": "host reads", "base": base, "grid": {}}
    study.write_text(yaml.safe_dump({**body, "seeds": [0]}))
    path = os.pathsep.join(
        [str(site), str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
    )
    env = {**os.environ, "PYTHONPATH": path, "ABLATE_OPCOUNT_DIR": str(counts)}
    env["ABLATE_DEFAULT_WORKERS"] = "1"  # the driver trains the run itself
    cmd = [sys.executable, "-m", "ablate", "run", str(study), "--store", str(tmp_path / "runs")]
    subprocess.run(cmd, env=env, check=True, timeout=300, capture_output=True)
    (summary,) = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("summary.json")]
    assert summary["status"] == "completed" and summary["steps"] == 1000
    records = [json.loads(p.read_text()) for p in counts.glob("*.json")]
    reads = sum(r["host_reads"] for r in records)
    by_name = [r["reads"] for r in records]
    assert reads >= 100, by_name  # every log step reads, so the counter ran
    assert reads / 1000 <= 0.15, (reads, by_name)
