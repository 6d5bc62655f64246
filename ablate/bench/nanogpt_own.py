"""nanoGPT's own code at the reference study's settings: the artifacts its claims compare with.

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

At the gpu profile (``--gpu``) it runs nanoGPT's GPU config as its README does, ``train.py
config/train_shakespeare_char.py`` with its defaults (CUDA, bf16, compile), optionally stopped
after ``--max-iters`` of the config's 5000 iterations (``lr_decay_iters`` stays 5000: the same
schedule, and its best validation loss comes near iteration 1750), and writes
``reports/gpu/nanogpt_own.json``: per run its ``best_val_loss`` (what the README reports: the
lowest of its printed validation losses, each 200 random batches), the iteration, the printed
curve, and, where its best checkpoint is there, that checkpoint scored on the whole validation
split in ablate's windows (``full_split_best_val_loss``). ``--from-log`` makes the same record from
a log of such a run (the GPU pilot's).

A registered claim pins the values it compares with, so the artifact a registration read
(``reports/gpu/nanogpt_own.json``) never grows under it: ``--gpu`` writes the runs so far plus
its new one to ``reports/gpu/nanogpt_own_next.json`` (its seed: the next one neither file has),
which a later registration may point the claim at.
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
# a line of run_stamped's log: seconds since nanoGPT's process was launched, then its own line
STAMPED = re.compile(r"^\[\s*([\d.]+) s\] step (\d+): train loss", re.M)
# its line after a training step: the first is printed once torch.compile and step 0 are done
STAMPED_ITER = re.compile(r"^\[\s*([\d.]+) s\] iter \d+: loss", re.M)


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
def full_split_loss(
    tree: Path, ckpt_path: Path, cfg: RunConfig, iteration: int | None = None
) -> float:
    """Mean token cross-entropy of nanoGPT's checkpoint (of ``iteration``, default the run's
    last), with nanoGPT's ``model.py``, over ablate's validation windows (``eval_dataloader``:
    the whole split, non-overlapping), on CUDA where there is one."""
    sys.path.insert(0, str(tree))
    try:
        from model import GPT, GPTConfig  # nanoGPT's own model.py
    finally:
        sys.path.remove(str(tree))
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    want = cfg.train.max_steps if iteration is None else iteration
    if ckpt["iter_num"] != want:
        raise RuntimeError(f"{ckpt_path} is from iteration {ckpt['iter_num']}, not {want}")
    model = GPT(GPTConfig(**ckpt["model_args"]))
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(dev).eval()
    dm = LMDataModule(cfg.data, seed=0).prepare()
    with open(tree / "data" / "shakespeare_char" / "meta.pkl", "rb") as f:
        stoi = pickle.load(f)["stoi"]
    if stoi != dm.tokenizer.stoi:  # the same ids, so ablate's windows mean the same text
        raise RuntimeError("nanoGPT's character vocabulary differs from ablate's")
    losses = [float(model(x.to(dev), y.to(dev))[1]) for x, y in dm.eval_dataloader("val")]
    return sum(losses) / len(losses)  # every window holds the same number of tokens


def nanogpt_commit(nanogpt: Path) -> str:
    """The checkout's commit (its ``.git``, a bare mirror's ``HEAD``, or the ``COMMIT`` file
    scripts/gpu/prepare.sh writes into the copy it carries), or ``unknown``."""
    if (nanogpt / "COMMIT").is_file():
        return (nanogpt / "COMMIT").read_text().strip() or "unknown"
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


# --- the gpu profile: nanoGPT's GPU config -------------------------------------------------------

GPU_OUT = Path("reports/gpu/nanogpt_own.json")
GPU_NEXT = Path("reports/gpu/nanogpt_own_next.json")
GPU_ARGS = ("config/train_shakespeare_char.py",)
GPU_KEYS = ("best_val_loss", "best_iter", "final_val_loss", "full_split_best_val_loss")


def parse_log(text: str) -> dict[str, Any]:
    """What nanoGPT printed at each evaluation (``step N: train loss X, val loss Y``, any prefix
    such as a time stamp): its curves, best validation loss and the iteration of it."""
    rows = [(int(s), float(t), float(v)) for s, t, v in PRINTED.findall(text)]
    if not rows:
        raise ValueError("no 'step N: train loss X, val loss Y' line in the log")
    best = min(rows, key=lambda r: r[2])
    printed = {"iter": [r[0] for r in rows], "train": [r[1] for r in rows]}
    printed["val"] = [r[2] for r in rows]
    stamps = [(float(t), int(s)) for t, s in STAMPED.findall(text)]
    first_step = STAMPED_ITER.search(text)
    if [s for _, s in stamps] == printed["iter"]:  # a log of run_stamped: when each was printed
        printed["seconds"] = [t for t, _ in stamps]
    return {
        "best_val_loss": best[2],
        "best_iter": best[0],
        "final_val_loss": rows[-1][2],
        "last_iter": rows[-1][0],
        "printed": printed,
        # when its first training step was done, from its launch (a stamped log only)
        **({"first_step_s": float(first_step.group(1))} if first_step and stamps else {}),
    }


def run_stamped(cmd: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run ``cmd``: (its exit status, its stdout with every line prefixed by the seconds since
    it was launched, its stderr). nanoGPT's log has no clock; the stamps give its wall time to
    each evaluation, imports, data and ``torch.compile`` included."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # each line when printed, not in blocks
    lines = []
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(f"[{time.perf_counter() - t0:8.2f} s] {line}")
        code = proc.wait()
        err.seek(0)
        return code, "".join(lines), err.read()


def gpu_record(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The artifact: every run, and per key of ``GPU_KEYS`` the list over the runs that have it
    (what a claim's ``key`` names)."""
    out: dict[str, Any] = {
        "what": "nanoGPT's own train.py config/train_shakespeare_char.py (its GPU config), "
        "as studies/reference_nanogpt_cpu.yaml's gpu profile compares with",
        "best_val_loss_is": "the lowest validation loss nanoGPT printed (each 200 random batches "
        "of 64 x 256), as its README reports it",
        "runs": runs,
    }
    for key in GPU_KEYS:
        out[key] = [r[key] for r in runs if r.get(key) is not None]
    return out


def read_runs(path: Path) -> list[dict[str, Any]]:
    """The runs of an existing artifact (none when there is no file)."""
    try:
        return list(json.loads(path.read_text())["runs"])
    except FileNotFoundError:
        return []


def write_json(record: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out)


def run_gpu(
    nanogpt: Path, out: Path, keep: Path, max_iters: int | None, log: Path | None
) -> dict[str, Any]:
    """Train nanoGPT's GPU config once, at the first seed ``keep``'s runs lack; write ``keep``'s
    runs plus this one to ``out`` (``keep``: the next-runs file where there is one, else the
    registered artifact)."""
    runs = read_runs(keep)
    seed = next(s for s in range(SEEDS[0], SEEDS[0] + 10**6) if s not in {r["seed"] for r in runs})
    cfg = load_study(STUDY, "gpu", check_device=False).runs[0].config
    extra = [f"--max_iters={max_iters}"] if max_iters else []
    with tempfile.TemporaryDirectory() as tmp:
        tree = prepare(nanogpt, Path(tmp), resolve_dataset(cfg.data.dataset))
        cmd = [sys.executable, "-c", SEED_SHIM, str(seed), *GPU_ARGS, *extra, "--out_dir=out"]
        t0, launched = time.perf_counter(), time.time()
        code, stdout, stderr = run_stamped(cmd, tree)
        seconds = time.perf_counter() - t0
        if log is not None:
            log.write_text(stdout + stderr)
        if code:
            raise RuntimeError(f"nanoGPT seed {seed} failed:\n{stderr[-3000:]}")
        this = parse_log(stdout) | {"seed": seed, "seconds": round(seconds, 1)}
        this["launched"] = round(launched, 3)  # which ablate runs trained beside it
        ckpt = tree / "out" / "ckpt.pt"  # saved whenever the validation loss improved
        if ckpt.is_file():
            full = full_split_loss(tree, ckpt, cfg, iteration=this["best_iter"])
            this["full_split_best_val_loss"] = round(full, 6)
    this |= {
        "command": ["python", "train.py", *GPU_ARGS, *extra],
        "nanogpt_commit": nanogpt_commit(nanogpt),
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "source": "python -m ablate.bench.nanogpt_own --gpu",
        "made_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    record = gpu_record([*runs, this])
    write_json(record, out)
    return record


def from_log(log: Path, out: Path, seed: int, device: str, commit: str) -> dict[str, Any]:
    """The record of a logged run of nanoGPT's GPU config (e.g. the GPU pilot's), added to
    ``out``'s runs."""
    this = parse_log(log.read_text()) | {"seed": seed, "device": device, "nanogpt_commit": commit}
    this["source"] = f"parsed from {log} (python -m ablate.bench.nanogpt_own --from-log)"
    runs = [r for r in read_runs(out) if r.get("source") != this["source"]]
    record = gpu_record([*runs, this])
    write_json(record, out)
    return record


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nanogpt", type=Path, help="a checkout of karpathy/nanoGPT")
    p.add_argument("--out", type=Path, help=f"default reports/nanogpt_own.json; --gpu: {GPU_NEXT}")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--gpu", action="store_true", help="nanoGPT's GPU config, one seed")
    p.add_argument(
        "--keep", type=Path, help=f"--gpu: the runs to keep ({GPU_NEXT}, else {GPU_OUT})"
    )
    p.add_argument("--max-iters", type=int, help="--gpu: stop after this many iterations")
    p.add_argument("--log", type=Path, help="--gpu: where nanoGPT's output goes")
    p.add_argument("--from-log", type=Path, help="a log of nanoGPT's GPU config to record")
    p.add_argument("--seed", type=int, default=SEEDS[0], help="--from-log: the run's seed")
    p.add_argument("--device", default="unknown", help="--from-log: the GPU it ran on")
    p.add_argument("--commit", default="unknown", help="--from-log: nanoGPT's commit")
    a = p.parse_args(argv)
    if a.from_log:
        from_log(a.from_log, a.out or GPU_OUT, a.seed, a.device, a.commit)
        return
    if a.nanogpt is None or not (a.nanogpt / "train.py").is_file():
        p.error(f"--nanogpt: {a.nanogpt}/train.py not found (a checkout of karpathy/nanoGPT)")
    if a.gpu:
        keep = a.keep or (GPU_NEXT if GPU_NEXT.is_file() else GPU_OUT)
        run_gpu(a.nanogpt, a.out or GPU_NEXT, keep, a.max_iters, a.log)
    else:
        run(a.nanogpt, a.out or Path("reports/nanogpt_own.json"), tuple(a.seeds), a.threads)


if __name__ == "__main__":
    main()
