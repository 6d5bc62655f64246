"""Which study a report or a decision is about: a study YAML or a name in the store, and the
study file of a name (:func:`resolve_studies`)."""

from __future__ import annotations

from pathlib import Path

from ablate.config import ConfigError
from ablate.store import RunStore
from ablate.study.spec import read_study_yaml


def _is_yaml_arg(arg: str) -> bool:
    return arg.endswith((".yaml", ".yml")) or Path(arg).is_file()


def no_runs_error(store: Path) -> ConfigError:
    return ConfigError("no runs in the store (run `ablate run STUDY.yaml` first)", source=store)


def shipped_yaml(name: str, folder: Path = Path("studies"), file: str = "") -> Path | None:
    """``studies/<name>.yaml`` (``folder/file``) when it exists and names this study
    (description, run count)."""
    path = folder / (file or f"{name}.yaml")
    if not path.is_file():
        return None
    try:
        data = read_study_yaml(path)
    except ConfigError:
        return None
    return path if str(data.get("name") or path.stem) == name else None


def recorded_yaml(name: str, store: Path) -> Path | None:
    """The study file the runs of ``name`` recorded (``study_file``: its absolute path when they
    ran) when it still exists and names this study; the most recorded one first."""
    seen: dict[str, int] = {}
    for run in RunStore(store).runs(name):
        try:
            recorded = run.read_run()["meta"].get("study_file")
        except Exception:  # noqa: BLE001 - a damaged run is the report's to list, not ours
            continue
        if isinstance(recorded, str):
            seen[recorded] = seen.get(recorded, 0) + 1
    for path in sorted(seen, key=seen.get, reverse=True):
        p = Path(path)
        if p.is_file() and shipped_yaml(name, p.parent, p.name) is not None:
            return p
    return None


def study_yaml(name: str, store: Path) -> Path | None:
    """The study file of a study given by name: the one its runs recorded (wherever it lives:
    its registration and git history are beside it), else ``studies/<name>.yaml`` under the
    working directory when it names this study, else the copy ``ablate run`` kept in the
    store (claims and description, but no registration to prove)."""
    kept = RunStore(store).spec_file(name)
    found = recorded_yaml(name, store) or shipped_yaml(name)
    return found or (kept if kept.is_file() else None)


def resolve_studies(args: list[str], store: Path) -> list[tuple[str, Path | None]]:
    """``(study name, study YAML or None)`` for each argument; every study when ``args`` is empty.

    An argument is a study YAML when it ends in ``.yaml``/``.yml`` or is an existing file (its
    ``name:``, default the file stem, names the study), else a study name in the store
    (:func:`study_yaml` finds its file).
    """
    present = RunStore(store).studies()
    if not present:
        raise no_runs_error(store)
    if not args:
        return [(s, study_yaml(s, store)) for s in present]
    out: list[tuple[str, Path | None]] = []
    for arg in args:
        yaml_path = Path(arg) if _is_yaml_arg(arg) else None
        name = arg
        if yaml_path is not None:
            name = str(read_study_yaml(yaml_path).get("name") or yaml_path.stem)
        else:
            yaml_path = study_yaml(name, store)
        if name not in present:
            raise ConfigError(
                f"no runs for study '{name}' in the store; studies present: {', '.join(present)}",
                source=store,
            )
        out.append((name, yaml_path))
    return out
