"""Finding, verifying and splitting the raw text.

``data.dataset`` is a registered name (``DATASETS``) or a path to a local UTF-8 text file.
A registered name wins over a same-named file in the working directory. It resolves to:

1. ``$ABLATE_DATA_DIR/<name>/<filename>`` if that exists (a shared, read-only data folder);
2. else ``<cache>/<name>/<filename>``, cache = ``$ABLATE_CACHE_DIR`` or ``~/.cache/ablate``;
3. else a download into the cache: streamed to a temp file in the same folder, checked
   against the spec's sha256, then atomically renamed into place, so the cache never holds a
   partial or wrong file.

A found file whose sha256 differs from the spec is corrupt data: a ``ConfigError`` for
``data.dataset`` (in the cache, where we put it, it is instead deleted and downloaded again).
One that is nowhere and cannot be downloaded is one line naming every folder searched, with
``$ABLATE_DATA_DIR`` as it was given and where that led (a relative path resolves against
the working directory, so a ``../shared/data`` from another folder points elsewhere).
Hashing 1 MB takes milliseconds, so files are hashed on every resolve, memoised per process
by (path, size, mtime) - no sidecar stamp files to go stale.

Splits are contiguous and deterministic: the first ``1 - val - test`` fraction is train, then
val, then test, as in nanoGPT (train = first 90% of the characters, val = the last 10%).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ablate.config import ConfigError

DATA_DIR_ENV = "ABLATE_DATA_DIR"
CACHE_DIR_ENV = "ABLATE_CACHE_DIR"
KEY = "data.dataset"


class DownloadError(ConfigError):
    """A dataset could not be fetched (no network, no such URL): :func:`download`'s error."""


@dataclass(frozen=True)
class DatasetSpec:
    """Where a registered dataset comes from; ``url`` can be replaced (``dataclasses.replace``)."""

    url: str
    sha256: str
    filename: str
    description: str = ""


DATASETS: dict[str, DatasetSpec] = {
    "tinyshakespeare": DatasetSpec(
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        filename="input.txt",
        description="Tiny Shakespeare (char-rnn), 1,115,394 characters",
    ),
}


def data_dir() -> Path | None:
    """``$ABLATE_DATA_DIR`` (relative to the working directory), or None when unset/empty."""
    value = os.environ.get(DATA_DIR_ENV)
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """``$ABLATE_CACHE_DIR``, else ``~/.cache/ablate`` (downloads and trained BPE tokenizers)."""
    value = os.environ.get(CACHE_DIR_ENV)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "ablate"


_HASHES: dict[tuple[str, int, int], str] = {}


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, memoised per (resolved path, size, mtime_ns)."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def download(url: str, dest: str | Path, sha256: str, *, timeout: float = 60.0) -> Path:
    """Fetch ``url`` to ``dest`` only if its sha256 matches; never leaves a partial file.

    Streams into a temp file next to ``dest`` (same filesystem, so ``os.replace`` is an atomic
    rename), hashing as it goes. Any failure deletes the temp file; a checksum mismatch or a
    network error is a ``ConfigError`` for ``data.dataset``.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as f:
                request = urllib.request.Request(url, headers={"User-Agent": "ablate"})
                with urllib.request.urlopen(request, timeout=timeout) as resp:
                    for chunk in iter(lambda: resp.read(1 << 16), b""):
                        h.update(chunk)
                        f.write(chunk)
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
            raise DownloadError(
                f"could not download {url} ({getattr(err, 'reason', err)}); "
                f"put the file at {dest} or under ${DATA_DIR_ENV}",
                key=KEY,
            ) from None
        got = h.hexdigest()
        if got != sha256:
            raise ConfigError(
                f"checksum mismatch for {url}: sha256 {got}, expected {sha256}", key=KEY
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)  # no-op after a successful rename
    return dest


def resolve_dataset(name_or_path: str | Path) -> Path:
    """The local file for ``data.dataset``: a registered name (see module doc) or a file path."""
    name = str(name_or_path)
    spec = DATASETS.get(name)
    if spec is not None:
        return _resolve_registered(name, spec)
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if path.exists():
        raise ConfigError(f"{path} is not a regular file", key=KEY)
    raise ConfigError(
        f"unknown dataset {name!r}: no such file ({_where(path)}), and not a registered "
        f"dataset (registered: {', '.join(sorted(DATASETS))})",
        key=KEY,
    )


def _where(path: Path) -> str:
    """``path`` made absolute, and what is missing: the file, or the first folder on its way."""
    full = Path(os.path.abspath(path))
    missing = full
    while not missing.parent.is_dir():
        missing = missing.parent
    return f"{full}: no such file" if missing == full else f"{full}: no folder {missing}"


def fetch_registered(names: Iterable[str], source: Path | None = None) -> None:
    """Fetch (or find, verified) each registered dataset among ``names`` once, before any run
    needs it: without a network (or with a bad checksum) that is one ``ConfigError`` naming
    ``source`` (the study), not every run failing with it. ``ablate run`` and ``ablate plan``
    both check this way."""
    for name in sorted(set(names) & set(DATASETS)):
        try:
            resolve_dataset(name)
        except ConfigError as err:
            raise ConfigError(err.message, key=err.key, source=source) from None


def local_copy(name: str) -> Path | None:
    """Where registered dataset ``name`` already is on this machine (not yet verified), or
    ``None`` when ``resolve_dataset`` would have to download it."""
    spec = DATASETS[name]
    shared = data_dir()
    for path in ([shared / name / spec.filename] if shared else []) + [
        cache_dir() / name / spec.filename
    ]:
        if path.is_file():
            return path
    return None


def _resolve_registered(name: str, spec: DatasetSpec) -> Path:
    shared = data_dir()
    if shared is not None:
        path = shared / name / spec.filename
        if path.is_file():
            got = sha256_file(path)
            if got != spec.sha256:
                raise ConfigError(
                    f"{path} is corrupt or a different file: sha256 {got}, expected {spec.sha256}",
                    key=KEY,
                )
            return path
    cached = cache_dir() / name / spec.filename
    if cached.is_file():
        if sha256_file(cached) == spec.sha256:
            return cached
        cached.unlink()  # our own cache entry went bad (edited, disk error): fetch it again
    try:
        return download(spec.url, cached, spec.sha256)
    except DownloadError as err:
        raise ConfigError(_not_found(name, spec, cached, err.message), key=KEY) from None


def _not_found(name: str, spec: DatasetSpec, cached: Path, failure: str) -> str:
    """Where a registered dataset was looked for, and what to do: one line."""
    wanted = f"{name}/{spec.filename}"
    raw = os.environ.get(DATA_DIR_ENV)
    if raw:
        shared = f"${DATA_DIR_ENV}={raw} ({_where(Path(raw).expanduser() / wanted)})"
    else:
        shared = f"${DATA_DIR_ENV} (not set)"
    how = failure.split(";")[0]
    return (
        f"dataset {name!r} is not on this machine: looked for {wanted} under {shared} and in "
        f"the cache ({_where(cached)}), then {how}; point {DATA_DIR_ENV} at the folder that "
        f"holds {wanted} (an absolute path), or put the file at {cached}"
    )


def read_text(path: str | Path) -> str:
    """The file's text, decoded as strict UTF-8 (no newline translation: exact char count).

    Raises ``ConfigError`` for ``data.dataset`` when unreadable, empty or not UTF-8.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror or err}", key=KEY) from None
    if not raw:
        raise ConfigError(f"{path} is empty", key=KEY)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path} is not UTF-8 text (invalid byte 0x{raw[err.start]:02x} at offset {err.start})",
            key=KEY,
        ) from None


def split_bounds(n: int, val_fraction: float, test_fraction: float = 0.0) -> tuple[int, int]:
    """Boundaries ``(a, b)`` of the contiguous split of ``n`` items.

    train = ``[0, a)``, val = ``[a, b)``, test = ``[b, n)`` with
    ``a = int(n * (1 - val_fraction - test_fraction))`` and ``b = n - int(n * test_fraction)``,
    so with ``test_fraction = 0`` val is exactly the tail ``[int(n * (1 - val)), n)``
    (nanoGPT's ``int(n * 0.9)`` boundary).
    """
    if not (0.0 < val_fraction and 0.0 <= test_fraction and val_fraction + test_fraction < 1.0):
        raise ValueError(f"bad split fractions val={val_fraction}, test={test_fraction}")
    a = int(n * (1.0 - val_fraction - test_fraction))
    b = n - int(n * test_fraction)
    return a, max(a, b)


S = TypeVar("S", bound=Sequence)


def split_sequence(seq: S, val_fraction: float, test_fraction: float = 0.0) -> tuple[S, S, S]:
    """``(train, val, test)`` slices of a str, list or 1-D tensor at ``split_bounds``."""
    a, b = split_bounds(len(seq), val_fraction, test_fraction)
    return seq[:a], seq[a:b], seq[b:]
