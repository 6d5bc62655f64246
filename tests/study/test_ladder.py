"""A scale ladder in the study YAML: rungs crossed with the grid and seeds, the step rule
checked against a hand count of the parameters, a profile's own rungs, ``ablate plan``'s rung
table, and one-line errors naming the file and key."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import ConfigError
from ablate.execution.flops import run_flops
from ablate.study import load_study

D, BATCH, SEQ = 16, 4, 16
LAYERS = {"s": 1, "m": 2, "l": 4}


def _params(layers: int, d: int = D) -> int:
    """Non-embedding parameters of a Pre-LN GELU transformer by hand: per block two LayerNorms
    (2 x 2d), q/k/v/out with biases (4d^2 + 4d), the FFN d -> 4d -> d with biases (8d^2 + 5d);
    then the final LayerNorm (2d)."""
    return layers * (12 * d * d + 13 * d) + 2 * d


def _ladder(rule=None, **more):
    rungs = [{"name": n, "set": {"model.n_layers": L}} for n, L in LAYERS.items()]
    return {"rungs": rungs, **(rule or {"tokens_per_param": 8}), **more}


@pytest.fixture
def write(tmp_path, tiny_studies):
    """``write(**top)``: a ladder study on the tiny base (without its ``train.max_steps``,
    which the ladder's rule sets) over a word corpus."""
    base = tiny_studies.base()
    del base["train"]["max_steps"], base["train"]["eval_interval"]
    base["train"]["checkpoint_interval"] = 1000
    corpus = tiny_studies.corpus(tmp_path / "corpus.txt")

    def _write(**top):
        top = {"grid": {"model.norm_placement": ["post", "pre"]}, "seeds": [0, 1]} | top
        return tiny_studies.study(tmp_path, base, corpus, "lad", **top)

    return _write


def test_rungs_cross_the_grid_and_seeds_with_steps_from_the_token_rule(write):
    study = load_study(write(ladder=_ladder()))
    assert len(study.runs) == 3 * 2 * 2
    first = study.runs[0]
    assert first.name == "rung=s,norm_placement=post,seed=0"
    assert first.axes == {"rung": "s", "model.norm_placement": "post"}
    for run in study.runs:
        layers = LAYERS[run.axes["rung"]]
        assert run.config.model.n_layers == layers
        # tokens = 8 x the rung's non-embedding parameters, in whole steps of 4 x 16 tokens
        assert run.config.train.max_steps == round(8 * _params(layers) / (BATCH * SEQ))
    # both placements at a rung train the same steps on the same seeds: paired
    steps = {(r.axes["rung"], r.seed): set() for r in study.runs}
    for r in study.runs:
        steps[(r.axes["rung"], r.seed)].add(r.config.train.max_steps)
    assert all(len(s) == 1 for s in steps.values())


def test_the_rule_comes_before_derived_values_and_steps_can_be_fixed(write):
    study = load_study(
        write(
            ladder=_ladder({"steps": 30}),
            derived={"train.eval_interval": "train.max_steps // 3"},
        )
    )
    assert {r.config.train.max_steps for r in study.runs} == {30}
    assert {r.config.train.eval_interval for r in study.runs} == {10}
    study = load_study(
        write(ladder=_ladder(), derived={"train.eval_interval": "train.max_steps // 3"})
    )
    for run in study.runs:
        assert run.config.train.eval_interval == run.config.train.max_steps // 3


def test_a_profile_ladder_replaces_the_studys(write):
    big = {"rungs": [{"name": f"g{L}", "set": {"model.n_layers": L}} for L in (2, 3, 6)]}
    path = write(ladder=_ladder(), profiles={"gpu": {"ladder": big | {"steps": 7}}, "cpu": {}})
    gpu = load_study(path, "gpu", check_device=False)
    assert [r.axes["rung"] for r in gpu.runs[::4]] == ["g2", "g3", "g6"]
    assert {r.config.train.max_steps for r in gpu.runs} == {7}
    assert gpu.ladder.where == "profiles.gpu.ladder"
    assert load_study(path, "cpu").ladder.names == ["s", "m", "l"]


@pytest.mark.parametrize(
    ("top", "key", "message"),
    [
        ({"ladder": _ladder() | {"rungs": _ladder()["rungs"][:1]}}, "ladder.rungs", "at least 2"),
        ({"ladder": _ladder({"tokens_per_param": 8, "steps": 9})}, "ladder", "give one rule"),
        ({"ladder": {"rungs": _ladder()["rungs"]}}, "ladder", "give one rule"),
        ({"ladder": _ladder({"tokens_per_param": -1})}, "ladder.tokens_per_param", "positive"),
        ({"ladder": _ladder({"steps": 2.5})}, "ladder.steps", "whole number"),
        ({"ladder": _ladder(rung=1)}, "ladder.rung", "unknown key"),
        (
            {"ladder": _ladder(), "derived": {"train.max_steps": "10"}},
            "ladder.tokens_per_param",
            "cannot also be set in derived",
        ),
        (
            {"ladder": {**_ladder(), "rungs": [*_ladder()["rungs"][:2], _ladder()["rungs"][0]]}},
            "ladder.rungs[2].name",
            "duplicate rung name 's'",
        ),
        (
            {"ladder": {**_ladder(), "rungs": _ladder()["rungs"][::-1]}},
            "ladder.rungs[1]",
            "smallest first",
        ),
        (
            {"ladder": _ladder(), "grid": {"model.n_layers": [1, 2]}},
            "ladder.rungs[0].set.model.n_layers",
            "is a grid axis",
        ),
        (
            {"ladder": {**_ladder(), "rungs": [{"name": "x", "set": {"model.d_modle": 8}}] * 3}},
            "ladder.rungs[0].set.model.d_modle",
            "unknown key",
        ),
    ],
)
def test_bad_ladders_are_one_line_errors_naming_the_key(write, top, key, message):
    path = write(**top)
    with pytest.raises(ConfigError) as err:
        load_study(path)
    assert err.value.key == key and message in str(err.value), str(err.value)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_steps_set_elsewhere_clash_with_the_rule(write, tiny_studies, tmp_path):
    path = write(ladder=_ladder(), profiles={"cpu": {"train.max_steps": 5}})
    with pytest.raises(ConfigError, match="cannot also be set in profiles.cpu"):
        load_study(path, "cpu")
    # --set wins over the rule, as over a derived value
    study = load_study(write(ladder=_ladder()), overrides=["train.max_steps=3"])
    assert {r.config.train.max_steps for r in study.runs} == {3}


def test_plan_prints_every_rung_with_parameters_tokens_and_flops(write):
    path = write(ladder=_ladder())
    res = CliRunner().invoke(app, ["plan", str(path), "--no-estimate"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "Ladder: 3 rungs (ladder); training tokens = 8 x non-embedding parameters" in res.output
    study = load_study(path)
    rows = [line for line in res.output.splitlines() if line.startswith("│ ")]
    for name, layers in LAYERS.items():
        # the model's own accounting, as plan --flops; Pre-LN's final norm costs a little more
        costs = [run_flops(r.config) for r in study.runs if r.axes["rung"] == name]
        flops = sorted({f"{c.train_flops:.3g}" for c in costs}, key=float)
        (row,) = [r for r in rows if r.split("│")[1].strip() == name]
        cells = [c.strip() for c in row.split("│")[1:-1]]
        assert cells[1] == f"n_layers={layers}"
        assert cells[3] == f"{costs[0].train_tokens:,}"
        assert cells[4] == "-".join([flops[0], flops[-1]] if len(flops) > 1 else flops)
        assert cells[6] == "4"  # 2 placements x 2 seeds
    # a bad ladder through the CLI: one line, exit 2
    bad = write(ladder=_ladder({"steps": 0}))
    res = CliRunner().invoke(app, ["plan", str(bad), "--no-estimate"])
    assert res.exit_code == 2 and "ladder.steps" in res.output
    assert len(res.output.strip().splitlines()) == 1


TREND = {
    "id": "post-gap-grows",
    "text": "Post-LN's penalty grows with size",
    "expect": "grows",
    "a": {"model.norm_placement": "post"},
    "b": {"model.norm_placement": "pre"},
}


@pytest.mark.parametrize(("expect", "alt"), [("grows", "larger"), ("flat", "equal")])
def test_a_question_at_two_sizes_is_refused_as_a_trend_and_told_the_claim_that_asks_it(
    write, tmp_path, expect, alt
):
    """Two rungs are a ladder, but no trend: `ablate run` exits 2 with one line naming the file
    and the claim's key, writes nothing, and names the interaction that answers it at two
    sizes; that claim, as the error words it, plans."""
    two = _ladder() | {"rungs": _ladder()["rungs"][:2]}
    trend = {**TREND, "expect": expect} | ({"margin": 0.05} if expect == "flat" else {})
    path = write(ladder=two, claims=[trend])
    store = tmp_path / "runs"
    res = CliRunner().invoke(app, ["run", str(path), "--store", str(store)])
    assert res.exit_code == 2, res.output
    (line,) = res.output.strip().splitlines()
    assert str(path) in line and "claims[0].expect" in line
    assert "needs a ladder of at least 3 rungs (this ladder has 2)" in line
    assert f"expect: {alt} with by: {{rung: [m, s]}}" in line
    assert not store.exists()  # nothing written
    asked = {k: v for k, v in trend.items() if k != "expect"}
    asked |= {"expect": alt, "by": {"rung": ["m", "s"]}}
    study = load_study(write(ladder=two, claims=[asked]))
    assert study.ladder.names == ["s", "m"] and len(study.runs) == 2 * 2 * 2
