"""What every test module shares: the test environment, and the tiny runs and studies that the
runner, fault, executor and training tests train, and the synthetic stores the report and claim
tests read (fixtures, so no test module imports another)."""

import copy
import math
import os
import random
import signal
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import numpy as np
import pytest
import yaml

matplotlib.use("Agg")

# Tests read tiny shakespeare from the shared folder beside the checkout (never the internet).
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if "ABLATE_DATA_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["ABLATE_DATA_DIR"] = str(_SHARED)
os.environ.setdefault("WANDB_SILENT", "true")
# torch.compile's tests (inductor on the CPU) build its C++ at -O0: the same graphs, the same
# generated code and the same numbers, in half the compile time on 2 cores (C++ optimization is
# most of a cold compile there); a user's runs keep inductor's -O3
os.environ.setdefault("TORCHINDUCTOR_DEBUG_COMPILE", "1")
# `ablate run` defaults to --workers auto (a pool filling the cores); tests train one run at a
# time in their own process (monkeypatched hooks reach the run) unless they name --workers, and
# the child processes they start inherit this. test_executors checks auto's layout itself.
os.environ["ABLATE_DEFAULT_WORKERS"] = "1"

# One torch thread in the test process (a run's train.threads still sets its own): on a shared
# 2-core machine a second intra-op thread waits for a core at every barrier, and a 200-step run
# of a 2-layer model took 79 s on two threads beside other work, 6 s on one.
import torch  # noqa: E402

torch.set_num_threads(1)

# A shell starts background jobs (`make test &`, nohup) with SIGINT ignored, and Python then keeps
# it ignored: the Ctrl-C tests would never see their KeyboardInterrupt. Restore Python's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def no_wandb(monkeypatch):
    """W&B logs nothing unless a test asks for it (``pytestmark = usefixtures("no_wandb")``)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")


@pytest.fixture
def clean_registry():
    """Undo every registration a test makes (the registries and the loaded plugins are
    process-wide: a plugin one test loads must not leak into the next)."""
    from ablate.model.plugins import _LOADED, _PLUGINS
    from ablate.model.transformer import FFNS, NORMS

    before = {id(r): dict(r) for r in (NORMS, FFNS)}
    loaded, plugins = dict(_LOADED), dict(_PLUGINS)
    yield
    for r in (NORMS, FFNS):
        r.clear()
        r.update(before[id(r)])
    _LOADED.clear()
    _LOADED.update(loaded)
    _PLUGINS.clear()
    _PLUGINS.update(plugins)


@pytest.fixture
def wandb_logger():
    """``wandb_logger(run_dir, mode, name)``: the W&B run of a run of study "s" (variant
    "base", the default config), as training starts it; the caller finishes its experiment."""
    from ablate.config import RunConfig, TrackingConfig
    from ablate.tracking.runs import start_member_wandb

    def make(run_dir, mode, name):
        cfg = RunConfig(tracking=TrackingConfig(wandb=True, mode=mode))
        return start_member_wandb(cfg, run_dir, {"study": "s", "variant": "base"}, name)

    return make


# --- one tiny run, as flat overrides for build_config (test_train.py, test_accel.py) -----------

_TINY_RUN = {
    "model.d_model": 32,
    "model.n_layers": 1,
    "model.n_heads": 2,
    "model.max_seq_len": 32,
    "data.seq_len": 32,
    "data.batch_size": 8,
    "train.max_steps": 20,
    "train.eval_interval": 10,
    "train.eval_batches": 2,
    "train.final_eval_batches": 4,
    "train.log_interval": 5,
    "train.grad_norm_interval": 10,
    "train.checkpoint_interval": 10,
    "train.threads": 1,
    "train.progress": False,
    "tracking.wandb": False,
}


@pytest.fixture
def tiny_run() -> dict:
    """A 20-step run of a one-layer model on tiny shakespeare, in seconds on one CPU thread."""
    return dict(_TINY_RUN)


# --- tiny studies: a base config, a word corpus, the study YAML (runner, faults, executors) ----

_TINY_BASE = {
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16},
    "data": {"seq_len": 16, "batch_size": 4},
    "optim": {"lr": 3e-3},
    "train": {
        "max_steps": 20,
        "eval_interval": 10,
        "eval_batches": 2,
        "final_eval_batches": 2,
        "log_interval": 5,
        "grad_norm_interval": 10,
        "checkpoint_interval": 5,
        "threads": 1,
    },
    "tracking": {"wandb": False},
}
_WORDS = ["the", "king", "queen", "shall", "not", "love", "my", "lord", "thee", "good"]


def _base(**train) -> dict:
    """A fresh copy of the tiny study base, its ``train`` section updated with ``train``."""
    base = copy.deepcopy(_TINY_BASE)
    base["train"].update(train)
    return base


def _write_corpus(path: Path, lines: int = 400) -> Path:
    """``lines`` lines of 12 words drawn (seed 0) from ten: the same text every time."""
    rng = random.Random(0)
    text = "\n".join(" ".join(rng.choice(_WORDS) for _ in range(12)) for _ in range(lines))
    path.write_text(text + "\n")
    return path


def _write_study(folder: Path, base: dict, corpus: Path, name="tiny", overrides=None, **top):
    """``folder/<name>.yaml``: ``base`` reading ``corpus``, with ``overrides`` ({"section.key":
    value}) applied, and the top-level keys ``top`` (default: a relu/gelu grid)."""
    b = copy.deepcopy(base)
    b["data"]["dataset"] = str(corpus)
    for key, value in (overrides or {}).items():
        section, field = key.split(".", 1)
        b.setdefault(section, {})[field] = value
    study = {"name": name, "description": "a tiny test study", "base": b}
    study.update(top or {"grid": {"model.activation": ["relu", "gelu"]}})
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def tiny_studies():
    """The functions behind the fixtures below, for module-scoped fixtures that train once:
    ``base(**train)``, ``corpus(path, lines)``, ``study(folder, base, corpus, name, overrides,
    **top)``."""
    return SimpleNamespace(base=_base, corpus=_write_corpus, study=_write_study)


@pytest.fixture
def tiny_base() -> dict:
    """The tiny study base (a 20-step one-layer model); a module may override this fixture."""
    return _base()


@pytest.fixture
def corpus_lines() -> int:
    """How many lines ``corpus`` has; a module may override this fixture."""
    return 400


@pytest.fixture
def corpus(tmp_path, corpus_lines) -> Path:
    return _write_corpus(tmp_path / "corpus.txt", corpus_lines)


@pytest.fixture
def make_study(tmp_path, corpus, tiny_base):
    """``make_study(name="tiny", base={"train.max_steps": 5}, grid=...)`` writes a study YAML on
    ``tiny_base`` and ``corpus`` and returns its path."""

    def make(name="tiny", base=None, **top):
        return _write_study(tmp_path, tiny_base, corpus, name, base, **top)

    return make


# --- git: registrations are proven from a checkout's history -----------------------------------


def _git(folder, *args, when=None) -> str:
    """``git -C folder args`` as a test user; ``when`` (unix seconds) sets the committer time.
    Returns stdout, stripped; a failing command raises."""
    import subprocess

    env = {**os.environ, "GIT_COMMITTER_DATE": f"@{when} +0000"} if when else None
    cmd = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="session")
def git():
    """``git(folder, *args, when=None) -> stdout``: a command in a test's own repository."""
    return _git


# --- the executor checks (Ray, SLURM): a run interrupted here, resumed there --------------------


def _interrupt_first_run_at_step_12(path, store, monkeypatch):
    """Train the study here until its first run is interrupted at step 12 (like a Ctrl-C)."""
    import ablate.training.stacked.lit
    from ablate.execution.runner import run_study

    original = ablate.training.stacked.lit.LitStack.on_train_batch_end

    def interrupt_at_12(self, outputs, batch, batch_idx):
        original(self, outputs, batch, batch_idx)
        if self.step == 12:
            raise KeyboardInterrupt

    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_batch_end", interrupt_at_12)
    with pytest.raises(KeyboardInterrupt):
        run_study(path, store=store, progress=False)
    monkeypatch.setattr(ablate.training.stacked.lit.LitStack, "on_train_batch_end", original)


def _assert_same_as_local(results, local):
    """Identical seeds give identical runs wherever they train; the resumed one too."""
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert results[0]["resumed_from_step"] == 12 and len(results[0]["attempts"]) == 2
    assert "resumed_from_step" not in results[1] and len(results[1]["attempts"]) == 1
    for r, ref in zip(results, local, strict=True):
        assert r["name"] == ref["name"] and r["steps"] == ref["steps"] == 20
        assert r["final_val_loss"] == pytest.approx(ref["final_val_loss"], abs=1e-6)
    assert results[1]["final_val_loss"] == local[1]["final_val_loss"]  # bit for bit


@pytest.fixture
def interrupt_first_run_at_step_12(monkeypatch):
    """``interrupt_first_run_at_step_12(study_path, store)``: see the function above."""
    return partial(_interrupt_first_run_at_step_12, monkeypatch=monkeypatch)


@pytest.fixture
def assert_same_as_local():
    """``assert_same_as_local(results, local_results)``: see the function above."""
    return _assert_same_as_local


def _assert_stacked_like_solo(results, path, tmp_path, members):
    """Runs trained in stacks of ``members`` equal the same study trained solo, locally."""
    from ablate.execution.runner import run_study

    local = run_study(path, store=tmp_path / "local", progress=False)
    for r, ref in zip(results, local, strict=True):
        assert r["run_id"] == ref["run_id"] and r["stack"]["members"] == members
        assert r["final_val_loss"] == pytest.approx(ref["final_val_loss"], rel=1e-5)


@pytest.fixture
def assert_stacked_like_solo():
    """``assert_stacked_like_solo(results, study_path, tmp_path, members)``: see above."""
    return _assert_stacked_like_solo


# --- synthetic stores through the store API (report and claim tests) -----------------------------

from ablate.config import build_config  # noqa: E402 - after the environment above is set
from ablate.store import RunStore  # noqa: E402

SYNTHETIC_BASE = {
    "model.d_model": 32,
    "model.n_layers": 4,
    "model.n_heads": 2,
    "model.max_seq_len": 32,
    "data.seq_len": 32,
    "train.max_steps": 100,
    "tracking.wandb": False,
}


def _write_synthetic_run(
    store,
    study,
    axes,
    seed,
    status,
    final,
    *,
    layers=4,
    lengths=None,
    div_step=None,
    config=None,
    fields=None,
):
    """One run as the runner would leave it: run.yaml, summary.json, metrics.csv. ``config``:
    more config keys (e.g. a ladder rung's shape, not an axis key); ``fields``: more summary
    fields (e.g. ``flops_per_token``)."""
    cfg = build_config(
        {
            **SYNTHETIC_BASE,
            **{k: v for k, v in axes.items() if "." in k},
            **(config or {}),
            "train.seed": seed,
        }
    )
    variant = "-".join(str(v) for v in axes.values())
    run = RunStore(store).run(study, cfg.run_id())
    meta = {"name": f"{variant}-s{seed}", "variant": variant, "axes": axes, "seed": seed}
    run.write_run(cfg.to_dict(), {**meta, "study": study, "run_id": run.run_id})
    rng = np.random.default_rng(seed)
    last = {"running": 50, "diverged": div_step}.get(status, 100)
    for step in range(0, last + 1, 10):
        loss = final + 2.5 * math.exp(-step / 30) + 0.01 * rng.standard_normal()
        row = {"train/loss": loss + 0.05, "lr": 1e-3}
        if step and step % 25 == 0 or step == 100:
            row.update({"val/loss": loss, "val/ppl": math.exp(loss)})
        if step == 0:
            post = axes.get("model.norm_placement") == "post"
            for i in range(layers):
                g = (0.5 + 0.4 * i) if post else (1.2 - 0.2 * i)
                row[f"grad_norm/layer_{i:02d}"] = g + 0.02 * rng.standard_normal()
                row[f"grad_norm/ffn_out_{i:02d}"] = g / 2 + 0.01 * rng.standard_normal()
            row["grad_norm/global"] = 2.0
        run.append_metrics(step, row)
    if status == "diverged":
        run.append_metrics(div_step + 1, {"train/loss": float("nan")})
    summary = {
        "status": status,
        "seed": seed,
        "axes": axes,
        "params": 51_000,
        "params_non_embedding": 49_000,
        "lr": axes.get("optim.lr", 1e-3),
        "tokens_per_s": 9000.0 + 100 * seed,
        "wall_time_s": 12.0 + seed,
    }
    if status == "completed":
        summary.update(
            steps=100, best_val_loss=final, final_val_loss=final, final_val_ppl=math.exp(final)
        )
        if lengths is not None:
            summary["val_loss_at_length"] = lengths
    elif status == "diverged":
        summary.update(steps=div_step, diverged_step=div_step, final_val_loss=None)
    run.write_summary(summary | (fields or {}))


def _norm_pos_store(root: Path) -> Path:
    """2 axes (norm placement × pos encoding) × 3 seeds; one diverged, one still running."""
    for norm, base in (("post", 1.9), ("pre", 1.6)):
        for pos in ("learned", "rope"):
            for seed in range(3):
                final = base + 0.02 * (seed - 1) + (0.004 if pos == "rope" else 0.0)
                status = "completed"
                if (norm, pos, seed) == ("post", "learned", 2):
                    status = "diverged"
                if (norm, pos, seed) == ("pre", "rope", 2):
                    status = "running"
                if pos == "learned":
                    lengths = {"1": final, "2": None, "4": None}
                else:
                    lengths = {"1": final, "2": final + 0.3, "4": final + 0.9}
                axes = {"model.norm_placement": norm, "model.pos_encoding": pos}
                _write_synthetic_run(
                    root, "norm_pos", axes, seed, status, final, lengths=lengths, div_step=40
                )
    return root


def _mark_confirm(store, study, seeds, tag=None, started=None, commit=None):
    """Seeds ``seeds`` as confirmation runs under ``tag``, run from the study repository's
    ``commit`` (clean) when given, as ``ablate run confirm`` records them."""
    for run in RunStore(store).runs(study):
        summary = run.read_summary()
        if summary["seed"] in seeds:
            extra = {} if started is None else {"attempts": [{"started": started}]}
            run.write_summary({**summary, "confirm": True, **extra})
            if tag is not None:
                data = run.read_run()
                repo = {} if commit is None else {"study_commit": commit, "study_dirty": False}
                meta = {**data["meta"], "confirm": True, "registration": tag, **repo}
                run.write_run(data["config"], meta)


@pytest.fixture(scope="session")
def mark_confirm():
    """``mark_confirm(store, study, seeds, tag=None, started=None, commit=None)``: see above."""
    return _mark_confirm


@pytest.fixture(scope="session")
def write_run():
    """``write_run(store, study, axes, seed, status, final, ...)``: one synthetic run."""
    return _write_synthetic_run


@pytest.fixture(scope="session")
def norm_pos_store():
    """``norm_pos_store(root) -> root``: a 2-axis x 3-seed synthetic study."""
    return _norm_pos_store


# --- W&B offline runs, read back from their .wandb files -----------------------------------------


def _read_wandb_file(path) -> SimpleNamespace:
    """One ``.wandb`` file read back: its last ``run`` record (a run's tags set later publish
    it again), record ``kinds`` (a Counter), the merged ``config``, the ``history`` (metric ->
    logged values), the ``summary`` (flat key -> value, nested keys joined by ``/``) and the
    ``exit_codes`` of its exit records."""
    import collections
    import json

    from ablate.tracking.sync import read_records

    records = read_records(path)
    kinds = collections.Counter(rec.WhichOneof("record_type") for rec in records)
    runs = [rec.run for rec in records if rec.WhichOneof("record_type") == "run"]
    assert runs, path
    run = runs[-1]
    config = {u.key: json.loads(u.value_json) for u in runs[0].config.update}
    history = collections.defaultdict(list)
    summary = {}
    exit_codes = []
    for rec in records:
        kind = rec.WhichOneof("record_type")
        if kind == "config":  # later config updates, if any
            config.update({u.key: json.loads(u.value_json) for u in rec.config.update})
        if kind == "history":
            for i in rec.history.item:
                history[i.key or "/".join(i.nested_key)].append(json.loads(i.value_json))
        if kind == "summary":
            for i in rec.summary.update:
                summary[i.key or "/".join(i.nested_key)] = json.loads(i.value_json)
        if kind == "exit":
            exit_codes.append(rec.exit.exit_code)
    return SimpleNamespace(
        run=run, kinds=kinds, config=config, history=history, summary=summary, exit_codes=exit_codes
    )


def _offline_wandb_run(run_dir) -> SimpleNamespace:
    """The run's newest offline W&B run (the one ``ablate sync`` uploads), read back
    (:func:`_read_wandb_file`), with the number of offline ``folders`` (one per start) of its
    W&B id."""
    from ablate.tracking.ids import wandb_run_id

    rid = wandb_run_id(run_dir)
    files = sorted(run_dir.wandb_dir.glob(f"offline-run-*-{rid}/run-{rid}.wandb"))
    assert files, list(run_dir.wandb_dir.rglob("*"))
    out = _read_wandb_file(files[-1])
    out.folders = len(files)
    return out


@pytest.fixture(scope="session")
def offline_wandb_run():
    """``offline_wandb_run(run_dir)``: its offline W&B run read back (run, kinds, config,
    history, summary, exit_codes, folders)."""
    return _offline_wandb_run


@pytest.fixture(scope="session")
def read_wandb_file():
    """``read_wandb_file(path)``: one ``.wandb`` file read back (run, kinds, config, history,
    summary, exit_codes)."""
    return _read_wandb_file


# --- a W&B server that never answers ---------------------------------------------------------


@pytest.fixture
def silent_wandb_server(monkeypatch, tmp_path):
    """``WANDB_BASE_URL`` at a loopback server that accepts every connection and never answers,
    a W&B key, and a 1 s wait (``ABLATE_WANDB_TIMEOUT_S``), for the processes a test starts."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])  # held open, never read or answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv("WANDB_BASE_URL", url)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("ABLATE_WANDB_TIMEOUT_S", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    yield url
    listener.close()
    for conn in held:
        conn.close()
