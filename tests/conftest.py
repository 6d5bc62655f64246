"""What every test module shares: the test environment, and the tiny runs and studies that the
runner, fault, executor and training tests train (fixtures, so no test module imports another)."""

import copy
import os
import random
import signal
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import matplotlib
import pytest
import yaml

matplotlib.use("Agg")

# Tests read tiny shakespeare from the shared folder beside the checkout (never the internet).
_SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
if "ABLATE_DATA_DIR" not in os.environ and _SHARED.is_dir():
    os.environ["ABLATE_DATA_DIR"] = str(_SHARED)
os.environ.setdefault("WANDB_SILENT", "true")

# A shell starts background jobs (`make test &`, nohup) with SIGINT ignored, and Python then keeps
# it ignored: the Ctrl-C tests would never see their KeyboardInterrupt. Restore Python's default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def no_wandb(monkeypatch):
    """W&B logs nothing unless a test asks for it (``pytestmark = usefixtures("no_wandb")``)."""
    monkeypatch.setenv("WANDB_MODE", "disabled")


@pytest.fixture
def wandb_logger():
    """``wandb_logger(run_dir, mode, name)``: the W&B logger of a run of study "s" (config
    {"x": 1}), as the runner makes it; the caller finishes its experiment."""
    from ablate.config import TrackingConfig
    from ablate.training.tracking import make_wandb_logger

    def make(run_dir, mode, name):
        tracking = TrackingConfig(wandb=True, mode=mode)
        return make_wandb_logger(
            tracking, run_dir, run_config={"x": 1}, group="s", job_type="base", name=name, tags=[]
        )

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


# --- the executor checks (Ray, SLURM): a run interrupted here, resumed there --------------------


def _interrupt_first_run_at_step_12(path, store, monkeypatch):
    """Train the study here until its first run is interrupted at step 12 (like a Ctrl-C)."""
    import ablate.training.lit
    from ablate.execution.runner import run_study

    original = ablate.training.lit.LitLM.on_train_batch_end

    def interrupt_at_12(self, outputs, batch, batch_idx):
        original(self, outputs, batch, batch_idx)
        if self.global_step == 12:
            raise KeyboardInterrupt

    monkeypatch.setattr(ablate.training.lit.LitLM, "on_train_batch_end", interrupt_at_12)
    with pytest.raises(KeyboardInterrupt):
        run_study(path, store=store, progress=False)
    monkeypatch.setattr(ablate.training.lit.LitLM, "on_train_batch_end", original)


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
