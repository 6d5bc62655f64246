"""The GPU window rehearsed on this CPU (docs/gpu.md): ``scripts/gpu/prepare.sh`` here, then
``scripts/gpu/window.sh`` twice on fresh copies of the checkout inside a simulated GPU image
(marker ``accept``: ``make test-accept``, minutes; the window's argument checks run in
``make test``).

What is simulated, and how:

* The image's ``python3`` is a virtual environment made from this interpreter (``--without-pip``)
  whose only package folder (named by a ``.pth`` file) holds links to this environment's packages
  less those the GPU image lacks: pydantic (with pydantic-core, annotated-types and
  typing-inspection), wandb, wandb-workspaces and datasets, and ablate itself. Missing means
  missing for imports and for ``importlib.metadata`` alike. Like the image's, it is a venv itself,
  so a venv made from it would not see those packages: the window must not make one.
* No package index: pip and every download see ``PIP_NO_INDEX``, an index URL and proxies on a
  closed loopback port. Only the checkout's git-visible files and its carried folders (``.whl``,
  ``.gpu-data``, ``.gpu-git``) travel, into a folder with no ``shared/`` beside it; ``HOME`` is
  empty.
* The device's ``.git`` lags its files: the first window's copy has none, the second one's is a
  snapshot of the checkout's ``.git`` taken before the confirmed study was registered (as a lent
  machine's was, from the start of the session). The carried ``.gpu-git/head.bundle`` must make
  HEAD the checkout's own: the confirmation runs, and every run records the checkout's commit,
  not dirty.
* The wheels: pydantic-core is compiled, so they cannot be rebuilt offline. The "index" that
  prepare.sh downloads from is a folder of wheels zipped from this environment's installed
  files, tagged as their installed ``WHEEL`` metadata says (``cp311`` here where the GPU takes
  ``cp312``); ``prepare.sh --python-version`` asks for this interpreter's version.

Not simulated: CUDA, the image's own versions of torch and Lightning (this environment's run),
the probe's CUDA figures (in the first window the probe is cut after a second, so its failure
being tolerated is rehearsed; in the second it runs whole, at its CPU shape, inside the image,
and the window applies its verdict to the studies that follow), nanoGPT itself (a stand-in
``train.py`` that prints nanoGPT's evaluation lines is carried as ``.nanogpt``, so the window's
run of ``ablate.bench.nanogpt_own --gpu`` beside the studies is rehearsed end to end), and the
device's own copying. Runs train one at
a time in ``ablate run``'s process, as ``--workers auto`` does on one GPU (a pool of workers, as
``--runs-per-gpu 4`` makes, is not rehearsed).

The first window's budget cuts a run, whatever this machine's speed: that run's feed-forward is
a plugin that sleeps ``GPUWIN_SLEEP_S`` per training step (set in the first window only; a sleep
changes no result, so the run is the same run, with the same id, in both windows). Its study
comes first, so the second study gets no time. The second window, on a fresh copy with the
first one's ``stores.tgz`` committed under ``reports/gpu/stores/``, finishes both studies without
retraining the run the first one finished.
"""

import base64
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from importlib.metadata import distribution, version
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WINDOW = "scripts/gpu/window.sh"
PREPARE = "scripts/gpu/prepare.sh"
HIDDEN = {
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "wandb",
    "wandb_workspaces",
    "datasets",
}
"""Top-level modules (and their distributions) the GPU image lacks."""
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there
MiB = 1024 * 1024
# the first window: its studies' deadline comes SECONDS - GRACE - FINISH = 75 s after its start,
# time for the install, the import check and the quick run on a slow or busy machine (2 cores
# under a load of 8 took 20 s to install and check the imports)
FIRST_SECONDS, GRACE, FINISH = 90, 5, 10
SLOW_STEPS, FIRST_SLEEP_S = 300, "0.5"  # the first window's slow run would take 150 s
SECOND_SECONDS, SECOND_PROBE_S = 480, "300"  # the whole probe on 2 loaded cores, then the rest
FAKE_NANOGPT = """import sys

# a stand-in for nanoGPT's train.py: its evaluation lines, a best at step 500
for step, val in ((0, 4.17), (250, 2.5), (500, 2.25), (750, 2.375)):
    print(f"step {step}: train loss {val - 0.25:.4f}, val loss {val:.4f}")
print("args:", *sys.argv[1:])
"""

SHAKESPEARE = Path(os.environ.get("ABLATE_DATA_DIR", "")) / "tinyshakespeare" / "input.txt"

# --- the simulated image ------------------------------------------------------------------


def _hidden(entry: str) -> bool:
    """Whether a site-packages entry belongs to a package the image lacks (or is ablate)."""
    stem = entry.split("-")[0] if entry.endswith((".dist-info", ".egg-info")) else entry
    stem = stem.removesuffix(".py").lower().replace("-", "_")
    return stem in HIDDEN or "ablate" in entry.lower()


def make_image(root: Path) -> Path:
    """A venv whose packages are this environment's less HIDDEN; returns its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    packages = root / "image-packages"
    packages.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        # .pth files run only in a site folder: this one is a plain path entry, as the
        # image's packages are to a PYTHONPATH folder
        if entry.suffix != ".pth" and not _hidden(entry.name):
            (packages / entry.name).symlink_to(entry)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "image.pth").write_text(f"{packages}\n")
    return root / "bin"


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_of_installed(name: str, out: Path) -> Path:
    """The installed distribution ``name`` zipped as a wheel (its files, its dist-info with a
    new RECORD), named with the tags of its installed WHEEL file."""
    dist = distribution(name)
    info = next(f for f in dist.files if f.name == "METADATA").parent
    tags = [
        line.split(":", 1)[1].strip()
        for line in dist.read_text("WHEEL").splitlines()
        if line.startswith("Tag:")
    ]
    parts = list(zip(*(t.split("-") for t in tags), strict=True))
    tag = "-".join(".".join(dict.fromkeys(p)) for p in parts)
    path = out / f"{dist.metadata['Name'].replace('-', '_')}-{dist.version}-{tag}.whl"
    skip = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in dist.files:
            if "__pycache__" in f.parts or ".." in f.parts or (f.parent == info and f.name in skip):
                continue
            data = f.locate().read_bytes()
            z.writestr(str(f), data)
            record.append(f"{f},sha256={_record_hash(data)},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def pins() -> dict[str, str]:
    """scripts/gpu/wheels.txt: project -> pinned version."""
    lines = (REPO / "scripts/gpu/wheels.txt").read_text().splitlines()
    pairs = [ln.split("#")[0].strip().split("==") for ln in lines]
    return {p[0]: p[1] for p in pairs if len(p) == 2}


# --- checkouts ----------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "rehearsal",
        "GIT_AUTHOR_EMAIL": "r@example.org",
        "GIT_COMMITTER_NAME": "rehearsal",
        "GIT_COMMITTER_EMAIL": "r@example.org",
    }
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return res.stdout


def send(src: Path, dest: Path, carry: tuple[str, ...] = (), git_dir: Path | None = None) -> Path:
    """What a device call sends: ``src``'s git-visible files (tracked, untracked not ignored)
    and the ``carry`` folders, copied to ``dest``; with ``git_dir``, a copy of it as ``dest``'s
    ``.git`` (the device's own, which can be older than the files)."""
    listed = git(src, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for rel in filter(None, listed.split("\0")):
        if (src / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dest / rel)
    for folder in carry:
        shutil.copytree(src / folder, dest / folder)
    if git_dir is not None:
        shutil.copytree(git_dir, dest / ".git")
    return dest


SLOW_PLUGIN = '''"""GELU's feed-forward, sleeping $GPUWIN_SLEEP_S seconds (default 0) per training
step: a run the rehearsal's first window cannot finish on any machine."""

import os
import time

import torch.nn as nn
import torch.nn.functional as F

import ablate


@ablate.register("activation", "slow_gelu")
class SlowGelu(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=cfg.bias)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x):
        if self.training:
            time.sleep(float(os.environ.get("GPUWIN_SLEEP_S", "0")))
        return self.w2(F.gelu(self.w1(x)))
'''


def write_studies(checkout: Path, base: dict) -> tuple[str, str]:
    """Two tiny studies on ``base`` with a ``tiny`` profile: one with a claim (registered
    below), one exploratory whose second run is slow. Returns (confirm, explore)."""
    studies = checkout / "studies"
    profiles = {"tiny": {"train": {"accelerator": "cpu"}}}
    # the registered study's profile pins train.stack, as the reference's gpu profile does: the
    # window gives it the probe's unstacked verdict
    pinned = {"tiny": {"train": {"accelerator": "cpu", "stack": 1}}}
    confirm = {
        "name": "gpuwin_confirm",
        "description": "rehearsal: a claim confirmed on the registered seeds",
        "claims": [
            {
                "id": "gelu-vs-relu",
                "text": "GELU reaches a lower loss than ReLU",
                "expect": "better",
                "a": {"variant": "gelu"},
                "b": {"variant": "relu"},
            }
        ],
        "base": base,
        "variants": [
            {"name": "relu", "set": {"model.activation": "relu"}},
            {"name": "gelu", "set": {"model.activation": "gelu"}},
        ],
        "seeds": [0],
        "profiles": pinned,
    }
    explore = {
        "name": "gpuwin_explore",
        "description": "rehearsal: exploratory runs, the second one slow",
        "plugins": ["./gpuwin_slow.py"],
        "base": base,
        "variants": [
            {"name": "quick", "set": {"model.activation": "gelu"}},
            {
                "name": "slow",
                "set": {"model.activation": "slow_gelu", "train.max_steps": SLOW_STEPS},
            },
        ],
        "seeds": [0],
        "profiles": profiles,
    }
    (studies / "gpuwin_slow.py").write_text(SLOW_PLUGIN)
    for study in (confirm, explore):
        (studies / f"{study['name']}.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    return "studies/gpuwin_confirm.yaml", "studies/gpuwin_explore.yaml"


# --- the environments -----------------------------------------------------------------------

_KEEP = ("LANG", "LC_ALL", "TMPDIR", "ABLATE_DEFAULT_WORKERS")


def offline_env(home: Path, **extra: str) -> dict[str, str]:
    """No index, no network (proxies on a closed port), an empty home, nothing of ablate's or
    pip's from this environment."""
    env = {k: os.environ[k] for k in _KEEP if k in os.environ}
    home.mkdir(parents=True, exist_ok=True)
    env.update(
        HOME=str(home),
        PATH="/usr/local/bin:/usr/bin:/bin",
        PIP_NO_INDEX="1",
        PIP_INDEX_URL=f"{CLOSED}/simple",
        PIP_CONFIG_FILE=os.devnull,
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        http_proxy=CLOSED,
        https_proxy=CLOSED,
        HTTP_PROXY=CLOSED,
        HTTPS_PROXY=CLOSED,
        no_proxy="",
        **extra,
    )
    return env


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300):
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    return res, time.monotonic() - t0


def window(checkout: Path, out: Path, seconds: int, image_bin: Path, studies: str, **env):
    """``scripts/gpu/window.sh OUT SECONDS`` run in ``checkout`` with the image's python3."""
    e = offline_env(checkout.parent / "home", STUDIES=studies, PROFILE="tiny", **env)
    e["PATH"] = f"{image_bin}:{e['PATH']}"
    return run(["bash", WINDOW, str(out), str(seconds)], checkout, e)


# --- reading what came back ----------------------------------------------------------------


def out_files(out: Path) -> dict[str, int]:
    return {str(p.relative_to(out)): p.stat().st_size for p in out.rglob("*") if p.is_file()}


def archive(path: Path) -> dict[str, bytes]:
    """Every file of a stores.tgz: member name -> bytes."""
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def runs_of(files: dict[str, bytes]) -> dict[str, dict]:
    """``<study>/<run id>`` -> its summary.json, from an archive's files."""
    return {
        name.rsplit("/", 1)[0]: yaml.safe_load(data)
        for name, data in files.items()
        if name.endswith("/summary.json")
    }


def metas_of(files: dict[str, bytes]) -> dict[str, dict]:
    """``<study>/<run id>`` -> the meta of its run.yaml, from an archive's files."""
    return {
        name.rsplit("/", 1)[0]: yaml.safe_load(data)["meta"]
        for name, data in files.items()
        if name.endswith("/run.yaml")
    }


def head_logged(log: str) -> str:
    """The abbreviated commit window.sh logs as the device's HEAD after the bundle."""
    found = re.search(r"\] git: HEAD ([0-9a-f]{7,}) ", log)
    assert found, f"no HEAD from the bundle in the log:\n{log}"
    return found.group(1)


def committed_nanogpt_seeds() -> list[int]:
    """The seeds of nanoGPT's own GPU runs the repository holds, which a window's next run
    keeps (reports/gpu/nanogpt_own_next.json where a window committed one, else the pilot's
    nanogpt_own.json)."""
    gpu = REPO / "reports" / "gpu"
    keep = gpu / "nanogpt_own_next.json"
    keep = keep if keep.is_file() else gpu / "nanogpt_own.json"
    return [r["seed"] for r in json.loads(keep.read_text())["runs"]]


def run_files(files: dict[str, bytes], run: str) -> dict[str, bytes]:
    return {n: d for n, d in files.items() if n.startswith(run + "/")}


# --- the rehearsal ------------------------------------------------------------------------


def cpu_checkout(tmp: Path, base: dict) -> tuple[Path, dict[str, str]]:
    """This machine: a git checkout of the repository's files with ../shared/data beside it,
    the rehearsal's studies and the first one's registration committed. Returns it and the
    environment its commands run in; leaves ``tmp/stale.git``, a copy of its ``.git`` from
    before the registration."""
    cpu = send(REPO, tmp / "cpu" / "ablate")
    shared = tmp / "cpu" / "shared" / "data"
    (shared / "tinyshakespeare").mkdir(parents=True)
    shutil.copy(SHAKESPEARE, shared / "tinyshakespeare")
    confirm, _ = write_studies(cpu, base)
    git(cpu, "init", "-q")
    git(cpu, "add", "-A")
    git(cpu, "commit", "-q", "-m", "the checkout")
    shutil.copytree(cpu / ".git", tmp / "stale.git")
    env = offline_env(tmp / "home-cpu", PYTHONPATH=str(cpu), ABLATE_DATA_DIR=str(shared))
    cmd = [sys.executable, "-m", "ablate", "register", confirm, "--profile", "tiny"]
    res, _ = run([*cmd, "--seeds", "2", "--exploratory"], cpu, env)  # 2 cannot decide it
    assert res.returncode == 0, _log(res)
    git(cpu, "add", "-A")
    git(cpu, "commit", "-q", "-m", "register gpuwin_confirm for profile tiny")
    return cpu, env


def fake_nanogpt(folder: Path) -> Path:
    """A stand-in for a nanoGPT checkout: its train.py prints nanoGPT's evaluation lines."""
    (folder / "data" / "shakespeare_char").mkdir(parents=True)
    (folder / "config").mkdir()
    (folder / "train.py").write_text(FAKE_NANOGPT)
    (folder / "data" / "shakespeare_char" / "prepare.py").write_text("")
    (folder / "config" / "train_shakespeare_char.py").write_text("")
    (folder / "out-old").mkdir()  # a checkout's old outputs: not carried
    return folder


def prepare(cpu: Path, env: dict[str, str], index: Path, nanogpt: Path):
    """``scripts/gpu/prepare.sh --nanogpt NANOGPT`` with pip's index replaced by the folder
    ``index``."""
    env = dict(env, PYTHON=sys.executable, PIP_FIND_LINKS=str(index))
    del env["ABLATE_DATA_DIR"]  # prepare.sh finds ../shared/data itself
    if platform.machine() != "x86_64":  # the index's wheels carry this machine's tags
        env["PLATFORMS"] = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    pyv = f"{sys.version_info.major}.{sys.version_info.minor}"
    res, _ = run(["bash", PREPARE, "--python-version", pyv, "--nanogpt", str(nanogpt)], cpu, env)
    assert res.returncode == 0, _log(res)
    return res


def commit_stores(cpu: Path, out: Path) -> None:
    """What docs/gpu.md says to do with a window's stores.tgz: commit it as it is."""
    (cpu / "reports/gpu/stores").mkdir(parents=True, exist_ok=True)
    shutil.copy(out / "stores.tgz", cpu / "reports/gpu/stores/stores.tgz")
    git(cpu, "add", "reports/gpu/stores/stores.tgz")
    git(cpu, "commit", "-q", "-m", "the first window's stores")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, tiny_studies):
    """prepare.sh, then two windows; what each step returned, for the tests below."""
    assert SHAKESPEARE.is_file(), "tests need tinyshakespeare in $ABLATE_DATA_DIR"
    tmp = tmp_path_factory.mktemp("gpu-window")
    image_bin = make_image(tmp / "image")
    index = tmp / "index"
    index.mkdir()
    for name in pins():
        wheel_of_installed(name, index)
    # conftest's tiny base on the registered dataset, checkpoints only at a stop
    base = tiny_studies.base(checkpoint_interval=50)
    base["data"].update(dataset="tinyshakespeare", tokenizer="char")
    cpu, env = cpu_checkout(tmp, base)
    t = {"out1": tmp / "out1", "out2": tmp / "out2"}
    t["prepare"] = prepare(cpu, env, index, fake_nanogpt(tmp / "nanogpt"))
    t["nanogpt_carried"] = sorted(p.name for p in (cpu / ".nanogpt").iterdir())
    t["registration"] = yaml.safe_load(
        (cpu / "studies/registrations/gpuwin_confirm.tiny.yaml").read_text()
    )
    t["carried"] = sorted(p.name for p in (cpu / ".whl").iterdir())
    t["git_sees"] = git(cpu, "status", "--porcelain", "--ignored=no")
    t["head1"] = git(cpu, "rev-parse", "HEAD").strip()
    t["bundled"] = git(cpu, "bundle", "list-heads", ".gpu-git/head.bundle")
    studies = "studies/gpuwin_explore.yaml studies/gpuwin_confirm.yaml"
    limits = {"GRACE": str(GRACE), "FINISH": str(FINISH)}

    # a fresh machine: the exploratory study's slow run is cut by the budget, which leaves the
    # registered study no time
    gpu1 = send(cpu, tmp / "gpu1" / "ablate", carry=(".whl", ".gpu-data", ".gpu-git"))
    slow = {"GPUWIN_SLEEP_S": FIRST_SLEEP_S, **limits}
    t["first"], t["first_s"] = window(
        gpu1, t["out1"], FIRST_SECONDS, image_bin, studies, PROBE_SECONDS="1", **slow
    )

    assert (t["out1"] / "stores.tgz").is_file(), _log(t["first"])
    # another fresh machine, with the first window's stores committed: the whole probe runs
    # in the image (its imports are the window's too), its verdict applies to the studies, and
    # the stand-in nanoGPT runs beside them; then it finishes what is left. prepare.sh again
    # (a new HEAD to bundle), with a note left uncommitted; the machine's .git is older than
    # the registration
    commit_stores(cpu, t["out1"])
    (cpu / "notes.txt").write_text("not committed\n")
    t["prepare2"] = prepare(cpu, env, index, tmp / "nanogpt")
    t["head2"] = git(cpu, "rev-parse", "HEAD").strip()
    t["stale"] = git(tmp / "stale.git", "rev-parse", "HEAD").strip()
    t["stale_registrations"] = git(tmp / "stale.git", "ls-tree", "-r", "--name-only", "HEAD")
    carry = (".whl", ".gpu-data", ".nanogpt", ".gpu-git")
    gpu2 = send(cpu, tmp / "gpu2" / "ablate", carry=carry, git_dir=tmp / "stale.git")
    t["second"], _ = window(
        gpu2, t["out2"], SECOND_SECONDS, image_bin, studies, PROBE_SECONDS=SECOND_PROBE_S, **limits
    )
    return t


def _log(res) -> str:
    return f"{res.stdout}\n{res.stderr}"


def _assert_comes_back(out: Path) -> dict[str, int]:
    """The device's limits on what comes back: <= 8 files, each <= 16 MiB, 64 MiB in all, all
    directly in OUT (this script's own layout; the device takes two folders down)."""
    files = out_files(out)
    assert len(files) <= 8, files
    assert all("/" not in name for name in files), files
    assert all(size <= 16 * MiB for size in files.values()), files
    assert sum(files.values()) <= 64 * MiB
    return files


@pytest.mark.accept
def test_prepare_carries_the_wheels_and_the_data_and_says_what_to_carry(rehearsal):
    out = rehearsal["prepare"].stdout
    assert "carry: .whl .gpu-data .nanogpt .gpu-git" in out.splitlines()
    # the bundle holds the checkout's HEAD; a clean checkout gets no warning, one with a file
    # not committed does
    assert rehearsal["bundled"].split() == [rehearsal["head1"], "HEAD"]
    assert "warning" not in out
    assert "warning: 1 uncommitted changes" in rehearsal["prepare2"].stdout
    assert rehearsal["nanogpt_carried"] == ["COMMIT", "config", "data", "train.py"]
    assert re.search(r'scripts/gpu/window\.sh "\$OUT" \d+', out)
    # the pinned wheels, typing-extensions too (the image has it at a version nobody read)
    carried = {w.split("-")[0].replace("_", "-") for w in rehearsal["carried"]}
    assert carried == set(pins()), rehearsal["carried"]
    assert rehearsal["git_sees"] == ""  # the carried folders are ignored: never committed


@pytest.mark.accept
def test_the_first_window_cuts_a_run_and_brings_back_the_stores(rehearsal):
    res, out = rehearsal["first"], rehearsal["out1"]
    log = _log(res)
    assert res.returncode == 0, log
    assert "gpuwin_explore: no registration for profile 'tiny': exploratory runs" in log
    assert "gpuwin_explore: cut by the budget" in log
    assert "gpuwin_confirm: no time left in this window" in log
    assert "probe failed" in log  # cut by PROBE_SECONDS: the studies went on
    assert "probe verdict: none (no solo row came back): the studies run solo" in log
    assert "nanoGPT" not in log  # none carried
    # the copy came without a .git: the bundle made one, at the checkout's HEAD, clean
    assert rehearsal["head1"].startswith(head_logged(log)), log
    assert "git: the tracked files are HEAD's" in log
    # the budget holds: at most the kill's grace over it
    assert rehearsal["first_s"] <= FIRST_SECONDS + GRACE, log
    files = _assert_comes_back(out)
    assert set(files) == {"stores.tgz", "window.log", "status.txt"}
    assert (out / "window.log").read_text().strip() == res.stdout.strip()
    names = archive(out / "stores.tgz")
    assert not [n for n in names if re.search(r"checkpoints|wandb|run\.lease|\.tmp$", n)]
    states = {s["variant"]: s["status"] for s in runs_of(names).values()}
    # this window's runs record the checkout's HEAD, clean (the archives committed under
    # reports/gpu/stores/ were restored beside them and come back as they were)
    metas = {run: m for run, m in metas_of(names).items() if run.startswith("gpuwin_")}
    assert metas and {(m.get("git_commit"), m.get("git_dirty")) for m in metas.values()} == {
        (rehearsal["head1"], False)
    }, metas
    assert states["quick"] == "completed" and states["slow"] != "completed", states
    # the slow run saved a checkpoint at SIGINT (which stays on the machine)
    assert re.search(r"slow,seed=0 .* interrupted .* \d+ saved", (out / "status.txt").read_text())


@pytest.mark.accept
def test_the_second_window_restores_and_finishes_without_retraining(rehearsal):
    res, out = rehearsal["second"], rehearsal["out2"]
    log = _log(res)
    assert res.returncode == 0, log
    assert "restored reports/gpu/stores/stores.tgz" in log
    assert "gpuwin_confirm: registered for profile 'tiny'" in log
    # the copy's .git was older than the registration: the bundle moved its HEAD to the
    # checkout's, so the confirmation ran (below) and records that commit
    assert rehearsal["stale"] != rehearsal["head2"]
    assert "gpuwin_confirm.tiny.yaml" not in rehearsal["stale_registrations"]
    assert rehearsal["head2"].startswith(head_logged(log)), log
    assert "git: the tracked files are HEAD's" in log
    assert "probe failed" not in log
    files = _assert_comes_back(out)
    assert {"probe.md", "probe.json", "nanogpt_own_next.json", "nanogpt.log"} <= set(files)
    assert "| pack of 4 |" in (out / "probe.md").read_text()  # the probe ran in the image
    # its verdicts, read from its JSON, are what the studies of this window ran with: the
    # unstacked one for the study whose profile pins train.stack
    probed = json.loads((out / "probe.json").read_text())["stacked"]
    verdict, unstacked = probed["verdict"], probed["unstacked"]
    assert f"probe verdict: {verdict['choice']} x{verdict['x_solo']:.2f}" in log
    assert (
        f"probe verdict unstacked (for profiles that pin train.stack): {unstacked['choice']}" in log
    )
    started = re.compile(
        r"\] ablate run (?:confirm )?studies/(gpuwin_\w+)\.yaml.*? --store runs/gpu (.*)"
    )
    runs = dict(m.groups() for m in map(started.search, log.splitlines()) if m)
    assert runs["gpuwin_explore"].startswith(f"{verdict['args']} (limit"), runs
    assert runs["gpuwin_confirm"].startswith(f"{unstacked['args']} (limit"), runs
    # nanoGPT's stand-in ran beside them: the committed runs and this one's next seed
    own = json.loads((out / "nanogpt_own_next.json").read_text())
    kept = committed_nanogpt_seeds()
    assert [r["seed"] for r in own["runs"]] == [*kept, max(kept) + 1]
    assert own["best_val_loss"][-1] == 2.25 and own["runs"][-1]["best_iter"] == 500
    assert own["runs"][-1]["nanogpt_commit"] == "unknown"  # the stand-in is no git checkout
    assert "--max_iters=2500" in (out / "nanogpt.log").read_text()
    assert "nanoGPT: done: nanogpt_own_next.json" in log
    first = archive(rehearsal["out1"] / "stores.tgz")
    second = archive(out / "stores.tgz")
    before, after = runs_of(first), runs_of(second)
    assert set(before) < set(after)
    assert {s["status"] for s in after.values()} == {"completed"}, after
    # every attempt records when its `ablate run` was launched, as the log's line stamps it
    from ablate.bench.time_to_quality import logged_launch

    trained_here = 0
    for run, summary in after.items():
        if not run.startswith("gpuwin_"):  # a shipped run restored from reports/gpu/stores/
            continue
        last = summary["attempts"][-1]
        logged = logged_launch(log, f"{run.split('/')[0]}.yaml", last["started"])
        assert 0 < last["started"] - last["launched"] < 600, (run, last)
        if logged is not None:  # trained by this window's command (not restored)
            trained_here += 1
            assert abs(last["launched"] - logged) < 1.0, (run, last, logged)
    assert trained_here
    for run, summary in before.items():
        if summary["status"] == "completed":  # not trained again: every file as it was
            assert run_files(second, run) == run_files(first, run), run
        else:  # started over on the fresh machine: one history, no repeated rows
            assert len(after[run]["attempts"]) == len(summary["attempts"]) + 1
            rows = second[f"{run}/metrics.csv"].decode().splitlines()[1:]
            keys = [tuple(r.split(",")[:2]) for r in rows]
            assert len(keys) == len(set(keys)), run
    # the confirmation trained exactly the registered seeds, marked as such
    seeds = rehearsal["registration"]["design"]["seeds"]
    confirm = [s for s in after.values() if s["study"] == "gpuwin_confirm"]
    assert sorted(s["seed"] for s in confirm) == sorted(seeds * 2)
    assert all(s.get("confirm") is True for s in confirm)
    metas = [m for run, m in metas_of(second).items() if run.startswith("gpuwin_confirm/")]
    assert len(metas) == len(confirm)
    head = rehearsal["head2"]
    assert all(m.get("git_commit") == head and m.get("git_dirty") is False for m in metas), metas
    assert all(m.get("study_commit") == head and m.get("study_dirty") is False for m in metas)


def test_the_carried_wheels_are_the_versions_tested_here():
    """The GPU runs use the pydantic the tests pass with: scripts/gpu/wheels.txt pins what this
    environment has installed (update the pins when the environment moves)."""
    assert {name: version(name) for name in pins()} == pins()


def test_a_window_without_the_wheels_stops_at_once_naming_what_is_missing(tmp_path):
    image_bin = make_image(tmp_path / "image")
    checkout = send(REPO, tmp_path / "gpu" / "ablate")
    res, _ = window(checkout, tmp_path / "out", 60, image_bin, "studies/architecture.yaml")
    assert res.returncode == 3, _log(res)
    assert "missing modules: pydantic" in res.stdout
    assert "cannot run ablate" in res.stdout
    assert set(out_files(tmp_path / "out")) == {"window.log"}  # nothing trained, nothing packed


def _verdict_args(out: Path, pin: str, user_args: str = "") -> tuple[str, str]:
    """window.sh's own ``read_verdict`` and ``study_args`` (cut from the script) on
    ``out/probe.json``: its log lines and the arguments a study whose profile sets train.stack
    to ``pin`` gets."""
    text = (REPO / WINDOW).read_text()
    body = [
        re.search(rf"^{name}\(\) {{\n.*?^}}$", text, re.S | re.M).group(0)
        for name in ("read_verdict", "study_args")
    ]
    script = "\n".join(
        [f'OUT={out}; PYTHON={sys.executable}; USER_ARGS="{user_args}"', 'log() { echo "$*"; }']
        + body
        + ["read_verdict", f'echo "args: $(study_args {pin})"']
    )
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    log, args = res.stdout.rsplit("args: ", 1)
    return log, args.strip()


def test_a_profile_that_pins_the_stack_gets_the_unstacked_verdict(tmp_path):
    """The reference's gpu profile pins train.stack: 1. The probe's verdict may be stack, which
    must not leave it training its runs one after another: it gets the best unstacked path."""
    (tmp_path / "probe.json").write_text(
        json.dumps(
            {
                "stacked": {
                    "verdict": {"choice": "stack", "x_solo": 3.5, "args": "--set train.stack=auto"},
                    "unstacked": {
                        "choice": "pack",
                        "x_solo": 2.4,
                        "args": "--workers 4 --runs-per-gpu 4",
                    },
                }
            }
        )
    )
    log, args = _verdict_args(tmp_path, "off")
    assert args == "--set train.stack=auto"
    assert "probe verdict: stack x3.50 --set train.stack=auto" in log
    assert "unstacked (for profiles that pin train.stack): pack x2.40 --workers 4" in log
    assert _verdict_args(tmp_path, "1")[1] == "--workers 4 --runs-per-gpu 4"
    assert _verdict_args(tmp_path, "1", "--workers 2")[1] == "--workers 2"  # ABLATE_ARGS wins
    (tmp_path / "probe.json").write_text(json.dumps({"stacked": {"verdict": None}}))
    log, args = _verdict_args(tmp_path, "1")
    assert args == "" and "probe verdict: none" in log


def test_window_and_prepare_reject_bad_arguments(tmp_path):
    env = offline_env(tmp_path / "home")
    for args, why in [
        ([WINDOW], "scripts/gpu/window.sh OUT [SECONDS]"),
        ([WINDOW, str(tmp_path), "ten"], "whole number"),
        ([PREPARE, "--python-version", "3"], "must be 3.X"),
        ([PREPARE, "--frobnicate"], "unknown argument"),
    ]:
        res, _ = run(["bash", *args], REPO, env)
        assert res.returncode == 2 and why.lower() in (res.stdout + res.stderr).lower(), args
    res, _ = run(["bash", WINDOW, str(tmp_path)], REPO, dict(env, STUDIES="studies/nope.yaml"))
    assert res.returncode == 2 and "no such study file" in res.stderr


# --- ablate without wandb (the GPU image has none) ------------------------------------------


@pytest.fixture
def wandb_not_installed(monkeypatch):
    """``import wandb`` (and of any part of it) fails as for a package that is not installed."""
    for name in [n for n in sys.modules if n == "wandb" or n.startswith("wandb.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    import ablate.tracking.runs

    # "W&B could not start" is said once per process: an earlier test may have said it
    monkeypatch.setattr(ablate.tracking.runs, "_warned", False)


@pytest.mark.parametrize("stack", ["off", "2"])
def test_runs_with_tracking_on_train_without_wandb(
    wandb_not_installed, make_study, tmp_path, caplog, stack
):
    """W&B on (offline) and no wandb: each run (alone, or a stacked group's members) warns that
    W&B could not start and trains to the end with everything in the store."""
    from ablate.execution.runner import run_study

    with pytest.raises(ImportError):
        import wandb  # noqa: F401
    overrides = {"tracking.wandb": True, "tracking.mode": "offline", "train.stack": stack}
    study = make_study("nowandb", overrides, grid={"model.activation": ["gelu"]}, seeds=[0, 1])
    results = run_study(study, store=tmp_path / "store", progress=False)
    assert [r["status"] for r in results] == ["completed", "completed"]
    assert [r.get("stack", {}).get("members") for r in results] == [
        None if stack == "off" else 2
    ] * 2
    assert "W&B could not start" in caplog.text
