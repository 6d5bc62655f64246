"""The unigram loss of a corpus (what a model that uses no context scores on its validation
split) by scipy's entropies, and the run state "learned nothing" where a run ended at it: in
the results layer, in ``ablate status`` and in the verdicts that compare such runs."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from ablate.config import DataConfig
from ablate.data.baseline import (
    EPSILON,
    LEARNED_NOTHING,
    learned_nothing,
    unigram_cross_entropy,
    unigram_loss,
)
from ablate.data.token_cache import token_splits

TEXT = "".join(f"the {w} shall not love my lord, line {i % 7}.\n" for i, w in enumerate(
    ["king", "queen", "thee", "good"] * 150
))  # fmt: skip


def test_the_unigram_cross_entropy_is_scipys_entropy_plus_kl_of_the_smoothed_counts():
    train = np.array([5, 0, 3, 2])  # token 1 never in train: add-one keeps it finite
    val = np.array([2, 1, 0, 1])
    q = (train + 1) / (train.sum() + 4)  # by hand: 6/14, 1/14, 4/14, 3/14
    assert q == pytest.approx([6 / 14, 1 / 14, 4 / 14, 3 / 14])
    p = val / val.sum()
    # H(p, q) = H(p) + KL(p || q)
    want = stats.entropy(p) + stats.entropy(p, q)
    assert unigram_cross_entropy(train, val) == pytest.approx(want)
    by_hand = -(0.5 * math.log(6 / 14) + 0.25 * math.log(1 / 14) + 0.25 * math.log(3 / 14))
    assert unigram_cross_entropy(train, val) == pytest.approx(by_hand)


def test_the_unigram_loss_of_a_local_corpus_counts_its_training_split(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "c.txt"
    corpus.write_text(TEXT)
    cfg = DataConfig(dataset=str(corpus), tokenizer="char")
    assert unigram_loss(cfg, build=False) is None  # not tokenized yet: status builds nothing
    got = unigram_loss(cfg)
    splits = token_splits(cfg)
    itos = splits.tokenizer.decode
    train = Counter(itos([int(t)]) for t in splits.tokens["train"])  # counted as characters
    val = Counter(itos([int(t)]) for t in splits.tokens["val"])
    chars = sorted(set(TEXT))
    q = np.array([train[c] + 1 for c in chars], float) / (sum(train.values()) + len(chars))
    p = np.array([val[c] for c in chars], float) / sum(val.values())
    assert len(chars) == splits.tokenizer.vocab_size
    assert got == pytest.approx(stats.entropy(p) + stats.entropy(p, q))
    assert unigram_loss(cfg.model_dump()) == got  # a run's recorded data config reads alike
    assert unigram_loss({"dataset": 3, "seq_len": "x"}) is None  # unreadable: no state


@pytest.mark.parametrize(
    ("loss", "state"),
    [
        (3.347, True),
        (3.347 - EPSILON + 1e-9, True),
        (3.347 + EPSILON - 1e-9, True),
        (3.347 - EPSILON - 1e-6, False),  # learned something from context
        (3.5, False),  # above it: not even the unigram loss, and its loss says so
        (math.nan, False),
        (None, False),
    ],
)
def test_learned_nothing_is_a_final_loss_within_epsilon_of_the_unigram_loss(loss, state):
    assert learned_nothing(loss, 3.347) is state
    assert learned_nothing(3.347, None) is False  # the dataset is not here


def _store_at_unigram(tmp_path, write_run, monkeypatch):
    """Two arms on tiny shakespeare (the synthetic runs' data): post's three seeds end at the
    unigram loss, pre's below it."""
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    h = unigram_loss(DataConfig(dataset="tinyshakespeare", tokenizer="char"))
    if h is None:
        pytest.skip("tiny shakespeare is not on this machine")
    store = tmp_path / "runs"
    for seed in (0, 1, 2):
        write_run(store, "s", {"model.norm_placement": "post"}, seed, "completed", h + 0.001)
        write_run(store, "s", {"model.norm_placement": "pre"}, seed, "completed", 2.0 + seed / 10)
    return store, h


def test_results_status_and_verdicts_name_the_runs_that_learned_nothing(
    tmp_path, write_run, monkeypatch
):
    from typer.testing import CliRunner

    from ablate.claims.comparisons import compare_groups
    from ablate.claims.verdicts import verdict
    from ablate.cli import app
    from ablate.results import read_study

    store, h = _store_at_unigram(tmp_path, write_run, monkeypatch)
    runs = read_study(store, "s").runs
    post = runs["model.norm_placement"] == "post"
    assert runs["unigram_loss"].tolist() == pytest.approx([h] * 6)
    assert runs.loc[post, "learned_nothing"].tolist() == [1, 1, 1]
    assert runs.loc[~post, "learned_nothing"].tolist() == [0, 0, 0]
    assert (runs["status"] == "completed").all()  # the store's state: it did complete
    # ablate status: the state beside completed and diverged, counted
    res = CliRunner().invoke(app, ["status", "--store", str(store)], env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    assert res.output.count(LEARNED_NOTHING) == 3 + 1 and "3 learned nothing" in res.output
    assert "3 completed" in res.output
    # a verdict on them counts their losses (a measurement) and names the state
    c = compare_groups(runs[~post], runs[post], "final_val_loss", label_a="pre", label_b="post")
    assert (c.nothing_a, c.nothing_b, c.n_b) == (0, 3, 3)
    v = verdict(c)
    assert v.kind == "better" and "post learned nothing in 3/3 seeds" in v.text
    assert f"within {EPSILON:g} nats of the unigram cross-entropy" in v.text
