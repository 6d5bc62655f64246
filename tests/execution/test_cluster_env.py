"""Lightning's cluster auto-detection is ablate's decision: every run is one process."""

from __future__ import annotations

import os
import warnings

from pytorch_lightning.plugins.environments import LightningEnvironment

from ablate.config import build_config
from ablate.store import RunStore
from ablate.training.stacked.store import MemberCheckpointIO
from ablate.training.train import train_run
from ablate.training.trainer import make_trainer


def test_a_login_node_with_srun_gets_no_srun_warning_and_a_single_process_run(
    tmp_path, monkeypatch
):
    # a machine where SLURM is installed: `srun` on the PATH, this process not started by srun
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    for var in ("SLURM_NTASKS", "SLURM_JOB_NAME", "SLURM_JOB_ID"):
        monkeypatch.delenv(var, raising=False)
    cfg = build_config(
        {
            **{"model.n_layers": 1, "model.d_model": 16, "model.n_heads": 2},
            **{"data.seq_len": 16, "data.batch_size": 4, "train.max_steps": 2},
            **{"train.eval_interval": 2, "train.eval_batches": 1, "train.final_eval_batches": 1},
            **{"train.progress": False, "tracking.wandb": False, "train.threads": 1},
        }
    )
    run_dir = RunStore(tmp_path / "runs").run("t", "x")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = make_trainer(cfg, [run_dir], MemberCheckpointIO([run_dir.checkpoint_dir]))
        # a fresh fit asks Lightning's SLURM detection again (for an "hpc" checkpoint)
        assert train_run(cfg, run_dir)["status"] == "completed"
    assert not [w for w in caught if "srun" in str(w.message)]
    assert isinstance(trainer._accelerator_connector.cluster_environment, LightningEnvironment)
