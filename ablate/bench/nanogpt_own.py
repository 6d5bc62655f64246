"""nanoGPT's own code at the reference study's CPU settings: the artifact its claim compares with.

``python -m ablate.bench.nanogpt_own --nanogpt DIR`` runs ``DIR/train.py`` (a checkout of
github.com/karpathy/nanoGPT; nothing of it is copied here) once per seed with its README's CPU
command, then scores each run's final weights with ``DIR/model.py`` on the whole validation split
cut into ablate's evaluation windows, and writes ``reports/nanogpt_own.json``:
``full_split_val_loss`` (what ``studies/reference_nanogpt_cpu.yaml``'s claim tests against) and
``printed_val_loss`` (what nanoGPT prints: 20 random batches), per seed, with the commands and the
nanoGPT commit. nanoGPT seeds with ``torch.manual_seed(1337 + seed_offset)`` and has no seed
option, so seed ``s`` is run with ``torch.manual_seed`` shifted by ``s - 1337`` (``SEED_SHIM``);
``always_save_checkpoint`` is on so the checkpoint holds the weights after the last iteration,
as ablate's final evaluation does.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ablate.config import RunConfig
from ablate.data import LMDataModule, resolve_dataset
from ablate.study import load_study

STUDY = Path("studies/reference_nanogpt_cpu.yaml")
SEEDS = (1337, 1338, 1339)
# nanoGPT's README "I only have a macbook" command, with the settings ablate's study mirrors
CPU_ARGS = (
    "config/train_shakespeare_char.py --device=cpu --compile=False --eval_iters=20 "
    "--log_interval=1 --block_size=64 --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 "
    "--max_iters=2000 --lr_decay_iters=2000 --dropout=0.0 --dtype=float32 "
    "--always_save_checkpoint=True"
).split()
SEED_SHIM = (
    "import runpy, sys, torch; _seed = torch.manual_seed; _off = int(sys.argv.pop(1)) - 1337; "
    "torch.manual_seed = lambda s: _seed(s + _off); "
    "sys.argv[0] = 'train.py'; runpy.run_path('train.py', run_name='__main__')"
)
PRINTED = re.compile(r"step (\d+): train loss ([\d.]+), val loss ([\d.]+)")


def prepare(nanogpt: Path, work: Path, text: Path) -> Path:
    """A scratch copy of the checkout with the corpus in place (its prepare.py downloads it
    otherwise) and nanoGPT's own ``prepare.py`` run on it."""
    tree = work / "nanoGPT"
    shutil.copytree(nanogpt, tree, ignore=shutil.ignore_patterns(".git", "out-*"))
    data = tree / "data" / "shakespeare_char"
    shutil.copyfile(text, data / "input.txt")
    subprocess.run([sys.executable, "prepare.py"], cwd=data, check=True, capture_output=True)
    return tree


def train(tree: Path, seed: int, threads: int) -> tuple[float, Path, float]:
    """(nanoGPT's printed val loss at the last iteration, its checkpoint, seconds)."""
    out = f"out-seed{seed}"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-c", SEED_SHIM, str(seed), *CPU_ARGS, f"--out_dir={out}"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if res.returncode:
        raise RuntimeError(f"nanoGPT seed {seed} failed:\n{res.stderr[-3000:]}")
    printed = PRINTED.findall(res.stdout)
    if not printed or int(printed[-1][0]) != 2000:
        raise RuntimeError(f"nanoGPT seed {seed} printed no step-2000 evaluation:\n{res.stdout}")
    return float(printed[-1][2]), tree / out / "ckpt.pt", seconds


@torch.no_grad()
def full_split_loss(tree: Path, ckpt_path: Path, cfg: RunConfig) -> float:
    """Mean token cross-entropy of nanoGPT's checkpoint, with nanoGPT's ``model.py``, over
    ablate's validation windows (``eval_dataloader``: the whole split, non-overlapping)."""
    sys.path.insert(0, str(tree))
    try:
        from model import GPT, GPTConfig  # nanoGPT's own model.py
    finally:
        sys.path.remove(str(tree))
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    if ckpt["iter_num"] != cfg.train.max_steps:
        raise RuntimeError(f"{ckpt_path} is from iteration {ckpt['iter_num']}, not the last")
    model = GPT(GPTConfig(**ckpt["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
    model.eval()
    dm = LMDataModule(cfg.data, seed=0).prepare()
    with open(tree / "data" / "shakespeare_char" / "meta.pkl", "rb") as f:
        stoi = pickle.load(f)["stoi"]
    if stoi != dm.tokenizer.stoi:  # the same ids, so ablate's windows mean the same text
        raise RuntimeError("nanoGPT's character vocabulary differs from ablate's")
    losses = [float(model(x, y)[1]) for x, y in dm.eval_dataloader("val")]
    return sum(losses) / len(losses)  # every window holds the same number of tokens


def nanogpt_commit(nanogpt: Path) -> str:
    """The checkout's commit (its ``.git``, or a bare mirror's ``HEAD``), or ``unknown``."""
    for args in (["-C", str(nanogpt)], [f"--git-dir={nanogpt}/.git"]):
        res = subprocess.run(["git", *args, "rev-parse", "HEAD"], capture_output=True, text=True)
        if res.returncode == 0:
            return res.stdout.strip()
    return "unknown"


def run(nanogpt: Path, out: Path, seeds: tuple[int, ...] = SEEDS, threads: int = 1) -> dict:
    """Train and score every seed; write the artifact atomically; return it."""
    cfg = load_study(STUDY, "cpu").runs[0].config
    record: dict[str, Any] = {
        "what": "nanoGPT's own train.py at studies/reference_nanogpt_cpu.yaml's CPU settings",
        "nanogpt_commit": nanogpt_commit(nanogpt),
        "command": ["python", "train.py", *CPU_ARGS, "--out_dir=out-seed<seed>"],
        "seed_shim": SEED_SHIM,
        "threads": threads,
        "torch": torch.__version__,
        "seeds": list(seeds),
        "printed_val_loss": [],
        "full_split_val_loss": [],
        "train_seconds": [],
        "made_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        tree = prepare(nanogpt, Path(tmp), resolve_dataset(cfg.data.dataset))
        for seed in seeds:
            printed, ckpt, seconds = train(tree, seed, threads)
            full = full_split_loss(tree, ckpt, cfg)
            print(
                f"seed {seed}: printed val {printed:.4f}, full split {full:.4f} ({seconds:.0f} s)"
            )
            record["printed_val_loss"].append(printed)
            record["full_split_val_loss"].append(round(full, 6))
            record["train_seconds"].append(round(seconds, 1))
    tmp_out = out.with_suffix(".part")
    tmp_out.write_text(json.dumps(record, indent=2) + "\n")
    tmp_out.replace(out)
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nanogpt", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    p.add_argument("--out", type=Path, default=Path("reports/nanogpt_own.json"))
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)
    if not (a.nanogpt / "train.py").is_file():
        p.error(f"--nanogpt: {a.nanogpt}/train.py not found (a checkout of karpathy/nanoGPT)")
    run(a.nanogpt, a.out, tuple(a.seeds), a.threads)


if __name__ == "__main__":
    main()
