"""A member's device memory, measured (``ablate.training.footprint``): one training step of a
model of one member and of two, the difference of their peaks; on the CPU with the peaks
injected, the step itself real."""

import torch

from ablate.config import build_config
from ablate.training.footprint import member_footprint, step_peak


class ScriptedMemory:
    """Peaks as a device would report them, and what was asked when."""

    def __init__(self, peaks):
        self.peaks, self.calls = list(peaks), []

    def reset(self):
        self.calls.append("reset")

    def peak(self):
        self.calls.append("peak")
        return self.peaks.pop(0)


def test_the_footprint_is_the_second_members_share_of_a_steps_peak():
    cfg = build_config({"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2,
                        "data.seq_len": 8, "data.batch_size": 2})  # fmt: skip
    memory = ScriptedMemory([5_000, 8_000])
    rng = torch.get_rng_state()
    assert member_footprint(cfg, 32, torch.device("cpu"), memory) == 3_000
    # a reset before each step, its peak after it, the memory given back at the end
    assert memory.calls == ["reset", "peak", "reset", "peak", "reset"]
    assert torch.equal(torch.get_rng_state(), rng)  # a run trained next starts as it would


def test_a_measured_step_trains_the_members_it_is_given(monkeypatch):
    """The step measured is the training step (forward, backward, AdamW's update) of a model
    of ``members`` members, at the run's batch shape."""
    import ablate.training.footprint as footprint

    seen = {}
    real = footprint.train_step

    def spy(model, opt, x, y, **kw):
        seen.update(members=model.members, x=tuple(x.shape), y=tuple(y.shape))
        before = [p.detach().clone() for p in model.parameters()]
        losses = real(model, opt, x, y, **kw)
        seen["updated"] = any(
            not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True)
        )
        return losses

    monkeypatch.setattr(footprint, "train_step", spy)
    cfg = build_config({"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2,
                        "data.seq_len": 8, "data.batch_size": 3})  # fmt: skip
    assert step_peak(cfg, 32, 2, torch.device("cpu"), ScriptedMemory([7])) == 7
    assert seen == {"members": 2, "x": (2, 3, 8), "y": (2, 3, 8), "updated": True}
