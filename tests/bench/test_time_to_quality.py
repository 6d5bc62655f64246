"""Time to quality against nanoGPT: the target, each side's seconds and the ratio, checked on a
store and a nanoGPT file written by hand."""

import json

import pytest

from ablate.bench import time_to_quality as ttq
from ablate.store.rundir import RunStore


def _nanogpt(path, seconds=(20.0, 50.0, 80.0)):
    run = {
        "seed": 1338,
        "device": "NVIDIA H200",
        "best_val_loss": 1.47,
        "best_iter": 500,
        "printed": {"iter": [0, 250, 500], "val": [4.2, 1.6, 1.47], "seconds": list(seconds)},
    }
    unclocked = {"seed": 1337, "best_val_loss": 1.46, "best_iter": 1750, "printed": {}}
    path.write_text(json.dumps({"runs": [unclocked, run]}))
    return path


def _run(store, run_id, seed, curve):
    run = store.run(ttq.STUDY, run_id)
    run.write_run({}, {"run_id": run_id, "study": ttq.STUDY})
    run.write_summary({"status": "completed", "seed": seed, "environment": {"workers": 4}})
    for step, (loss, wall) in curve.items():
        run.append_metrics(step, {"val/loss": loss, "perf/wall_s": wall})


def test_ratio_is_the_median_ablate_time_over_nanogpts(tmp_path):
    store = RunStore(tmp_path / "runs")
    # the target is 1.47: run a reaches it at step 500 (60 s), b at 750 (75 s), c at 500 (66 s)
    _run(store, "a", 14, {250: (1.60, 30.0), 500: (1.47, 60.0), 750: (1.45, 90.0)})
    _run(store, "b", 15, {250: (1.61, 25.0), 500: (1.48, 50.0), 750: (1.46, 75.0)})
    _run(store, "c", 16, {250: (1.58, 33.0), 500: (1.40, 66.0)})
    r = ttq.measure(tmp_path / "runs", _nanogpt(tmp_path / "n.json"))
    assert r["target"] == 1.47 and r["nanogpt"]["seconds"] == 80.0  # the clocked run's best
    assert sorted(x["seconds"] for x in r["runs"]) == [60.0, 66.0, 75.0]
    assert r["ablate_median_s"] == 66.0 and r["ratio"] == pytest.approx(66.0 / 80.0)
    ttq.write(r, tmp_path / "ttq.md")
    text = (tmp_path / "ttq.md").read_text()
    assert "**0.82**" in text and "meets" in text
    # the command line names the store by what it was unpacked from
    out = tmp_path / "named.md"
    args = ["--store", str(tmp_path / "runs"), "--nanogpt", str(tmp_path / "n.json")]
    ttq.main([*args, "--out", str(out), "--source", "stores.tgz"])
    assert "from `stores.tgz`" in out.read_text()
    assert str(tmp_path / "runs") not in out.read_text()


def test_a_run_that_never_reaches_the_target_counts_as_never(tmp_path):
    store = RunStore(tmp_path / "runs")
    _run(store, "a", 14, {250: (1.60, 30.0), 500: (1.50, 60.0)})  # never at or below 1.47
    _run(store, "b", 15, {250: (1.60, 30.0), 500: (1.46, 60.0)})
    _run(store, "c", 16, {250: (1.45, 40.0)})
    r = ttq.measure(tmp_path / "runs", _nanogpt(tmp_path / "n.json"))
    assert [x["step"] for x in r["runs"]] == [None, 500, 250]
    # the median of (never, 60, 40) is 60: two of three runs reached the target
    assert r["ablate_median_s"] == 60.0 and r["ratio"] == pytest.approx(60.0 / 80.0)
    assert "Runs that never reached it: 1" in ttq.render(r)
    _run(store, "d", 17, {250: (1.60, 30.0)})  # two of four never: no median
    r = ttq.measure(tmp_path / "runs", _nanogpt(tmp_path / "n.json"))
    assert r["ratio"] is None and "no median" in ttq.render(r)


def test_a_nanogpt_file_without_a_clock_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "n.json"
    path.write_text(json.dumps({"runs": [{"seed": 1, "printed": {"iter": [0]}}]}))
    (tmp_path / "runs").mkdir()
    with pytest.raises(SystemExit) as exit_:
        ttq.main(["--store", str(tmp_path / "runs"), "--nanogpt", str(path)])
    assert exit_.value.code == 2
    assert "no nanoGPT run with a clock" in capsys.readouterr().err
    assert not (tmp_path / "ttq.md").exists()
