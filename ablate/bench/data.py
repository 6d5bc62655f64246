"""Memory against corpus size: peak anonymous memory of ``ablate train`` on a small and a large
local text corpus (section 7 of ``bench.md``).

Each corpus is generated into a temporary folder (lines of random words from a 5,000-word
vocabulary) and deleted afterwards. Each is trained twice by ``ablate train`` in a fresh process
with a fresh token cache (``$ABLATE_CACHE_DIR``): the first run builds the cache (reads the text,
tokenizes it into the memory-mapped token file), the second finds it built. The parent samples
the child's ``RssAnon`` (its heap: the page cache of the memory-mapped tokens is not counted)
every ``SAMPLE_S`` seconds; the peak is the largest sample. Goal (issue 21): the large corpus's
peak at most ``GOAL`` x the small one's, i.e. memory independent of corpus size.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ablate.bench.loops import train_command
from ablate.bench.machine import rss_anon

SAMPLE_S = 0.05
GOAL = 1.2
RUNS = ("builds the cache", "cached")

# a tiny model and few steps: the memory of interest is the data's, not the model's
TRAIN: dict[str, Any] = {
    "model.n_layers": 1,
    "model.d_model": 32,
    "model.n_heads": 2,
    "model.max_seq_len": 64,
    "data.tokenizer": "char",
    "data.seq_len": 64,
    "data.batch_size": 8,
    "train.eval_batches": 1,
    "train.final_eval_batches": 2,
    "train.threads": 1,
    "train.progress": False,
    "tracking.wandb": False,
}


def synthetic_corpus(path: Path, mb: float, seed: int = 0) -> Path:
    """``mb`` megabytes of lines of random words (a 5,000-word vocabulary), written in ~1 MB
    blocks so the writer's memory does not grow with the file."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(5000)]
    target, written = int(mb * (1 << 20)), 0
    with path.open("w", encoding="utf-8") as f:
        while written < target:
            ids = rng.integers(0, len(words), 200_000)
            lines = [" ".join(words[i] for i in ids[j : j + 12]) for j in range(0, len(ids), 12)]
            block = "\n".join(lines) + "\n"
            f.write(block)
            written += len(block)
    return path


def peak_rss_anon(cmd: list[str], env: dict[str, str], log_file: Path) -> dict[str, Any]:
    """Run ``cmd`` (its output to ``log_file``); its wall time and the largest ``RssAnon``
    sample (bytes)."""
    t = time.perf_counter()
    with log_file.open("wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, rss_anon(proc.pid))
            time.sleep(SAMPLE_S)
    if proc.returncode:
        tail = log_file.read_text(errors="replace").strip()[-1000:]
        raise RuntimeError(f"ablate train failed ({proc.returncode}): {tail}")
    return {"peak_rss_anon": peak, "wall_s": time.perf_counter() - t}


def corpus_memory(
    sizes_mb: tuple[float, float], steps: int, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Peak ``RssAnon`` of ``ablate train`` (``steps`` steps) on a generated corpus of each
    size, building the token cache and then with it built; the ratio large / small per run."""
    rows = []
    flat = {**TRAIN, "train.max_steps": steps, "train.eval_interval": steps + 1}
    with tempfile.TemporaryDirectory(prefix="ablate-bench-data-") as tmp:
        for mb in sizes_mb:
            t = time.perf_counter()
            corpus = synthetic_corpus(Path(tmp) / f"corpus-{mb:g}mb.txt", mb)
            log(f"  {mb:g} MB corpus generated in {time.perf_counter() - t:.0f} s")
            env = {**os.environ, "ABLATE_CACHE_DIR": str(Path(tmp) / f"cache-{mb:g}")}
            cmd = train_command({**flat, "data.dataset": str(corpus)}, Path(tmp) / "store", "data")
            for run in RUNS:
                got = peak_rss_anon(cmd, env, Path(tmp) / "train.log")
                row = {"corpus_mb": mb, "run": run, **got}
                rows.append(row)
                log(
                    f"  {mb:g} MB, {run}: peak RssAnon {row['peak_rss_anon'] / 2**20:,.0f} MiB "
                    f"({row['wall_s']:.0f} s)"
                )
            corpus.unlink()
    small, large = sizes_mb
    peak = {(r["corpus_mb"], r["run"]): r["peak_rss_anon"] for r in rows}
    ratio = {run: peak[large, run] / peak[small, run] for run in RUNS}
    return {"sizes_mb": list(sizes_mb), "steps": steps, "rows": rows, "ratio": ratio, "goal": GOAL}
