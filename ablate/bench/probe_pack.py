"""The probe's packing row: ``PACK`` processes on one device at once, each training solo runs as
``ablate run --workers 4 --runs-per-gpu 4`` would, and their tokens/s in all.

Each process (``python -m ablate.bench.probe_pack FLAT WINDOW``) imports ablate, trains one
short run to warm up (CUDA's lazy initialisation, the first kernels), says ``ready`` and waits;
when every process is ready the parent says ``go`` to all of them at once, and each times the
probe's two runs (``probe.timed_runs``: the steps between them over the wall time between
them). Their tokens/s are summed: the rate of the device with ``PACK`` runs packed on it, as
long as the processes' timed runs overlap, which the common start makes them do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

READY, GO, RESULT = "ready", "go", "result "
WARMUP_STEPS = 5


def _worker(flat_path: str, a: str, b: str) -> None:
    """One packed process: warm up, wait for ``go``, time the runs, print the result."""
    import torch

    from ablate.bench.probe_runs import run_length, timed_runs, train
    from ablate.config import build_config

    flat = json.loads(Path(flat_path).read_text())
    cuda = torch.cuda.is_available() and flat["train.accelerator"] == "gpu"
    with tempfile.TemporaryDirectory(prefix="ablate-pack-") as root:
        train(build_config(flat | run_length(WARMUP_STEPS)), 0, Path(root))
    print(READY, flush=True)
    sys.stdin.readline()
    try:
        out = timed_runs(flat, 0, (int(a), int(b)), cuda)
    except Exception as err:  # noqa: BLE001 - the parent reports it in the row
        out = {"error": f"{type(err).__name__}: {err}"}
    print(RESULT + json.dumps(out), flush=True)


def _wait_for(proc: subprocess.Popen, prefix: str) -> str | None:
    """The first stdout line of ``proc`` starting with ``prefix`` (None: it ended first);
    other lines (a library's messages) are skipped."""
    for line in proc.stdout:
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def _last_line(path: Path) -> str:
    lines = [s for s in path.read_text(errors="replace").splitlines() if s.strip()]
    return lines[-1] if lines else "no output"


def packed_row(flat: dict[str, Any], processes: int, window: tuple[int, int]) -> dict[str, Any]:
    """The packing row: ``processes`` solo runs at once (seeds 0..processes-1), their summed
    tokens/s; ``error`` when a process fails (the first one's last line)."""
    row: dict[str, Any] = {"members": 0, "processes": processes}
    with tempfile.TemporaryDirectory(prefix="ablate-pack-flat-") as tmp:
        procs, logs = [], []
        for i in range(processes):
            path = Path(tmp) / f"flat{i}.json"
            path.write_text(json.dumps(flat | {"train.seed": i}))
            logs.append(Path(tmp) / f"stderr{i}.txt")
            cmd = [sys.executable, "-m", "ablate.bench.probe_pack", str(path), *map(str, window)]
            with open(logs[-1], "w") as err:
                procs.append(
                    subprocess.Popen(
                        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
                    )
                )
        try:
            ready = [_wait_for(p, READY) is not None for p in procs]
            for p in procs:
                if p.poll() is None:
                    p.stdin.write(GO + "\n")
                    p.stdin.flush()
            results = [json.loads(r) if (r := _wait_for(p, RESULT)) else None for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
        pairs = enumerate(zip(ready, results, strict=True))
        failed = [i for i, (ok, r) in pairs if not ok or not r or "error" in r]
        if failed:
            i = failed[0]
            why = (results[i] or {}).get("error") or _last_line(logs[i])
            return row | {"error": f"process {i}: {why}"}
    rates = [r["tokens_per_s"] for r in results]
    if not all(rates):
        return row | {"error": "a process's timed runs took no longer than its short one"}
    first = results[0]
    return row | {
        "tokens_per_s": sum(rates),
        "per_process_tokens_per_s": rates,
        "flops_per_token": first["flops_per_token"],
        "attn_kernel": first.get("attn_kernel"),
        "attn_backend": first.get("attn_backend"),
    }


if __name__ == "__main__":
    _worker(*sys.argv[1:4])
