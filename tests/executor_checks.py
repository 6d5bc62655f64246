"""Checks shared by the executor tests (Ray, SLURM): a run interrupted here, resumed there."""

import pytest

from ablate.execution.runner import run_study


def interrupt_first_run_at_step_12(path, store, monkeypatch):
    """Train the study here until its first run is interrupted at step 12 (like a Ctrl-C)."""
    import ablate.training.lit

    original = ablate.training.lit.LitLM.on_train_batch_end

    def interrupt_at_12(self, outputs, batch, batch_idx):
        original(self, outputs, batch, batch_idx)
        if self.global_step == 12:
            raise KeyboardInterrupt

    monkeypatch.setattr(ablate.training.lit.LitLM, "on_train_batch_end", interrupt_at_12)
    with pytest.raises(KeyboardInterrupt):
        run_study(path, store=store, progress=False)
    monkeypatch.setattr(ablate.training.lit.LitLM, "on_train_batch_end", original)


def assert_same_as_local(results, local):
    """Identical seeds give identical runs wherever they train; the resumed one too."""
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert results[0]["resumed_from_step"] == 12 and len(results[0]["attempts"]) == 2
    assert "resumed_from_step" not in results[1] and len(results[1]["attempts"]) == 1
    for r, ref in zip(results, local, strict=True):
        assert r["name"] == ref["name"] and r["steps"] == ref["steps"] == 20
        assert r["final_val_loss"] == pytest.approx(ref["final_val_loss"], abs=1e-6)
    assert results[1]["final_val_loss"] == local[1]["final_val_loss"]  # bit for bit
