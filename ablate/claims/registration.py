"""A study's registration: its claims and confirmation design, fixed in a committed file.

``ablate register STUDY`` writes ``registrations/<study>.yaml`` beside the study YAML; the user
commits it before any confirmation run. Per claim it records what is tested (text, metric,
test, margin and where the margin comes from, the claim's fingerprint); once for the study the
confirmation design fixed in advance (the profile, ``fixed``: which seeds; or ``sequential``:
K looks, seeds per look, the alpha spending). ``ablate run confirm`` / ``ablate run until-decided``
trains only under a registration that exists, matches the study and is committed
(:func:`require_registration`); the report proves the order from git (:func:`git_versions`:
the commit that wrote the registration, its time, against the first confirmation run's start).
Changing the design after the data (more seeds, other seeds) means a new registration: a new
commit of the file, listed with the earlier ones in the report.

**α over attempts.** Each claim has one α budget over all its attempts; the file's
``attempts:`` (:class:`Spending`) says how a claim it registers *first* spreads it (``once``,
``equal`` over ``max_attempts``, ``halving``), and each claim entry records the ``attempt`` it
is and the ``alpha`` share it spends (:mod:`ablate.claims.budget`). ``exploratory: true``
registers no share: its outcomes are exploratory. A file from before budgets has neither and
reads as ``once``: it tested its attempt at the full α and planned no other.

**What defines the runs is pinned** (:func:`inputs_record`, the file's ``inputs:``): the study
file and each plugin file (path in their repository, sha256), each dataset's content key, and
a digest of the ids of the planned confirmation runs (a run id hashes its whole config, its
plugins' sources and its data, so any change to what the runs are changes it), with one
``digest`` over all of it. ``run confirm`` refuses in one line when the study file or a plugin is
not committed, or when anything pinned differs now (:func:`inputs_problem`). A registration
written before inputs were pinned has no ``inputs:`` and keeps its original meaning: it pinned
its claims (fingerprints) and design, which are checked as before, "digest not pinned"; the
report says whether the study file changed since its commit, without undoing it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ablate.claims.spec import ALPHA, FITTED, TREND, Claim, claim_fingerprint
from ablate.errors import ConfigError

FOLDER = "registrations"
DESIGNS = ("fixed", "sequential")


BASE_PROFILE = "cpu"
"""The profile whose registration is named after the study alone (the first registrations)."""


RULES = ("once", "equal", "halving")
SPENDING_KEY = "attempts"
"""The registration's key for its :class:`Spending` (absent: a registration from before
budgets, read as ``once``)."""


@dataclass(frozen=True)
class Spending:
    """How a claim's α is spread over its attempts (:mod:`ablate.claims.budget`): ``once``
    (its first decided attempt spends α), ``equal`` (each of ``max_attempts`` spends α/K) or
    ``halving`` (attempt k spends α/2^k)."""

    rule: str = "once"
    max_attempts: int | None = None
    """``equal``: the K attempts α is split over."""

    def share(self, k: int, alpha: float = ALPHA) -> float:
        """The α attempt ``k`` (1, 2, ...) of the claim spends; 0 when none is left."""
        if k < 1:
            return 0.0
        if self.rule == "halving":
            return alpha / 2**k
        limit = self.max_attempts if self.rule == "equal" and self.max_attempts else 1
        return alpha / limit if k <= limit else 0.0

    def text(self, alpha: float = ALPHA) -> str:
        if self.rule == "halving":
            return f"attempt k at α/2^k ({self.share(1, alpha):.3g}, {self.share(2, alpha):.3g}, …)"
        if self.rule == "equal" and self.max_attempts and self.max_attempts > 1:
            k = self.max_attempts
            return f"at most {k} attempts at α/{k}={alpha / k:.3g} each"
        return f"one attempt at α={alpha:g}"

    def record(self) -> dict[str, Any]:
        """The registration's ``attempts:`` entry."""
        out: dict[str, Any] = {"rule": self.rule}
        if self.rule == "equal":
            out["max_attempts"] = self.max_attempts
        return out


def parse_spending(raw: Any, source: Any = None) -> Spending:
    """A registration's ``attempts:`` entry (module doc); ``ConfigError`` naming it when
    malformed."""
    if not isinstance(raw, dict) or raw.get("rule") not in RULES:
        raise ConfigError(f"needs rule: one of {', '.join(RULES)}", key=SPENDING_KEY, source=source)
    k = raw.get("max_attempts")
    if raw["rule"] == "equal" and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
        raise ConfigError(
            f"rule equal needs max_attempts: a whole number >= 1, got {k!r}",
            key=f"{SPENDING_KEY}.max_attempts",
            source=source,
        )
    return Spending(raw["rule"], k if raw["rule"] == "equal" else None)


def spending_option(text: str) -> Spending:
    """``ablate register --attempts``: ``1`` (once, the default), ``K`` (at most K attempts at
    α/K each) or ``halving``."""
    word = str(text).strip().lower()
    if word == "halving":
        return Spending("halving")
    try:
        k = int(word)
    except ValueError:
        k = 0
    if k < 1:
        raise ConfigError(
            f"must be a whole number of attempts (>= 1) or halving, got {text!r}", key="--attempts"
        )
    return Spending("once") if k == 1 else Spending("equal", k)


def registration_path(study_path: str | Path, profile: str | None = None) -> Path:
    """``studies/x.yaml`` -> ``studies/registrations/x.yaml`` for the cpu profile (or a study
    without profiles), ``x.<profile>.yaml`` for another: a profile's runs are new data, with a
    design of their own, registered before they start. A folder of its own, so that
    ``studies/*.yaml`` stays the studies."""
    p = Path(study_path)
    name = p.name if profile in (None, BASE_PROFILE) else f"{p.stem}.{profile}{p.suffix}"
    return p.parent / FOLDER / name


def test_name(claim: Claim) -> str:
    """The test that decides ``claim``, in words (as the report computes it)."""
    if claim.expect in TREND:
        # trend's statistics import scipy and pandas: not at planning time (start-up)
        from ablate.claims.trend import TEST as TREND_TEST

        return f"{TREND_TEST} (a slope per seed over the rungs)" + (
            " + TOST" if claim.expect == "flat" else ""
        )
    if claim.by:
        return "paired t of the per-seed difference of differences" + (
            " + TOST" if claim.expect == "equal" else ""
        )
    if claim.parts:
        return "intersection-union of one-sided one-sample t-tests (p = the larger p)"
    if claim.metric in FITTED or claim.value is not None:
        return f"one-sample t of the per-seed {claim.metric} against {claim.value:g}"
    if claim.expect == "diverges":
        return "count of diverged runs"
    if len(claim.external) == 1:
        return f"one-sample t against the published value {claim.external[0]:g}"
    if claim.external:
        return "Welch t against published per-seed values"
    kind = "TOST + paired t" if claim.expect == "equivalent" else "paired t (by seed)"
    return f"{kind}; Welch when the arms' seeds differ"


def claim_entry(claim: Claim, default_margin: float) -> dict[str, Any]:
    """What the registration records for one claim."""
    margin = claim.margin if claim.margin is not None else default_margin
    return {
        "id": claim.id,
        "text": claim.text,
        "metric": claim.metric,
        "expect": claim.expect,
        "test": test_name(claim),
        "margin": margin,
        "margin_source": claim.margin_source or "software default (no stated source)",
        "fingerprint": claim_fingerprint(claim, default_margin),
    }


def fresh_seeds(n: int, taken: set[int], above: int) -> list[int]:
    """The first ``n`` integers greater than ``above`` that are not in ``taken`` (the seeds a
    design draws: never one the study has used)."""
    out, s = [], above
    while len(out) < n:
        s += 1
        if s not in taken:
            out.append(s)
    return out


def build_design(
    seeds: list[int], arms: list[str], looks: int | None = None, note: str = ""
) -> dict[str, Any]:
    """A confirmation design: ``seeds`` for every variant of ``arms``, fixed in advance; with
    ``looks``, a sequential design of up to ``looks`` looks of ``len(seeds)`` seeds each,
    O'Brien-Fleming alpha spending, ``seeds`` its first look's. ``note``: why, in words."""
    if looks is None:
        design: dict[str, Any] = {"kind": "fixed", "seeds": list(seeds)}
    else:
        from ablate.claims.sequential import SPENDING  # scipy: not on `ablate run`'s way in

        design = {
            "kind": "sequential",
            "max_looks": looks,
            "seeds_per_look": len(seeds),
            "spending": SPENDING,
            "seeds": list(seeds),
            "later_looks": "the next integers no run of the study used",
        }
    design["arms"] = list(arms)
    if note:
        design["note"] = " ".join(note.split())
    return design


def build_registration(
    name: str,
    profile: str | None,
    claims: list[Claim],
    margin: float,
    design: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    spending: Spending | None = None,
    exploratory: bool = False,
) -> dict[str, Any]:
    """The registration record (module doc); ``design`` is ``{"kind": "fixed", "seeds": [...]}``
    or ``{"kind": "sequential", "max_looks": K, "seeds_per_look": s, "spending": ...}``;
    ``inputs``: :func:`inputs_record` of the confirmation runs it registers; ``spending``: how
    the α of each claim it registers first is spread over attempts (:class:`Spending`);
    ``exploratory``: it registers no α share, its outcomes are exploratory."""
    record: dict[str, Any] = {
        "study": name,
        "profile": profile,
        "alpha": ALPHA,
        "correction": f"Holm over the study's {len(claims)} claims, one family per test kind",
    }
    if exploratory:
        record["exploratory"] = True
    else:
        record[SPENDING_KEY] = (spending or Spending()).record()
    record["design"] = design
    if inputs is not None:
        record[INPUTS] = inputs
    record["claims"] = [claim_entry(c, margin) for c in claims]
    return record


INPUTS = "inputs"
NOT_PINNED = "digest not pinned (registered before ablate pinned the inputs)"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def repo_path(path: Path) -> str:
    """``path`` relative to the root of the git repository holding it (its name outside git):
    how the registration names a file, whatever the current directory."""
    top = _git(Path(path).resolve(), "rev-parse", "--show-toplevel")
    if top is None or top.returncode != 0:
        return Path(path).name
    return Path(path).resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()


def runs_digest(run_ids: list[str]) -> str:
    """sha256 over the sorted run ids (one a line)."""
    return hashlib.sha256("\n".join(sorted(map(str, run_ids))).encode()).hexdigest()


def inputs_record(
    study_file: Path, plugin_files: list[Path], data: dict[str, str], run_ids: list[str]
) -> dict[str, Any]:
    """What defines the confirmation runs (module doc): the study file and plugins (path in
    their repository, sha256), ``data`` (dataset -> content key), the runs' digest and count,
    and one ``digest`` over all of it."""
    record: dict[str, Any] = {
        "study": {"file": repo_path(study_file), "sha256": sha256_file(study_file)},
        "plugins": [{"file": repo_path(p), "sha256": sha256_file(p)} for p in plugin_files],
        "data": [{"dataset": k, "key": v} for k, v in sorted(data.items())],
        "runs": {"count": len(run_ids), "sha256": runs_digest(run_ids)},
    }
    blob = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return {"digest": hashlib.sha256(blob.encode()).hexdigest(), **record}


def inputs_problem(registered: dict[str, Any] | None, now: dict[str, Any]) -> str | None:
    """Why the inputs ``now`` are not the ``registered`` ones (None when they are, or when the
    registration pinned none)."""
    if not isinstance(registered, dict):
        return None
    if registered.get("digest") == now["digest"]:
        return None
    was, cur = registered.get("study") or {}, now["study"]
    if was.get("sha256") != cur["sha256"]:
        return (
            f"{cur['file']} differs from the registered one (sha256 {str(was.get('sha256'))[:12]} "
            f"registered, {cur['sha256'][:12]} now)"
        )
    pinned = {p.get("file"): p.get("sha256") for p in registered.get("plugins") or []}
    for p in now["plugins"]:
        if pinned.get(p["file"]) != p["sha256"]:
            return f"plugin {p['file']} differs from the registered one (or was not registered)"
    if set(pinned) - {p["file"] for p in now["plugins"]}:
        return f"registered plugin(s) {', '.join(sorted(set(pinned)))} are not used now"
    data = {d.get("dataset"): d.get("key") for d in registered.get("data") or []}
    for d in now["data"]:
        if data.get(d["dataset"]) != d["key"]:
            return f"dataset {d['dataset']} differs from the registered one ({d['key']} now)"
    runs = registered.get("runs") or {}
    return (
        f"the planned confirmation runs differ from the registered ones ({runs.get('count')} "
        f"registered, {now['runs']['count']} now, other ids: a config, plugin or dataset changed)"
    )


def files_problem(files: list[Path]) -> str | None:
    """The first of ``files`` (the study file, its plugins) that is not committed as it is, in
    words; None when all are (or when they are outside git: the order is then not provable,
    which the report says)."""
    for f in files:
        problem = commit_problem(Path(f))
        if problem and problem != "not a git checkout":
            return f"{Path(f).name} {problem}: a confirmation runs from committed files only"
    return None


def design_text(design: dict | None) -> str:
    """A registered design in words: ``fixed: 3 seeds per arm (5, 6, 7)`` or the sequential
    design's looks, spending and first seeds."""
    if not isinstance(design, dict):
        return "design unreadable"
    seeds = ", ".join(str(s) for s in design.get("seeds") or [])
    if design.get("kind") == "sequential":
        return (
            f"sequential: up to {design.get('max_looks')} looks of {design.get('seeds_per_look')}"
            f" seeds, {design.get('spending')} spending, first seeds {seeds}"
        )
    return f"fixed: {len(design.get('seeds') or [])} seeds per arm ({seeds})"


def write_registration(path: Path, record: dict[str, Any]) -> None:
    """Write ``record`` to ``path`` (through a temporary file: never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml.safe_dump(record, sort_keys=False, allow_unicode=True, width=100))
    tmp.replace(path)


def read_registration(path: Path) -> dict[str, Any] | None:
    """The registration at ``path``; None when there is none; ``ConfigError`` when malformed."""
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"cannot read it ({err})".splitlines()[0], source=path) from None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise ConfigError("not a registration (needs claims: [...])", source=path)
    design = data.get("design")
    if not isinstance(design, dict) or design.get("kind") not in DESIGNS:
        raise ConfigError(f"design.kind must be one of {', '.join(DESIGNS)}", source=path)
    if data.get(SPENDING_KEY) is not None:
        parse_spending(data[SPENDING_KEY], path)
    return data


def mismatch(
    record: dict[str, Any], name: str, profile: str | None, claims: list[Claim], margin: float
) -> str | None:
    """Why ``record`` does not register this study's claims as they are now; None if it does."""
    if record.get("study") != name:
        return f"registers study {record.get('study')!r}, not {name!r}"
    if record.get("profile") != profile:
        return f"was registered for profile {record.get('profile')!r}, not {profile!r}"
    have = {c.get("id"): c.get("fingerprint") for c in record["claims"] if isinstance(c, dict)}
    now = {c.id: claim_fingerprint(c, margin) for c in claims}
    if set(have) != set(now):
        return f"registers claims {sorted(have)}, the study has {sorted(now)}"
    edited = [cid for cid, fp in now.items() if have[cid] != fp]
    if edited:
        return f"claim(s) {', '.join(edited)} changed since registration"
    texts = {c.get("id"): " ".join(str(c.get("text")).split()) for c in record["claims"]}
    reworded = [c.id for c in claims if texts.get(c.id) != " ".join(c.text.split())]
    if reworded:  # a new text is a new claim (ablate.claims.budget)
        return f"the text of claim(s) {', '.join(reworded)} changed since registration"
    return None


def _git(path: Path, *args: str) -> subprocess.CompletedProcess | None:
    """``git -C <path's folder> args``; None when git is missing."""
    try:
        return subprocess.run(
            ["git", "-C", str(path.parent), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def commit_problem(path: Path) -> str | None:
    """Why ``path`` is not committed as it is (None when it is); ``"not a git checkout"`` when
    the folder is in none (then the order can be stated, not proven)."""
    inside = _git(path, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0 or inside.stdout.strip() != "true":
        return "not a git checkout"
    tracked = _git(path, "ls-files", "--error-unmatch", path.name)
    if tracked is None or tracked.returncode != 0:
        return "is not committed (git add and commit it first)"
    clean = _git(path, "diff", "--quiet", "HEAD", "--", path.name)
    if clean is None or clean.returncode != 0:
        return "has changes not committed (commit them first)"
    return None


@dataclass(frozen=True)
class Version:
    """One committed version of a registration file."""

    commit: str
    time: float
    """Committer time (unix)."""
    subject: str
    design: dict[str, Any] | None
    """That version's design (None when it cannot be read)."""
    text: str = ""
    """The file as committed."""


def git_versions(path: Path) -> list[Version]:
    """Every committed version of the registration at ``path``, oldest first (empty outside
    git or when never committed)."""
    if not path.parent.is_dir():
        return []
    log = _git(path, "log", "--follow", "--name-only", "--format=@@%H %ct %s", "--", path.name)
    if log is None or log.returncode != 0:
        return []
    entries = []  # (commit, time, subject, the file's path at that commit)
    for line in log.stdout.splitlines():
        if line.startswith("@@"):
            commit, t, *subject = line[2:].split(" ", 2)
            entries.append([commit, t, " ".join(subject), ""])
        elif line.strip() and entries:
            entries[-1][3] = line.strip()
    out = []
    for commit, t, subject, name in reversed(entries):
        shown = _git(path, "show", f"{commit}:{name}")
        text = shown.stdout if shown is not None and shown.returncode == 0 else ""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        design = data.get("design") if isinstance(data, dict) else None
        out.append(Version(commit, float(t), subject, design, text))
    return out


def head_commit(path: Path) -> str | None:
    """The commit that registered the file as it is now, if committed: the earliest of the
    latest versions with its content (a move or a revert is no new registration)."""
    versions = git_versions(path)
    if not versions or commit_problem(path) is not None:
        return None
    now, commit = path.read_text(), None
    for v in reversed(versions):
        if v.text != now:
            break
        commit = v.commit
    return commit or versions[-1].commit


InputsFn = Callable[[list[int]], tuple[dict[str, Any], list[Path]]]
"""Registered seeds -> (the inputs that define those confirmation runs now, the files they
come from): computed where the study is planned (:mod:`ablate.execution.confirm`)."""


def require_registration(
    study_path: Path,
    name: str,
    profile: str | None,
    claims: list[Claim],
    margin: float,
    inputs: InputsFn | None = None,
) -> tuple[dict[str, Any], str]:
    """(the registration, the commit that holds it, or "" outside git) for a confirmation run;
    ``ConfigError`` (one line) when it is missing, does not match, is not committed, or (with
    ``inputs``: registered seeds -> (the inputs now, the files they come from)) when the study
    file or a plugin is not committed or anything it pinned differs now."""
    path = registration_path(study_path, profile)
    record = read_registration(path)
    if record is None:
        raise ConfigError(
            f"no registration: run `ablate register {study_path}` and commit {path.name} "
            "first (or --unregistered: the outcome is then exploratory)",
            source=path,
        )
    why = mismatch(record, name, profile, claims, margin)
    if why:
        raise ConfigError(f"{why}: register again and commit it", source=path)
    problem = commit_problem(path)
    if problem == "not a git checkout":
        return record, ""
    if problem:
        raise ConfigError(problem, source=path)
    if inputs is not None:
        now, files = inputs([int(s) for s in record["design"].get("seeds") or []])
        problem = files_problem(files)
        if problem:
            raise ConfigError(problem, source=study_path)
        problem = inputs_problem(record.get(INPUTS), now)
        if problem:
            raise ConfigError(f"{problem}: register again and commit it", source=path)
    return record, head_commit(path) or ""


def fixed_seeds(
    study_path: Path,
    name: str,
    profile: str | None,
    claims: list[Claim],
    margin: float,
    inputs: InputsFn | None = None,
) -> tuple[list[int], str]:
    """(the registered seeds, the registration commit or "" outside git) of a fixed design
    (``ablate run confirm``); ``ConfigError`` when the registration is missing, does not
    match, is not committed, registers a sequential design, or its inputs differ
    (:func:`require_registration`)."""
    record, commit = require_registration(study_path, name, profile, claims, margin, inputs)
    if record["design"]["kind"] != "fixed":
        raise ConfigError(
            "registers a sequential design: run it with ablate run until-decided",
            source=registration_path(study_path, profile),
        )
    return [int(s) for s in record["design"].get("seeds") or []], commit


def sequential_seeds(
    study_path: Path,
    name: str,
    profile: str | None,
    claims: list[Claim],
    margin: float,
    max_looks: int,
    seeds_per_look: int | None,
    inputs: InputsFn | None = None,
) -> tuple[list[int], str]:
    """(the registered first-look seeds, the registration commit) of a sequential design
    (``ablate run until-decided``), checked against ``--max-looks`` / ``--seeds-per-look``;
    ``ConfigError`` when it is not the one registered."""
    record, commit = require_registration(study_path, name, profile, claims, margin, inputs)
    design, path = record["design"], registration_path(study_path, profile)
    if design["kind"] != "sequential":
        raise ConfigError(
            "registers a fixed design: train it with `ablate run confirm`", source=path
        )
    for key, value in (("max_looks", max_looks), ("seeds_per_look", seeds_per_look)):
        if value is not None and design.get(key) != value:
            raise ConfigError(
                f"registers {key} {design.get(key)}, not {value}: a new design needs a new "
                "registration",
                source=path,
            )
    return [int(s) for s in design.get("seeds") or []], commit or "uncommitted"
