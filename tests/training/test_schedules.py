import math

import pytest

from ablate.training.schedules import lr_at


def lr(step, decay, warmup=0.1, min_lr=0.0, cycles=0.5, total=100, base=1.0):
    return lr_at(
        step,
        total_steps=total,
        base_lr=base,
        warmup_ratio=warmup,
        min_lr=min_lr,
        decay=decay,
        cycles=cycles,
    )


@pytest.mark.parametrize("decay", ["cosine", "linear", "constant"])
def test_warmup_is_linear_from_zero(decay):
    # W = 10: lr = base * t / W
    assert lr(0, decay) == 0.0
    assert lr(5, decay) == pytest.approx(0.5)
    assert lr(9, decay) == pytest.approx(0.9)
    assert lr(10, decay) == pytest.approx(1.0)


def test_hand_computed_values():
    # after warmup W=10 of T=100: progress p = (t - 10) / 90
    assert lr(55, "cosine") == pytest.approx(0.5)  # p=.5: 0.5 * (1 + cos(pi/2))
    assert lr(55, "linear") == pytest.approx(0.5)  # 1 - .5
    assert lr(55, "constant") == 1.0
    assert lr(100, "cosine") == pytest.approx(0.0, abs=1e-12)
    assert lr(100, "linear") == pytest.approx(0.0)
    # no warmup: T=100, p = t/100
    assert lr(0, "cosine", warmup=0) == 1.0
    assert lr(25, "cosine", warmup=0) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert lr(25, "linear", warmup=0, base=2e-3) == pytest.approx(1.5e-3)


def test_min_lr_floor_and_cycles():
    assert lr(100, "cosine", min_lr=0.1) == pytest.approx(0.1)
    assert lr(90, "linear", min_lr=0.2) == pytest.approx(0.2)  # 1 - 80/90 = .11 < .2
    assert lr(40, "linear", min_lr=0.2) == pytest.approx(1 - 30 / 90)  # above the floor
    # one full cosine cycle: back at the peak at the end, at the floor in the middle
    assert lr(55, "cosine", cycles=1.0, min_lr=0.05) == pytest.approx(0.05)
    assert lr(100, "cosine", cycles=1.0) == pytest.approx(1.0)
    assert lr(250, "cosine", min_lr=0.1) == pytest.approx(0.1)  # past T: held at T


def test_cosine_min_runs_between_base_and_min_lr():
    # nanoGPT's form: min_lr + (base - min_lr) * 0.5 * (1 + cos(pi * p)), W=10 of T=100
    assert lr(10, "cosine_min", min_lr=0.1) == pytest.approx(1.0)
    assert lr(55, "cosine_min", min_lr=0.1) == pytest.approx(0.1 + 0.9 * 0.5)  # p = .5
    assert lr(100, "cosine_min", min_lr=0.1) == pytest.approx(0.1)
    assert lr(82, "cosine_min", min_lr=0.1) > lr(82, "cosine", min_lr=0.1)  # never floored early
    assert lr(5, "cosine_min", min_lr=0.1) == pytest.approx(0.5)  # same warmup


def test_bad_decay_names_the_choices():
    with pytest.raises(ValueError, match="cosine, linear, constant, cosine_min"):
        lr(1, "exp")
