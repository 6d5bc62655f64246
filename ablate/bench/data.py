"""Data pipeline benchmark: tokenizing a corpus into the memmap cache, reading training windows,
and peak RSS, for tiny shakespeare and a synthetic text file of ``--mb`` megabytes.

Each measurement runs in a fresh process with an empty ablate cache, so tokenization is timed
from scratch and ``ru_maxrss`` is that corpus's own peak. Goal: peak RSS independent of corpus
size (the corpus is streamed and the tokens memory-mapped), and window reading far faster than a
training step consumes tokens. Run: ``python -m ablate.bench.data [--mb 200] [--out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

_CHILD = """
import json, resource, sys, time
from ablate.config import DataConfig
from ablate.data import LMDataModule
args = json.loads(sys.argv[1])
t0 = time.perf_counter()
dm = LMDataModule(DataConfig(dataset=args["dataset"], tokenizer=args["tokenizer"],
                             seq_len=args["seq_len"], batch_size=args["batch_size"])).prepare()
t1 = time.perf_counter()
n_tokens = sum(dm.tokens(s).numel() for s in ("train", "val", "test"))
loader, tokens, n = dm.train_dataloader(), 0, 0
t2 = time.perf_counter()
while n < args["batches"]:  # a small corpus has fewer windows than that: epochs repeat
    for x, y in loader:
        tokens, n = tokens + x.numel(), n + 1
        if n == args["batches"]:
            break
t3 = time.perf_counter()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"tokens": n_tokens, "tokenize_s": t1 - t0,
                  "read_tokens_per_s": tokens / (t3 - t2), "peak_rss_mb": rss}))
"""


def synthetic_corpus(path: Path, mb: float, seed: int = 0) -> Path:
    """``mb`` megabytes of lines of random words (a 5,000-word vocabulary), written in 1 MB
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


def measure(dataset: str, *, tokenizer: str = "char", batches: int = 500) -> dict[str, Any]:
    """One fresh process: tokenize ``dataset`` into an empty cache, then read ``batches``
    training batches (64 x 256)."""
    args = {"dataset": dataset, "tokenizer": tokenizer, "seq_len": 256, "batch_size": 64}
    args["batches"] = batches
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "ABLATE_CACHE_DIR": cache}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(args)],
            env=env,
            capture_output=True,
            text=True,
        )
    if out.returncode:
        raise RuntimeError(f"data benchmark of {dataset} failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(mb: float = 200.0, batches: int = 500) -> str:
    """The markdown section: one row per corpus."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        big = synthetic_corpus(Path(tmp) / "synthetic.txt", mb)
        for label, dataset in (
            ("tiny shakespeare", "tinyshakespeare"),
            (f"synthetic {mb:g} MB", str(big)),
        ):
            r = measure(dataset, batches=batches)
            rows.append(
                f"| {label} | {r['tokens']:,} | {r['tokens'] / r['tokenize_s']:,.0f} | "
                f"{r['read_tokens_per_s']:,.0f} | {r['peak_rss_mb']:,.0f} |"
            )
    head = [
        "## Data pipeline (char tokenizer, fresh cache, 64 x 256 batches)",
        "",
        "| corpus | tokens | tokenize tokens/s | window read tokens/s | peak RSS MB |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    return "\n".join(head + rows) + "\n"


def main() -> None:  # pragma: no cover - a command-line entry point
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=float, default=200.0, help="Size of the synthetic corpus.")
    p.add_argument("--batches", type=int, default=500, help="Training batches read per corpus.")
    p.add_argument("--out", type=Path, help="Also write the section to this file.")
    a = p.parse_args()
    text = run(a.mb, a.batches)
    print(text)
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":  # pragma: no cover
    main()
