"""The interaction claim's figure (its four cells with seed lines, beside its effect) and the
metric-against-a-numeric-axis figure with each arm's best value and its bootstrap interval."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from ablate.claims.outcomes import analyse
from ablate.report.answer import effect_of
from ablate.report.axis_figures import axis_figures, best_value, numeric_axes
from ablate.report.claim_figure import claim_figure
from ablate.results import read_study

LR, NP = "optim.lr", "model.norm_placement"
LRS = [1e-3, 3e-3, 1e-2, 3e-2]
# final loss by (placement, lr): Pre-LN is best at 1e-2, Post-LN at 3e-3
CURVE = {"pre": [2.4, 2.2, 2.0, 2.3], "post": [2.3, 2.1, 2.25, 2.8]}


def _study(tmp_path, write_run, claims=()):
    store = tmp_path / "runs"
    for placement, finals in CURVE.items():
        for lr, final in zip(LRS, finals, strict=True):
            for seed in range(3):
                write_run(
                    store, "lr", {NP: placement, LR: lr}, seed, "completed", final + 0.01 * seed
                )
    spec = tmp_path / "lr.yaml"
    grid = {NP: ["post", "pre"], LR: LRS}
    spec.write_text(
        yaml.safe_dump({"name": "lr", "grid": grid, "seeds": [0, 1, 2], "claims": list(claims)})
    )
    return read_study(store, "lr", spec)


def test_best_value_and_its_bootstrap_interval():
    same = pd.DataFrame([[2.0, 1.0, 3.0], [2.1, 1.1, 3.1], [1.9, 0.9, 2.9]], columns=[1, 2, 3])
    assert best_value(same, np.random.default_rng(0)) == (2.0, 2.0, 2.0)  # every seed agrees
    split = pd.DataFrame([[1.0, 2.0, 3.0], [2.0, 1.0, 3.0], [2.2, 1.0, 3.0]], columns=[1, 2, 3])
    best, lo, hi = best_value(split, np.random.default_rng(0))
    assert best == 2 and (lo, hi) == (1.0, 2.0)  # a resample of seed 0 alone picks 1


def test_a_numeric_axis_of_three_values_gets_its_sensitivity_figure(tmp_path, write_run):
    study = _study(tmp_path, write_run)
    assert numeric_axes(study) == [LR]
    (sens,) = axis_figures(study, tmp_path)
    assert sens.path.name == "sensitivity_lr.png" and sens.path.stat().st_size > 5000
    assert "norm_placement=post: best lr = 0.003 (95% bootstrap interval 0.003-0.003)" in (
        sens.caption
    )
    assert "norm_placement=pre: best lr = 0.01" in sens.caption


def test_an_interaction_figure_draws_its_four_cells_beside_the_effect(tmp_path, write_run):
    interaction = {
        "id": "pre-widens-lr",
        "text": "Pre-LN's gain over Post-LN grows from lr 3e-3 to 1e-2",
        "expect": "smaller",
        "a": {NP: "pre"},
        "b": {NP: "post"},
        "by": {LR: [1e-2, 3e-3]},
    }
    study = _study(tmp_path, write_run, [interaction])
    (check,) = analyse(study)[1]
    # effect at 1e-2: 2.0 - 2.25, at 3e-3: 2.2 - 2.1: difference of differences -0.35, so the
    # Answer's orientation puts 3e-3 first: +0.35
    assert check.comparison.diff == pytest.approx(-0.35)
    e = effect_of(check)
    assert (e.x, e.y, e.sign) == ("lr=0.003", "0.01", -1.0) and e.diff == pytest.approx(0.35)
    fig = claim_figure(study, check, tmp_path)
    assert fig.path.name == "claim_pre-widens-lr.png" and fig.path.stat().st_size > 5000
    assert "Left: the four cells (effect of norm_placement=pre vs post at lr=0.01" in fig.caption
    assert "Right: the tested effect, effect at lr=0.003 − at 0.01" in fig.caption
