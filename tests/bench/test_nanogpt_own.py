"""nanoGPT's own runs as the reference claims read them: the GPU artifact is what
``python -m ablate.bench.nanogpt_own --from-log`` computes from the committed pilot log."""

import json
import sys
from pathlib import Path

from ablate.bench import nanogpt_own

REPO = Path(__file__).resolve().parents[2]
PILOT_LOG = Path("reports/gpu/pilot/nanogpt_train_shakespeare_char.log")


def test_a_log_gives_nanogpts_best_validation_loss_and_its_iteration():
    text = "12.5 step 0: train loss 4.2, val loss 4.3\nnoise\n13.0 step 250: train loss 1.9, "
    text += "val loss 2.1\n14 step 500: train loss 1.5, val loss 2.2\n"
    got = nanogpt_own.parse_log(text)
    assert (got["best_val_loss"], got["best_iter"], got["final_val_loss"]) == (2.1, 250, 2.2)
    assert got["printed"] == {
        "iter": [0, 250, 500],
        "train": [4.2, 1.9, 1.5],
        "val": [4.3, 2.1, 2.2],
    }
    assert "first_step_s" not in got  # no stamps, no clock


def test_the_committed_gpu_artifact_is_the_pilot_logs(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the record names the log by its path in the checkout
    out = tmp_path / "nanogpt_own.json"
    commit = "3adf61e154c3fe3fca428ad6bc3818b27a3b8291"
    made = nanogpt_own.from_log(PILOT_LOG, out, 1337, "NVIDIA H200", commit)
    committed = json.loads((REPO / "reports/gpu/nanogpt_own.json").read_text())
    assert made == committed
    assert committed["best_val_loss"] == [1.4645] and committed["best_iter"] == [1750]
    # recording the same log again replaces its run, it does not add a second one
    assert nanogpt_own.from_log(PILOT_LOG, out, 1337, "NVIDIA H200", commit) == made


def test_run_stamped_clocks_each_printed_evaluation(tmp_path):
    """A stand-in for nanoGPT's train.py that prints two evaluations 0.3 s apart: the stamps
    are the seconds since launch, and parse_log turns them into the curve's clock."""
    script = tmp_path / "fake.py"
    script.write_text(
        "import time\nprint('step 0: train loss 4.2, val loss 4.3')\ntime.sleep(0.3)\n"
        "print('iter 10: loss 3.0')\nprint('step 250: train loss 1.9, val loss 2.1')\n"
    )
    code, out, err = nanogpt_own.run_stamped([sys.executable, str(script)], tmp_path)
    assert code == 0 and err == ""
    got = nanogpt_own.parse_log(out)
    first, second = got["printed"]["seconds"]
    assert 0 <= first < second and second - first >= 0.3
    assert (got["best_val_loss"], got["best_iter"]) == (2.1, 250)
    # its first training step's line, printed after the sleep: where its training loop is clocked
    assert first + 0.3 <= got["first_step_s"] <= second
