"""Faults: full disks, corrupt checkpoints, damaged stores, bad input caught at plan time."""

import errno
import json
import logging
import os
import stat
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import ablate.training.checkpoints
from ablate.cli import app
from ablate.config import build_config
from ablate.execution.runner import run_study
from ablate.store import RunStore
from ablate.store.attempt import RunAttempt
from ablate.study import load_study
from ablate.training.checkpoints import atomic_save, select_checkpoint

pytestmark = pytest.mark.usefixtures("no_wandb")
SHORT = {"max_steps": 12, "grad_norm_interval": 0}  # the runner tests' tiny runs, shorter
CORPUS_LINES = 200


@pytest.fixture
def tiny_base(tiny_studies):
    return tiny_studies.base(**SHORT)


@pytest.fixture
def corpus_lines():
    return CORPUS_LINES


def by_name(results):
    return {r["name"]: r for r in results}


# --- 1. a full disk ---------------------------------------------------------------------------


def _enospc_after(monkeypatch, step: int, only: str):
    """Checkpoint writes of run dirs containing ``only`` fail with ENOSPC from ``step`` on,
    after writing half a file (what a full disk does)."""
    real = ablate.training.checkpoints._write_checkpoint

    def write(checkpoint, f):
        if only in f.name and checkpoint["global_step"] >= step:
            f.write(b"\x80\x02half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")
        real(checkpoint, f)

    monkeypatch.setattr(ablate.training.checkpoints, "_write_checkpoint", write)


def test_a_full_disk_fails_the_run_keeps_the_last_good_checkpoint_and_resumes(
    make_study, tmp_path, monkeypatch
):
    path = make_study()
    store = tmp_path / "runs"
    relu = load_study(path).runs[0]  # the first run: the study's second run must still train
    relu_dir = RunStore(store).run("tiny", relu.run_id)
    _enospc_after(monkeypatch, 10, relu_dir.run_id)
    results = by_name(run_study(path, store=store, progress=False))
    bad = results["activation=relu,seed=0"]
    assert bad["status"] == "failed"
    assert "disk full" in bad["error"] and "last.ckpt" in bad["error"]
    assert results["activation=gelu,seed=0"]["status"] == "completed"
    ckpts = sorted(p.name for p in relu_dir.checkpoint_dir.iterdir())
    assert ckpts == ["last.ckpt"]  # no temp file, no truncated interrupted.ckpt
    assert torch.load(relu_dir.checkpoint_dir / "last.ckpt", weights_only=False)["global_step"] == 5

    monkeypatch.undo()  # space freed
    monkeypatch.setenv("WANDB_MODE", "disabled")
    results = by_name(run_study(path, store=store, progress=False))
    again = results["activation=relu,seed=0"]
    assert again["status"] == "completed" and again["resumed_from_step"] == 5
    assert again["steps"] == 12


def test_a_summary_that_cannot_be_written_stops_the_study_with_one_line(
    make_study, tmp_path, monkeypatch
):
    from ablate.store import RunDir

    path = make_study()
    store = tmp_path / "runs"
    real = RunDir.write_summary

    def write_summary(self, summary):
        if summary.get("status") != "running":
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, summary)

    monkeypatch.setattr(RunDir, "write_summary", write_summary)
    result = CliRunner().invoke(app, ["run", str(path), "--store", str(store), "--no-progress"])
    assert result.exit_code == 1
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "disk full" in lines[0] and "summary.json" in lines[0]
    assert "Traceback" not in result.output
    runs = list(RunStore(store).runs("tiny"))
    assert len(runs) == 1  # the study stopped: the second run was never started


def test_atomic_save_leaves_the_old_checkpoint_whole_and_respects_the_umask(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    atomic_save({"global_step": 1, "state_dict": {}}, path)
    old = os.umask(0o027)
    try:
        atomic_save({"global_step": 2, "state_dict": {}}, path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640

    def boom(checkpoint, f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ablate.training.checkpoints, "_write_checkpoint", boom)
    with pytest.raises(OSError, match=r"disk full.*") as info:
        atomic_save({"global_step": 3, "state_dict": {}}, path)
    assert str(path) in str(info.value)
    assert torch.load(path, weights_only=False)["global_step"] == 2
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


# --- 2. corrupt checkpoints -------------------------------------------------------------------


def test_select_checkpoint_skips_corrupt_ones_newest_first(tmp_path, caplog):
    d = tmp_path / "checkpoints"
    d.mkdir()
    torch.save({"global_step": 5, "state_dict": {}}, d / "old.ckpt")
    torch.save({"global_step": 10, "state_dict": {}}, d / "last.ckpt")
    os.utime(d / "old.ckpt", (1, 1))
    data = (d / "last.ckpt").read_bytes()
    (d / "last.ckpt").write_bytes(data[: len(data) // 2])  # truncated by a crash
    (d / ".last.ckpt.4242.tmp").write_bytes(data[:10])  # a save killed before its rename
    with caplog.at_level(logging.WARNING, logger="ablate"):
        path, step, aside = select_checkpoint(d)
    assert path == d / "old.ckpt" and step == 5
    assert [a["file"] for a in aside] == [str(d / "last.ckpt")]
    assert (d / "last.ckpt.corrupt").is_file() and not (d / "last.ckpt").exists()
    assert not (d / ".last.ckpt.4242.tmp").exists()
    assert str(d / "last.ckpt") in caplog.text
    (d / "old.ckpt").write_bytes(b"")
    assert select_checkpoint(d)[0] is None  # nothing loads: a fresh start
    assert (d / "old.ckpt.corrupt").is_file()


def test_a_truncated_checkpoint_falls_back_to_a_fresh_start_recorded_in_the_summary(
    make_study, tmp_path
):
    path = make_study(grid={"model.activation": ["relu"]})
    store = tmp_path / "runs"
    (first,) = run_study(path, store=store, progress=False)
    d = RunStore(store).run("tiny", first["run_id"])
    ckpt = d.checkpoint_dir / "last.ckpt"
    ckpt.write_bytes(ckpt.read_bytes()[:1000])
    d.write_summary({**d.read_summary(), "status": "running"})  # as if killed before it finished
    (again,) = run_study(path, store=store, progress=False)
    assert again["status"] == "completed" and "resumed_from_step" not in again
    assert again["corrupt_checkpoints"][0]["file"] == str(ckpt)
    assert again["final_val_loss"] == pytest.approx(first["final_val_loss"], abs=1e-6)


# --- 11. the end of training is checkpointed ----------------------------------------------------


def test_the_final_model_is_checkpointed_off_the_interval(make_study, tmp_path):
    path = make_study(grid={"model.activation": ["relu"]})  # 12 steps, interval 5
    store = tmp_path / "runs"
    (result,) = run_study(path, store=store, progress=False)
    d = RunStore(store).run("tiny", result["run_id"])
    assert torch.load(d.checkpoint_dir / "last.ckpt", weights_only=False)["global_step"] == 12


# --- 3. bad input caught at plan time ----------------------------------------------------------


def _cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def _one_line_exit_2(result, *needles):
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    for n in needles:
        assert n in line, line
    return line


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"", "is empty"), (b"caf\xe9 au lait\n" * 300, "not UTF-8"), (b"too short\n", "too short")],
)
def test_bad_data_files_are_rejected_at_plan_time(make_study, tmp_path, content, needle):
    data = tmp_path / "data.txt"
    data.write_bytes(content)
    path = make_study(base={"data.dataset": str(data)})
    store = tmp_path / "runs"
    key = "data.seq_len" if needle == "too short" else "base.data.dataset"
    _one_line_exit_2(_cli("run", path, "--store", store, "--no-progress"), str(path), key, needle)
    assert not store.exists()  # nothing written


def test_each_data_file_is_read_once_per_study(make_study, monkeypatch):
    import ablate.study.data_files

    calls = []
    real = ablate.study.data_files.read_prefix
    monkeypatch.setattr(
        ablate.study.data_files, "read_prefix", lambda p: calls.append(p) or real(p)
    )
    study = load_study(make_study(grid={"model.activation": ["relu", "gelu", "swiglu"]}))
    assert len(study.runs) == 3 and len(calls) == 1


@pytest.mark.parametrize(
    ("top", "base", "key", "needle"),
    [
        ({"seeds": [0, -1]}, {}, "seeds[1]", "seed must be in [0, 2**32 - 1]"),
        ({"seeds": [2**32]}, {}, "seeds[0]", "got 4294967296"),
        ({}, {"model.d_model": 4e9}, "base.model.d_model", "parameters"),
        (
            {},
            {"data.batch_size": 10**9, "data.seq_len": 10**6, "model.pos_encoding": "rope"},
            "base.data.batch_size",
            "activations",
        ),
        ({}, {"optim.lr": float("inf")}, "base.optim.lr", "finite"),
        ({}, {"train.eval_lengths": [1.0, float("nan")]}, "train.eval_lengths", "finite"),
    ],
)
def test_bad_values_are_rejected_at_plan_time(make_study, tmp_path, top, base, key, needle):
    top = top or {"grid": {"model.activation": ["relu"]}}
    path = make_study(base=base, **top)
    store = tmp_path / "runs"
    _one_line_exit_2(_cli("plan", path, "--store", store), str(path), key, needle)
    _one_line_exit_2(_cli("run", path, "--store", store, "--no-progress"), key)
    assert not store.exists()


def test_a_gpu_run_without_a_gpu_is_rejected_at_plan_time_unless_bypassed(
    make_study, tmp_path, monkeypatch
):
    import ablate.study.preflight

    monkeypatch.setattr(ablate.study.preflight, "gpu_available", lambda: False)
    path = make_study(base={"train.accelerator": "gpu"})
    _one_line_exit_2(_cli("plan", path), "base.train.accelerator", "no CUDA GPU")
    assert len(load_study(path, check_device=False).runs) == 2  # e.g. a mode that forces cpu
    monkeypatch.setattr(ablate.study.preflight, "gpu_available", lambda: True)
    assert len(load_study(path).runs) == 2


def test_train_checks_the_same_at_start(tmp_path, corpus):
    store = tmp_path / "runs"
    result = _cli(
        "train", "--set", f"data.dataset={corpus}", "--set", "train.seed=-5", "--store", store
    )
    _one_line_exit_2(result, "train.seed", "seed must be")
    assert not store.exists()


# --- 4. damaged files in the store --------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory, tiny_studies):
    """A finished two-run study (trained once for all the damage tests)."""
    root = tmp_path_factory.mktemp("trained")
    corpus = tiny_studies.corpus(root / "corpus.txt", CORPUS_LINES)
    path = tiny_studies.study(root, tiny_studies.base(**SHORT), corpus)
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "disabled")
    try:
        run_study(path, store=root / "runs", progress=False)
    finally:
        mp.undo()
    return path, root / "runs"


DAMAGE = {
    "summary-binary": ("summary.json", b"\x00\xff\xfe binary", "not UTF-8", True),
    "summary-list": ("summary.json", b"[1, 2, 3]\n", "a list where a mapping belongs", True),
    "summary-loss": (
        "summary.json",
        json.dumps({"status": "completed", "final_val_loss": "abc"}).encode(),
        "final_val_loss is 'abc', not a number",
        False,
    ),
    "run-binary": ("run.yaml", b"meta: \xff\xfe\x00\n", "not UTF-8", False),
    "run-list": ("run.yaml", b"- 1\n- 2\n", "a list where a mapping", False),
    "metrics-binary": ("metrics.csv", b"step,metric,value\n\x00\xff,\x01,2\n", "not UTF-8", False),
    "metrics-loss": ("metrics.csv", b"step,metric,value\n5,train/loss,abc\n", "non-numeric", False),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_run_is_shown_skipped_and_retrained_only_without_a_summary(
    trained_store, tmp_path, kind, monkeypatch
):
    import shutil

    from ablate.report import build_reports

    study_path, src = trained_store
    store = tmp_path / "runs"
    shutil.copytree(src, store)
    fname, content, reason, retrain = DAMAGE[kind]
    good, bad = sorted(RunStore(store).runs("tiny"), key=lambda d: d.run_id)
    (bad.path / fname).write_bytes(content)

    result = _cli("status", "tiny", "--store", store)
    assert result.exit_code == 0, result.output
    assert "damaged" in result.output and reason in " ".join(result.output.split())
    assert str(bad.path / fname) in result.output.replace("\n", "")

    out = tmp_path / "reports"
    build_reports(["tiny"], store=store, out=out)
    report = (out / "tiny" / "report.md").read_text()
    assert "damaged run(s) skipped" in report and reason in report
    results = (out / "tiny" / "results.csv").read_text()
    assert good.run_id in results and bad.run_id not in results

    before = good.summary_file.read_bytes()
    results = by_name(run_study(study_path, store=store, progress=False))
    assert good.summary_file.read_bytes() == before  # the healthy run is never touched
    # only an unreadable summary is retrained (resumed from its last checkpoint); a finished
    # run with another damaged file keeps its result and its file as it is
    assert ((bad.path / fname).read_bytes() != content) == retrain
    if retrain:
        assert bad.read_summary()["status"] == "completed"
        assert {r["status"] for r in results.values()} == {"completed"}


# --- 12. status of a study that does not exist ------------------------------------------------


def test_status_of_an_unknown_study_is_one_line_exit_2(trained_store):
    _, store = trained_store
    _one_line_exit_2(_cli("status", "tinny", "--store", store), "no study 'tinny'", "tiny")


# --- 5. a dead W&B server ------------------------------------------------------------------------


@pytest.fixture
def dead_wandb_server(monkeypatch):
    """``wandb.init`` fails online after ``delay`` s (a server that never answers); offline
    starts really start. Returns the list of modes tried, in order."""
    import wandb

    import ablate.tracking.runs

    tried: list[tuple[str, float]] = []
    real = wandb.init
    monkeypatch.setattr(ablate.tracking.runs, "_unreachable", False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    delay = {"s": 0.0}

    def init(**kwargs):
        timeout = getattr(kwargs.get("settings"), "init_timeout", None)
        if kwargs.get("mode") == "online":
            tried.append(("online", timeout))
            import time

            time.sleep(delay["s"])
            raise wandb.errors.CommError("timed out waiting for the server")
        tried.append(("offline", timeout))
        return real(**kwargs)

    monkeypatch.setattr(wandb, "init", init)
    return tried, delay


def test_a_dead_wandb_server_is_tried_once_then_runs_log_offline(
    tmp_path, dead_wandb_server, caplog, wandb_logger
):
    from ablate.tracking.mode import WANDB_TIMEOUT_S

    tried, _ = dead_wandb_server
    dirs = []
    with caplog.at_level(logging.WARNING, logger="ablate"):
        for run_id in ("run1", "run2"):
            run_dir = RunStore(tmp_path / "runs").run("s", run_id)
            logger = wandb_logger(run_dir, "online", run_id)
            assert logger is not None
            dirs.append(Path(logger.experiment.dir))
            logger.experiment.finish()
    assert [m for m, _ in tried] == ["online", "offline", "offline"]
    assert {t for _, t in tried} == {WANDB_TIMEOUT_S} and WANDB_TIMEOUT_S <= 30
    assert caplog.text.count("unreachable") == 1  # one message for the whole process
    for run_id, d in zip(("run1", "run2"), dirs, strict=True):
        assert (tmp_path / "runs" / "s" / run_id / "wandb") in d.parents
        assert "offline-run-" in str(d)  # what `wandb sync` uploads later


def test_the_wandb_wait_is_not_train_time(tmp_path, corpus, tiny_base, dead_wandb_server):
    import time

    from ablate.config import build_config
    from ablate.training.train import train_run

    _, delay = dead_wandb_server
    delay["s"] = 2.0
    flat = {f"{s}.{k}": v for s, sub in tiny_base.items() for k, v in sub.items()}
    flat.update({"data.dataset": str(corpus), "tracking.wandb": True, "tracking.mode": "online"})
    cfg = build_config(flat)
    t0 = time.time()
    summary = train_run(cfg, RunStore(tmp_path / "runs").run("s", "r"), progress=False)
    elapsed = time.time() - t0
    assert summary["status"] == "completed"
    assert summary["wandb_wait_s"] >= 2.0
    assert summary["wall_time_s"] <= elapsed - 2.0


# --- 6. derived expressions are bounded ---------------------------------------------------------


@pytest.mark.parametrize("expr", ["10 ** 5000", "2 ** 300", "(2 ** 200) * (2 ** 200)"])
def test_derived_results_are_bounded_at_validation(make_study, expr):
    from ablate.config import ConfigError

    path = make_study(derived={"data.stride": expr})
    with pytest.raises(ConfigError, match="too large") as info:
        load_study(path)
    assert "derived.data.stride" in str(info.value)


def test_a_tower_of_powers_is_rejected_quickly(make_study):
    import subprocess

    path = make_study(derived={"data.stride": "9 ** 9 ** 9"})
    code = (
        "import sys\nfrom ablate.config import ConfigError\nfrom ablate.study import load_study\n"
        f"try:\n    load_study({str(path)!r})\nexcept ConfigError as e:\n    print(e)\n"
    )
    # without a bound this computes a 370-million-digit integer for hours
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    ).stdout
    assert "derived.data.stride" in out and "exponent 387420489 too large" in out


# --- 7, 8. duplicate keys, non-UTF-8 study files, a --store that is a file ----------------------


def test_duplicate_yaml_keys_are_rejected_with_the_line(tmp_path, corpus):
    path = tmp_path / "dup.yaml"
    path.write_text(
        f"name: dup\nbase:\n  data.dataset: {corpus}\ngrid:\n  model.activation: [relu, gelu]\n"
        "seeds: [0]\ngrid:\n  model.norm: [layernorm, rmsnorm]\n"
    )
    _one_line_exit_2(_cli("plan", path), str(path), "line 7", "duplicate key 'grid'", "line 4")
    nested = tmp_path / "nested.yaml"
    nested.write_text("model:\n  d_model: 32\n  n_layers: 2\n  d_model: 64\n")
    _one_line_exit_2(_cli("train", nested), "line 4", "duplicate key 'd_model'")
    merged = tmp_path / "merged.yaml"  # a YAML merge may be overridden: not a duplicate
    merged.write_text("a: &a {x: 1}\nb:\n  <<: *a\n  x: 2\n")
    from ablate.config import load_yaml

    assert load_yaml(merged)["b"] == {"x": 2}


def test_a_study_that_is_not_utf8_is_one_line_exit_2(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: café\n".encode("latin-1"))
    for cmd in ("plan", "run"):
        _one_line_exit_2(_cli(cmd, path), str(path), "not UTF-8", "0xe9")


@pytest.mark.parametrize("cmd", [["status"], ["report"], ["plan", "x.yaml"], ["run", "x.yaml"]])
def test_a_store_that_is_a_regular_file_is_one_line_exit_2(tmp_path, cmd):
    store = tmp_path / "store.txt"
    store.write_text("not a folder")
    _one_line_exit_2(_cli(*cmd, "--store", store), "--store", str(store), "not a directory")


# --- 9. store files respect the umask ---------------------------------------------------------


def test_run_and_summary_files_respect_the_umask(tmp_path):
    d = RunStore(tmp_path / "runs").run("s", "r")
    old = os.umask(0o022)
    try:
        d.write_run({"model": {}}, {"name": "r"})
        d.write_summary({"status": "running"})
        d.append_metrics(1, {"train/loss": 1.0})
    finally:
        os.umask(old)
    for f in (d.run_file, d.summary_file, d.metrics_file):
        assert stat.S_IMODE(f.stat().st_mode) == 0o644, f


def test_a_run_attempt_writes_the_run_directory_and_keeps_earlier_attempts(tmp_path):
    cfg = build_config({"train.seed": 3})
    d = RunStore(tmp_path / "runs").run("s", "r")
    first = RunAttempt.start(cfg, d, {"name": "r"}, time.time() - 5, inputs={"data_key": "k"})
    assert d.read_run()["config"] == cfg.to_dict() and d.read_run()["meta"]["name"] == "r"
    assert d.read_run()["meta"]["data_key"] == "k"  # what the caller handed the store
    assert d.read_summary() == first.summary
    status = first.summary["status"], first.summary["seed"], first.summary["study"]
    assert status == ("running", 3, "s")
    for step in (10, 20):
        d.append_metrics(step, {"train/loss": 1.0})
    first.interrupted()  # stopped after ~5 s
    stopped = d.read_summary()
    assert stopped["wall_time_s"] == pytest.approx(5, abs=1)
    launched = time.time() - 3  # the launching command's start: in its attempt, not run.yaml
    meta = {"name": "renamed", "launched": launched}
    second = RunAttempt.start(cfg, d, meta, time.time() - 2, inputs={})
    assert d.read_run()["meta"]["name"] == "r"  # run.yaml is written once
    assert len(second.summary["attempts"]) == 2 and second.prior == stopped
    assert [a.get("launched") for a in second.summary["attempts"]] == [None, launched]
    assert "launched" not in d.read_run()["meta"] and "launched" not in second.meta
    assert second.wall_time() == pytest.approx(7, abs=1)  # the clock goes on
    second.resume(10, ["last.ckpt.corrupt"])
    assert [s for s, _, _ in d.read_metrics()] == [10]  # step 20 is trained again
    assert second.summary["resumed_from_step"] == 10
    assert second.summary["corrupt_checkpoints"] == ["last.ckpt.corrupt"]
    second.restore()  # e.g. a refused resume: the store says what it said before
    assert d.read_summary() == stopped
    third = RunAttempt.start(cfg, d, None, time.time(), inputs={})
    third.resume(None, [])  # a fresh start replays every step
    assert d.read_metrics() == []
    try:
        raise ValueError("boom")
    except ValueError as err:
        third.failed(err)
    third.write()
    assert (
        d.read_summary()["status"] == "failed" and d.read_summary()["error"] == "ValueError: boom"
    )
    assert "boom" in d.error_file.read_text()


# --- 10. a missing file answers before the heavy imports ----------------------------------------


def test_a_missing_config_is_reported_before_torch_is_imported(tmp_path):
    import subprocess

    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom ablate.cli import app\n"
        "for cmd in (['train', 'missing.yaml'], ['run', 'missing.yaml'], "
        "['plan', 'missing.yaml']):\n"
        "    r = CliRunner().invoke(app, cmd)\n"
        "    print(r.exit_code, 'file not found' in r.output)\n"
        "print(sorted(m for m in ('torch', 'pytorch_lightning', 'wandb') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    ).stdout.splitlines()
    assert out == ["2 True", "2 True", "2 True", "[]"]


def test_a_full_disk_while_logging_metrics_fails_the_run_naming_the_file(
    make_study, tmp_path, monkeypatch
):
    import builtins

    path = make_study(grid={"model.activation": ["relu"]})
    real_open = builtins.open
    appends = []

    def full_open(file, mode="r", *a, **k):  # the third append to metrics.csv hits a full disk
        if str(file).endswith("metrics.csv") and "a" in mode:
            appends.append(file)
            if len(appends) > 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full_open)
    (result,) = run_study(path, store=tmp_path / "runs", progress=False)
    assert result["status"] == "failed"
    assert "disk full" in result["error"] and "metrics.csv" in result["error"]
