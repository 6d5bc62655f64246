"""``ablate bench --chaos``: kill -9 workers and the driver until a study completes; count losses.

A 24-run tiny study (``STUDY``, on a generated corpus) is trained by the real CLI (``ablate run``
in a subprocess) into fresh stores, per executor once undisturbed and once while a thread
follows a seeded schedule of ``kill -9``s of a worker or of the driver, the same command started
again whenever the driver is gone: ``local`` (``--workers 4``) and ``ray`` (a local cluster
started as a user starts one, the study sent with ``--executor-opt address=...``).
Everything is counted from the store and ``/proc``: *lost*, *trained twice* (every
``summary.json`` read each 0.2 s), *stuck* (a lease held once our processes are gone), *left
behind* (processes of a killed driver alive 15 s later), and the final losses against the
undisturbed store.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.bench.machine import ablate_command, kill, load_avg, processes, session_members
from ablate.bench.machine import summary as _summary
from ablate.bench.markdown import columns, seconds, upsert, write
from ablate.store import FINISHED

HEADING = "## 6. Crash safety (`ablate bench --chaos`)"
MONITOR_S = 0.2
LEFT_BEHIND_S = 15.0  # how long a killed driver's workers get to checkpoint and exit

# Each run ~200 steps of a 1-layer model: a few seconds, so kills land mid-run and resumes
# from the 20-step checkpoints matter. 2 x 2 x 2 variants x 3 seeds = 24 runs.
STUDY = """
name: chaos
base:
  model: {n_layers: 1, d_model: 32, n_heads: 2, max_seq_len: 32}
  data: {tokenizer: char, seq_len: 32, batch_size: 8}
  optim: {lr: 3.0e-3, warmup_ratio: 0.0}
  train: {max_steps: 200, eval_interval: 100, eval_batches: 2, final_eval_batches: 4,
          checkpoint_interval: 20, threads: 1, progress: false}
  tracking: {wandb: false}
grid:
  {model.activation: [gelu, relu], model.norm_placement: [pre, post], optim.lr: [1.0e-3, 3.0e-3]}
seeds: [0, 1, 2]
"""


@dataclass(frozen=True)
class ChaosPlan:
    """How hard to shake one executor."""

    worker_kills: int = 6
    driver_kills: int = 3
    interval_s: tuple[float, float] = (4.0, 9.0)
    limit_s: float = 900.0
    seed: int = 0
    max_steps: int = 200
    seeds: tuple[int, ...] = (0, 1, 2)
    workers: int = 4  # local workers; Ray gets as many CPUs

    @classmethod
    def make(cls, quick: bool) -> ChaosPlan:
        if quick:  # 8 short runs, one kill of each kind: a smoke test of the machinery
            return cls(1, 1, (3.0, 5.0), 300.0, max_steps=60, seeds=(0,), workers=2)
        return cls()

    def schedule(self) -> list[str]:
        """The kills in order, shuffled with ``seed`` (a pure function of the plan)."""
        kills = ["worker"] * self.worker_kills + ["driver"] * self.driver_kills
        random.Random(self.seed).shuffle(kills)
        return kills


def write_study(folder: Path, plan: ChaosPlan) -> Path:
    """The chaos study and its corpus (random lines of a small word list) under ``folder``."""
    import yaml

    rng = random.Random(0)
    words = "the king and queen of a to my lord that is in with thou not me be his your".split()
    lines = [" ".join(rng.choices(words, k=rng.randint(4, 12))) for _ in range(4000)]
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    study = yaml.safe_load(STUDY)
    study["base"]["data"]["dataset"] = str(corpus)
    study["base"]["train"]["max_steps"] = plan.max_steps
    study["base"]["train"]["eval_interval"] = max(1, plan.max_steps // 2)
    study["seeds"] = list(plan.seeds)
    path = folder / "chaos.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


# --- what the store says -----------------------------------------------------------------------


def _last_attempt(s: dict[str, Any] | None) -> dict[str, Any]:
    return ((s or {}).get("attempts") or [{}])[-1]


@dataclass
class Monitor:
    """Watches the runs' summaries: who finished each run, and any training after that."""

    runs: list[Path]
    finished_by: dict[str, set] = field(default_factory=dict)
    restarted_after_finish: set = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)

    def look(self) -> None:
        for run in self.runs:
            s = _summary(run)
            if not s:
                continue
            last = _last_attempt(s)
            done = self.finished_by.setdefault(run.name, set())
            if s.get("status") in FINISHED:
                done.add((last.get("host"), last.get("pid"), last.get("started")))
            elif done:
                self.restarted_after_finish.add(run.name)

    def loop(self) -> None:
        while not self.stop.wait(MONITOR_S):
            self.look()

    def trained_twice(self) -> list[str]:
        twice = {r for r, keys in self.finished_by.items() if len(keys) > 1}
        return sorted(twice | self.restarted_after_finish)


def outcome(runs: list[Path], monitor: Monitor | None = None) -> dict[str, Any]:
    """Lost, twice and stuck runs of a store (call once no process of ours is left)."""
    from ablate.store import RunDir, run_state

    states = {run.name: run_state(RunDir(run)) for run in runs}
    summaries = {run.name: _summary(run) or {} for run in runs}
    return {
        "runs": len(runs),
        "lost": sorted(r for r, st in states.items() if st not in FINISHED),
        "stuck": sorted(r for r, st in states.items() if st == "running"),
        "twice": monitor.trained_twice() if monitor else [],
        "starts": sum(len(s.get("attempts") or []) for s in summaries.values()),
        "resumed": sum(1 for s in summaries.values() if s.get("resumed_from_step") is not None),
        "losses": {r: s.get("final_val_loss") for r, s in summaries.items()},
    }


def loss_agreement(a: dict[str, float | None], b: dict[str, float | None]) -> dict[str, Any]:
    """How far the chaos store's final losses are from the undisturbed store's."""
    diffs = [abs(a[r] - b[r]) for r in a if a.get(r) is not None and b.get(r) is not None]
    return {
        "compared": len(diffs),
        "max_abs_diff": max(diffs) if diffs else None,
        "within_1e-4": sum(d <= 1e-4 for d in diffs),
    }


def training(runs: list[Path]) -> list[int]:
    """Pids of the processes training a run now: a run's lease holder that has started it
    (the summary's last attempt is its own), not one still importing torch."""
    from ablate.store.lease import holder

    pids = set()
    for r in runs:
        h, s = holder(r), _summary(r) or {}
        if h and s.get("status") == "running" and _last_attempt(s).get("pid") == h.get("pid"):
            pids.add(h["pid"])
    alive = processes()
    return sorted(p for p in pids if p in alive)


# --- one executor, undisturbed or shaken -------------------------------------------------------


@dataclass
class _Shaker:
    """The chaos thread: kills by the schedule while the study trains."""

    runs: list[Path]
    schedule: list[str]
    interval_s: tuple[float, float]
    rng: random.Random
    driver: subprocess.Popen | None = None
    killed: dict[str, int] = field(default_factory=lambda: {"worker": 0, "driver": 0})
    killed_drivers: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        for action in self.schedule:
            if self.stop.wait(self.rng.uniform(*self.interval_s)):
                return
            while not self.stop.is_set() and not self._kill(action):
                self.stop.wait(0.5)  # nothing to kill right now (a driver starting): try again

    def _kill(self, action: str) -> bool:
        """One kill while some run trains (so it interrupts training); False: not now."""
        driver, workers = self.driver, training(self.runs)
        if driver is None or driver.poll() is not None or not workers:
            return False
        pid = driver.pid if action == "driver" else self.rng.choice(workers)
        if not kill(pid):
            return False
        self.killed[action] += 1
        if action == "driver":
            self.killed_drivers.append(pid)
        return True


def shaken(cmd: list[str], runs: list[Path], plan: ChaosPlan, log_file: Path) -> dict[str, Any]:
    """Run ``cmd`` (the study) again until it completes while :class:`_Shaker` kills workers
    and drivers."""
    shaker = _Shaker(runs, plan.schedule(), plan.interval_s, random.Random(plan.seed))
    monitor = Monitor(runs)
    threads = [threading.Thread(target=t, daemon=True) for t in (shaker.run, monitor.loop)]
    for t in threads:
        t.start()
    commands, t0 = 0, time.perf_counter()
    with open(log_file, "ab") as log:
        done = lambda: all((_summary(r) or {}).get("status") in FINISHED for r in runs)  # noqa: E731
        while not done() and time.perf_counter() - t0 < plan.limit_s:
            # its own session: its workers stay findable by session once orphaned
            shaker.driver = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            commands += 1
            shaker.driver.wait()
    wall = time.perf_counter() - t0
    shaker.stop.set()
    time.sleep(LEFT_BEHIND_S if shaker.killed_drivers else 0)
    left = [p for sid in shaker.killed_drivers for p in session_members(sid)]
    for pid in left:  # counted, then cleaned up so they do not skew what follows
        kill(pid)
    monitor.stop.set()
    for t in threads:
        t.join(timeout=5)
    monitor.look()
    counts = {"commands": commands, "killed": dict(shaker.killed), "left_behind": len(left)}
    return {"wall_s": wall, **counts, **outcome(runs, monitor)}


@contextmanager
def ray_cluster(cpus: int, folder: Path):
    """``ray start --head --block`` in its own session, yielding its address; the whole session
    stopped on exit."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [str(Path(sys.executable).with_name("ray")), "start", "--head", "--block"]
    cmd += [f"--port={port}", f"--num-cpus={cpus}", "--num-gpus=0", "--include-dashboard=false"]
    # its own temp dir: the address file it writes must not outlive it in /tmp/ray, where a
    # later ray.init() would try to join the dead cluster
    cmd += ["--disable-usage-stats", "--node-ip-address=127.0.0.1", f"--temp-dir={folder / 'ray'}"]
    with open(folder / "ray.log", "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"ray start failed; see {folder / 'ray.log'}") from None
                time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)  # `ray start --block` stops the cluster on TERM
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for pid in session_members(proc.pid):
            kill(pid)


def _measure(name: str, study: Path, folder: Path, ids: list[str], plan: ChaosPlan) -> dict:
    """One executor: the study undisturbed, then under chaos, each into a fresh store."""
    with ray_cluster(plan.workers, folder) if name == "ray" else nullcontext() as address:
        ex = ["--executor", "ray", "--executor-opt", f"address={address}"] if address else []
        ex = ex or ["--workers", str(plan.workers)]
        log_file = folder / f"{name}.log"
        stores = {k: folder / f"{name}-{k}" for k in ("calm", "chaos")}
        cmd = {
            k: ablate_command("run", str(study), "--store", str(s), *ex) for k, s in stores.items()
        }
        t0 = time.perf_counter()
        with open(log_file, "ab") as log:
            rc = subprocess.run(cmd["calm"], stdout=log, stderr=subprocess.STDOUT).returncode
        calm = {"wall_s": time.perf_counter() - t0, "rc": rc}
        calm.update(outcome([stores["calm"] / "chaos" / i for i in ids]))
        print(f"{name}: undisturbed {calm['wall_s']:.0f} s, {len(calm['lost'])} not finished")
        chaos = shaken(cmd["chaos"], [stores["chaos"] / "chaos" / i for i in ids], plan, log_file)
        chaos["agreement"] = loss_agreement(chaos.pop("losses"), calm.pop("losses"))
        bad = "; ".join(failures_of(name, chaos)) or "nothing lost"
        print(f"{name}: under chaos {chaos['wall_s']:.0f} s; {bad}")
    return {"undisturbed": calm, "chaos": chaos}


def run_chaos(quick: bool = False, out: Path = Path("reports/bench_chaos.md")) -> dict[str, Any]:
    """Measure both executors, write ``out`` (+ ``.json``) and, unless ``quick``, the section in
    ``bench.md`` beside it. Raises if a must-be-zero count is not zero."""
    from ablate.study import load_study

    plan = ChaosPlan.make(quick)
    os.environ.setdefault("WANDB_SILENT", "true")
    results: dict[str, Any] = {"quick": quick, "plan": plan.__dict__, "executors": {}}
    results["schedule"] = plan.schedule()
    results["started"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    results["cores"] = os.cpu_count()
    results["load_avg_start"] = load_avg()  # other work on the machine skews the times
    with tempfile.TemporaryDirectory(prefix="ablate-chaos-") as tmp:
        study = write_study(Path(tmp), plan)
        ids = [r.run_id for r in load_study(study).runs]
        results["runs"] = len(ids)
        for name in ("local", "ray"):
            results["executors"][name] = _measure(name, study, Path(tmp), ids, plan)
    results["load_avg_end"] = load_avg()
    text = section(results)
    write(out, "# ablate bench --chaos\n\n" + text.removeprefix(HEADING + "\n\n"), results)
    if not quick:  # a smoke run never replaces the measured section of bench.md
        upsert(out.parent / "bench.md", text)
    print(f"wrote {out}")
    if bad := failures(results):
        raise RuntimeError("chaos bench: " + "; ".join(bad))
    return results


# --- the report ---------------------------------------------------------------------------------


def _agreement(a: dict[str, Any]) -> str:
    d = a["max_abs_diff"]
    return "n/a" if d is None else f"{d:.1e} ({a['within_1e-4']}/{a['compared']})"


# one row per executor (name, undisturbed, under chaos)
_COLUMNS = [
    ("executor", lambda e: e[0]),
    ("undisturbed", lambda e: seconds(e[1]["wall_s"])),
    ("under chaos", lambda e: seconds(e[2]["wall_s"])),
    ("× wall", lambda e: f"{e[2]['wall_s'] / e[1]['wall_s']:.2f}"),
    ("commands", lambda e: e[2]["commands"]),
    ("killed (workers / drivers)", lambda e: "{worker} / {driver}".format(**e[2]["killed"])),
    ("lost", lambda e: len(e[2]["lost"])),
    ("twice", lambda e: len(e[2]["twice"])),
    ("stuck", lambda e: len(e[2]["stuck"])),
    ("left behind", lambda e: e[2]["left_behind"]),
    ("runs resumed", lambda e: f"{e[2]['resumed']} ({e[2]['starts']} starts)"),
    ("max abs Δ final loss vs undisturbed (runs ≤ 1e-4)", lambda e: _agreement(e[2]["agreement"])),
]


def section(results: dict[str, Any]) -> str:
    """The section's markdown: one row per executor, then throughput and the verdict."""
    plan, n, ex = results["plan"], results["runs"], results["executors"]
    kills = f"{plan['worker_kills']} worker and {plan['driver_kills']} driver kills"
    lines = [
        HEADING,
        "",
        f"A {n}-run tiny study ({plan['max_steps']} steps, a checkpoint every 20) trained by "
        f"the real CLI with {plan['workers']} local workers and on a local Ray cluster "
        f"(`--executor-opt address=...`), once undisturbed and once while a thread `kill -9`s "
        f"({kills}, one every {plan['interval_s'][0]:.0f}-{plan['interval_s'][1]:.0f} s, "
        "seeded), the command started again whenever the driver is gone. Counted from the "
        "store and /proc: *lost* "
        "(not finished), *twice* (finished twice, or started again after finishing), *stuck* "
        "(lease held once our processes are gone), *left behind* (a killed driver's processes "
        "alive 15 s later). The first four must be 0.",
        "",
    ]
    if results.get("quick"):
        lines += ["**--quick: toy sizes, the numbers measure nothing.**", ""]
    lines += [columns(_COLUMNS, [(k, r["undisturbed"], r["chaos"]) for k, r in ex.items()]), ""]
    per_min = {k: n / r["undisturbed"]["wall_s"] * 60 for k, r in ex.items()}
    if {"local", "ray"} <= set(per_min):
        local, ray = per_min["local"], per_min["ray"]
        lines += [
            f"Study throughput, undisturbed: local {local:.1f} runs/min, Ray {ray:.1f} runs/min "
            f"(Ray ÷ local {ray / local:.2f}). A killed local worker breaks the whole pool "
            "(`concurrent.futures`), so the other runs resume from checkpoints in a fresh pool; "
            "a killed Ray task is retried alone.",
            "",
        ]
    bad = failures(results)
    lines.append("**Result: " + ("FAILED, " + "; ".join(bad) if bad else "nothing lost") + ".**")
    start, end = results.get("load_avg_start"), results.get("load_avg_end")
    if end is not None:
        load = f"{start:.1f} at the start, " if start is not None else ""
        cores = results.get("cores") or "?"
        lines += ["", f"1-minute load average: {load}{end:.1f} at the end ({cores} cores)."]
    if results.get("background"):  # noted by whoever ran it: what else the machine did
        lines[-1] += f" Running beside the bench: {results['background']}."
    return "\n".join(lines) + "\n"


def failures_of(name: str, c: dict[str, Any]) -> list[str]:
    """Every must-be-zero count of one executor's chaos run that is not zero, as text."""
    bad = [
        f"{name}: {k} {len(c[k])} ({', '.join(c[k][:3])})"
        for k in ("lost", "twice", "stuck")
        if c[k]
    ]
    if c["left_behind"]:
        bad.append(f"{name}: {c['left_behind']} processes left behind by killed drivers")
    return bad


def failures(results: dict[str, Any]) -> list[str]:
    return [b for name, r in results["executors"].items() for b in failures_of(name, r["chaos"])]
