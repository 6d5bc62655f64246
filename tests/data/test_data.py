"""Data: batching (course definition), tokenizers, datasets/download, splits, LMDataModule.

Every test runs with its own ``ABLATE_CACHE_DIR`` and without ``ABLATE_DATA_DIR`` (autouse
fixture); tests that need Tiny Shakespeare point ``ABLATE_DATA_DIR`` at the shared data folder
and skip when it is absent. Downloads go to a loopback HTTP server only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.server
import math
import os
import random
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import ablate.data.module as dm_module
import ablate.data.tokenizers as tk
from ablate.config import ConfigError, DataConfig
from ablate.data import (
    DATASETS,
    EOS,
    CharTokenizer,
    DatasetSpec,
    LMDataModule,
    TokenOrderSampler,
    WindowSampler,
    WordTokenizer,
    batchify,
    build_tokenizer,
    cached_bpe,
    data_reuse,
    distinct_windows,
    get_batch,
    load_tokenizer,
    random_offsets,
    read_text,
    resolve_dataset,
    split_bounds,
    split_sequence,
    unigram_entropy,
    window_order,
    window_starts,
)
from ablate.data.reuse import describe

SHAKESPEARE_SHA = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


def shared_data_dir() -> Path:
    env = os.environ.get("ABLATE_DATA_DIR")
    return Path(env) if env else Path(__file__).parents[3] / "shared" / "data"


SHARED = shared_data_dir()  # read before the autouse fixture clears the variable


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ABLATE_DATA_DIR", raising=False)
    # urllib honours proxy variables; loopback requests must never go through a proxy
    monkeypatch.setenv("no_proxy", "*")
    monkeypatch.setenv("NO_PROXY", "*")


@pytest.fixture
def shakespeare(monkeypatch) -> Path:
    path = SHARED / "tinyshakespeare" / "input.txt"
    if not path.is_file():
        pytest.skip(f"shared data not found at {SHARED}")
    monkeypatch.setenv("ABLATE_DATA_DIR", str(SHARED))
    return path


def random_text(n: int, seed: int = 0, alphabet: str = "abcdefghij \n") -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- batching ------------------------------------------------------------------------------------


def test_batchify_and_get_batch_course_example():
    data = torch.arange(1, 27)
    src = batchify(data, 3)
    assert src.tolist() == [list(range(1, 9)), list(range(9, 17)), list(range(17, 25))]
    x, y = get_batch(src, 0, 4)
    assert x.tolist() == [[1, 2, 3, 4], [9, 10, 11, 12], [17, 18, 19, 20]]
    assert y.tolist() == [[2, 3, 4, 5], [10, 11, 12, 13], [18, 19, 20, 21]]
    assert list(window_starts(8, 4, 1))[-1] == 3
    x, y = get_batch(src, 3, 4)
    assert x[0].tolist() == [4, 5, 6, 7] and y[0].tolist() == [5, 6, 7, 8]
    with pytest.raises(ValueError):
        get_batch(src, 4, 4)
    with pytest.raises(ValueError):
        get_batch(src, -1, 4)


def test_batchify_needs_two_tokens_per_row():
    assert batchify(torch.arange(6), 3).shape == (3, 2)
    with pytest.raises(ValueError, match="rows"):
        batchify(torch.arange(5), 3)


def test_window_starts_strides():
    assert list(window_starts(8, 4, 1)) == [0, 1, 2, 3]  # sliding window
    assert list(window_starts(8, 4, 4)) == [0]  # non-overlapping: the next would need 9 tokens
    assert list(window_starts(9, 4, 4)) == [0, 4]
    assert list(window_starts(20, 3, 2)) == list(range(0, 17, 2))
    # non-overlapping windows: (tps - 1) // seq_len of them
    for tps in range(5, 40):
        assert len(window_starts(tps, 4, 4)) == (tps - 1) // 4


def test_window_starts_error_names_key_and_sizes():
    with pytest.raises(ConfigError) as err:
        window_starts(8, 8, 1)
    assert err.value.key == "data.seq_len"
    assert "8" in str(err.value) and "9" in str(err.value)


# --- tokenizers ----------------------------------------------------------------------------------


def test_char_tokenizer_on_tiny_shakespeare(shakespeare):
    text = read_text(resolve_dataset("tinyshakespeare"))
    assert len(text) == 1_115_394
    tok = CharTokenizer.fit(text)
    assert tok.vocab_size == 65
    assert tok.chars == sorted(tok.chars)
    sample = text[:2000]
    assert tok.decode(tok.encode(sample)) == sample


def test_char_tokenizer_roundtrip_and_save(tmp_path):
    tok = CharTokenizer.fit("hello world\n")
    assert tok.vocab_size == len(set("hello world\n"))
    assert tok.encode("dl") == [tok.chars.index("d"), tok.chars.index("l")]
    assert tok.decode(tok.encode("hello\nworld")) == "hello\nworld"
    tok.save(tmp_path / "c.json")
    again = load_tokenizer(tmp_path / "c.json")
    assert isinstance(again, CharTokenizer) and again.chars == tok.chars
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("z")


def test_word_tokenizer_eos_per_line(tmp_path):
    text = "the cat sat\n\n  the dog\tran  \nend"
    tok = WordTokenizer.fit(text)
    words = [tok.dictionary.idx2word[i] for i in tok.encode(text)]
    assert words == ["the", "cat", "sat", EOS, EOS, "the", "dog", "ran", EOS, "end", EOS]
    # ids in order of first occurrence, no duplicates
    assert tok.dictionary.idx2word == ["the", "cat", "sat", EOS, "dog", "ran", "end"]
    assert tok.vocab_size == 7
    ids = tok.encode(text)
    assert tok.encode(tok.decode(ids)) == ids
    assert tok.decode(ids) == "the cat sat\n\nthe dog ran\nend\n"
    # a trailing newline does not start another line
    assert tok.encode("the cat\n") == tok.encode("the cat")
    tok.save(tmp_path / "w.json")
    again = load_tokenizer(tmp_path / "w.json")
    assert isinstance(again, WordTokenizer) and again.encode(text) == ids


def test_word_tokenizer_unknown_word():
    tok = WordTokenizer.fit("a b\n")
    with pytest.raises(ValueError, match="'zebra'"):
        tok.encode("zebra")


def test_bpe_trains_caches_and_roundtrips(tmp_path, monkeypatch):
    train = random_text(4000, seed=1, alphabet="abcab cd\n") + " héllo wörld 日本\n"
    cache = tmp_path / "bpecache"
    tok = cached_bpe(train, 300, cache)
    assert 256 < tok.vocab_size <= 300
    files = list((cache / "tokenizers").glob("bpe-*.json"))
    assert len(files) == 1 and "v300" in files[0].name
    mtime = files[0].stat().st_mtime_ns
    for text in (train[:500], "unseen text: ZQX 🎉\r\n\ttabs", ""):
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(train)) < len(train.encode())  # merges were learned

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although cached")

    monkeypatch.setattr(tk, "train_bpe", no_training)
    again = build_tokenizer("bpe", "ignored", train, bpe_vocab_size=300, cache_dir=cache)
    assert again.encode(train) == tok.encode(train)
    assert files[0].stat().st_mtime_ns == mtime
    assert isinstance(load_tokenizer(files[0]), tk.BPETokenizer)
    # another vocab size or training text is another cache entry (and here: would retrain)
    with pytest.raises(AssertionError, match="retrained"):
        cached_bpe(train, 280, cache)
    with pytest.raises(AssertionError, match="retrained"):
        cached_bpe(train + "x", 300, cache)


# --- datasets: splits, files, download ----------------------------------------------------------


def test_split_is_contiguous_and_deterministic():
    assert split_bounds(1_115_394, 0.1) == (1_003_854, 1_115_394)  # nanoGPT: int(n * 0.9)
    assert split_bounds(100, 0.1, 0.1) == (80, 90)
    assert split_bounds(10, 0.15, 0.0) == (8, 10)
    text = random_text(1000)
    tr, va, te = split_sequence(text, 0.1)
    assert (tr, va, te) == split_sequence(text, 0.1)
    assert tr + va == text and te == "" and va == text[900:]
    tr, va, te = split_sequence(text, 0.1, 0.2)
    assert tr + va + te == text and len(tr) == 700 and len(va) == 100 and len(te) == 200
    ids = torch.arange(50)
    assert [t.tolist() for t in split_sequence(ids, 0.2)] == [
        list(range(40)),
        list(range(40, 50)),
        [],
    ]


def test_tinyshakespeare_split_boundary(shakespeare):
    assert resolve_dataset("tinyshakespeare") == SHARED / "tinyshakespeare" / "input.txt"
    text = read_text(shakespeare)
    n = len(text)
    train, val, _ = split_sequence(text, 0.1)
    assert len(train) == int(n * 0.9) and val == text[int(n * 0.9) :]
    dm = LMDataModule(DataConfig())  # the defaults: tinyshakespeare, char, 90/10
    dm.setup("fit")
    assert dm.vocab_size == 65 and dm.tokens("train").numel() == len(train)
    assert dm.tokenizer.decode(dm.tokens("val").tolist()) == val
    assert unigram_entropy(dm.train_tokens) < math.log(65)


class Server:
    """A loopback HTTP server serving ``files`` (path -> bytes), counting requests."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.hits = files, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.hits += 1
                body = outer.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    body = b"a small dataset\nwith two lines\n"
    s = Server({"/data.txt": body})
    s.body, s.sha = body, hashlib.sha256(body).hexdigest()
    yield s
    s.close()


def register(monkeypatch, name: str, url: str, sha: str) -> DatasetSpec:
    spec = DatasetSpec(url=url, sha256=sha, filename="data.txt")
    monkeypatch.setitem(DATASETS, name, spec)
    return spec


def test_download_verifies_and_caches(server, monkeypatch, tmp_path):
    register(monkeypatch, "tiny", server.url("/data.txt"), server.sha)
    path = resolve_dataset("tiny")
    assert path == tmp_path / "cache" / "tiny" / "data.txt"
    assert path.read_bytes() == server.body and server.hits == 1
    assert resolve_dataset("tiny") == path
    assert server.hits == 1  # served from the cache
    assert sorted(p.name for p in path.parent.iterdir()) == ["data.txt"]  # no temp files


def test_download_checksum_mismatch_leaves_nothing(server, monkeypatch, tmp_path):
    register(monkeypatch, "tiny", server.url("/data.txt"), "0" * 64)
    with pytest.raises(ConfigError, match="checksum mismatch") as err:
        resolve_dataset("tiny")
    assert err.value.key == "data.dataset"
    folder = tmp_path / "cache" / "tiny"
    assert not folder.exists() or list(folder.iterdir()) == []


def test_download_failure_is_config_error(server, monkeypatch, tmp_path):
    register(monkeypatch, "tiny", server.url("/missing.txt"), server.sha)
    with pytest.raises(ConfigError, match="could not download") as err:
        resolve_dataset("tiny")
    assert err.value.key == "data.dataset"
    assert list((tmp_path / "cache" / "tiny").iterdir()) == []


def test_a_missing_dataset_names_every_folder_it_looked_in(server, monkeypatch, tmp_path):
    """Not under ABLATE_DATA_DIR, not in the cache, no download: the one line names the data
    folder as the variable gave it and where that led (a relative value resolves against the
    working directory), the cache, and the download that failed."""
    register(monkeypatch, "tiny", server.url("/missing.txt"), server.sha)
    work = tmp_path / "clone"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("ABLATE_DATA_DIR", "../shared/data")  # the README's, from another folder
    with pytest.raises(ConfigError) as err:
        resolve_dataset("tiny")
    msg = err.value.message
    assert err.value.key == "data.dataset"
    assert "$ABLATE_DATA_DIR=../shared/data" in msg
    shared = tmp_path / "shared"  # ../shared from the clone: not there
    assert f"{shared / 'data' / 'tiny' / 'data.txt'}: no folder {shared}" in msg
    assert f"{tmp_path / 'cache' / 'tiny' / 'data.txt'}: no such file" in msg
    assert f"could not download {server.url('/missing.txt')}" in msg
    (tmp_path / "shared" / "data" / "tiny").mkdir(parents=True)  # the folder, not the file
    with pytest.raises(ConfigError, match=r"shared/data/tiny/data\.txt: no such file"):
        resolve_dataset("tiny")
    monkeypatch.delenv("ABLATE_DATA_DIR")
    with pytest.raises(ConfigError, match=r"under \$ABLATE_DATA_DIR \(not set\) and in the cache"):
        resolve_dataset("tiny")


def test_corrupt_cache_entry_is_fetched_again(server, monkeypatch, tmp_path):
    register(monkeypatch, "tiny", server.url("/data.txt"), server.sha)
    cached = tmp_path / "cache" / "tiny" / "data.txt"
    cached.parent.mkdir(parents=True)
    cached.write_text("garbage")
    assert resolve_dataset("tiny") == cached and cached.read_bytes() == server.body
    assert server.hits == 1


def test_data_dir_takes_precedence_and_is_verified(server, monkeypatch, tmp_path):
    spec = register(monkeypatch, "tiny", server.url("/data.txt"), server.sha)
    shared = tmp_path / "shared"
    (shared / "tiny").mkdir(parents=True)
    local = shared / "tiny" / spec.filename
    local.write_bytes(server.body)
    monkeypatch.setenv("ABLATE_DATA_DIR", str(shared))
    assert resolve_dataset("tiny") == local and server.hits == 0
    local.write_bytes(server.body + b"tampered")
    with pytest.raises(ConfigError, match="corrupt") as err:
        resolve_dataset("tiny")
    assert err.value.key == "data.dataset" and server.hits == 0


def test_spec_url_is_overridable():
    spec = dataclasses.replace(DATASETS["tinyshakespeare"], url="http://127.0.0.1:1/x")
    assert spec.url == "http://127.0.0.1:1/x" and spec.sha256 == SHAKESPEARE_SHA


def _latin1_file(d: Path) -> Path:
    path = d / "latin1.txt"
    path.write_bytes("caf\xe9\n".encode("latin-1"))
    return path


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda d: d / "nope.txt", "unknown dataset"),
        (lambda d: d, "not a regular file"),
        (lambda d: write(d / "empty.txt", ""), "is empty"),
        (_latin1_file, "not UTF-8"),
    ],
    ids=["missing", "directory", "empty", "not-utf8"],
)
def test_bad_dataset_files_are_config_errors(tmp_path, make, fragment):
    path = make(tmp_path)
    with pytest.raises(ConfigError, match=fragment) as err:
        LMDataModule(DataConfig(dataset=str(path))).setup("fit")
    assert err.value.key == "data.dataset"


def test_unknown_name_lists_registered():
    with pytest.raises(ConfigError, match="tinyshakespeare") as err:
        resolve_dataset("tinyshakespear")
    assert err.value.key == "data.dataset"


# --- LMDataModule --------------------------------------------------------------------------------


@pytest.fixture
def text_file(tmp_path) -> Path:
    return write(tmp_path / "text.txt", random_text(3000, seed=7))


def make_dm(path: Path, seed: int = 0, **kw) -> LMDataModule:
    cfg = DataConfig(dataset=str(path), **{"seq_len": 8, "batch_size": 4, **kw})
    dm = LMDataModule(cfg, seed=seed)
    dm.setup("fit")
    return dm


def first_inputs(loader) -> list[list[int]]:
    return [x[:, 0].tolist() for x, _ in loader]


def test_module_shapes_and_properties(text_file):
    dm = make_dm(text_file, eval_batch_size=2)
    assert dm.vocab_size == len(set(text_file.read_text()))
    assert dm.is_char and dm.bits_per_char_factor == pytest.approx(1 / math.log(2))
    assert dm.tokens_per_batch == 32
    assert not dm.train_dataloader().pin_memory
    assert make_dm(text_file, pin_memory=True).val_dataloader().pin_memory
    assert dm.tokens("train").numel() == 2700 and dm.tokens("val").numel() == 300
    assert dm.batched("train").shape == (4, 675) and dm.batched("val").shape == (2, 150)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == y.shape == (4, 8) and x.dtype == torch.long
    assert len(dm.train_dataloader()) == dm.num_train_windows == len(window_starts(675, 8, 8))
    with pytest.raises(ConfigError, match="no test split"):
        dm.test_dataloader()


def test_setup_is_idempotent(text_file, monkeypatch):
    calls = []
    real = dm_module.token_splits
    monkeypatch.setattr(dm_module, "token_splits", lambda c: calls.append(c) or real(c))
    dm = make_dm(text_file)
    tok = dm.tokenizer
    dm.setup("fit")
    dm.setup("validate")
    assert len(calls) == 1 and dm.tokenizer is tok


def test_train_loader_deterministic_per_seed(text_file):
    a = first_inputs(make_dm(text_file, seed=1).train_dataloader())
    b = first_inputs(make_dm(text_file, seed=1).train_dataloader())
    c = first_inputs(make_dm(text_file, seed=2).train_dataloader())
    assert a == b and a != c
    assert sorted(a) == sorted(c)  # same windows, another order


def test_train_loader_epochs_and_order(text_file):
    dm = make_dm(text_file, stride=3)
    src, starts = dm.batched("train"), window_starts(675, 8, 3)
    windows = {i: get_batch(src, i, 8)[0][:, 0].tolist() for i in starts}
    loader = dm.train_dataloader()
    e0, e1 = first_inputs(loader), first_inputs(loader)
    assert e0 != e1  # a new permutation per epoch
    assert sorted(e0) == sorted(e1) == sorted(windows.values())  # each epoch: every window once
    in_order = make_dm(text_file, stride=3, shuffle=False).train_dataloader()
    assert first_inputs(in_order) == [windows[i] for i in starts]


def test_sampler_resume_continues_the_stream():
    n = 7
    stream = [i for e in range(3) for i in window_order(n, 5, e).tolist()]
    full = WindowSampler(n, 5, True)
    assert [i for _ in range(3) for i in full] == stream
    resumed = WindowSampler(n, 5, True, start=10)
    assert list(resumed) + list(resumed) == stream[10:]
    assert window_order(n, 5, 0, shuffle=False).tolist() == list(range(n))


def _stream(dm: LMDataModule, batches: int) -> tuple[list[int], list[int]]:
    """The first ``batches`` training batches, flattened row by row: (inputs, targets)."""
    xs, ys, loader = [], [], dm.train_dataloader(start=0)
    while len(xs) < batches * dm.tokens_per_batch:  # pass after pass (epoch after epoch)
        for _, (x, y) in zip(range(batches - len(xs) // dm.tokens_per_batch), loader, strict=False):
            xs += x.flatten().tolist()
            ys += y.flatten().tolist()
    return xs, ys


def test_token_order_is_the_same_stream_at_every_batch_size(text_file):
    """Issue 22: at one seed, batch 8 and batch 64 see the same first N tokens in the same
    order (here 640 windows, across the 337-window epoch boundary); ``rows`` does not."""
    b8 = _stream(make_dm(text_file, seed=4, batch_size=8, order="tokens", eval_batch_size=2), 80)
    b64 = _stream(make_dm(text_file, seed=4, batch_size=64, order="tokens", eval_batch_size=2), 10)
    assert len(b8[0]) == len(b64[0]) == 640 * 8
    assert b8 == b64
    dm = make_dm(text_file, seed=4, batch_size=8, order="tokens")
    assert dm.batched("train").shape == (1, 2700) and dm.num_train_windows == 337 // 8
    src = dm.tokens("train")
    n = len(window_starts(2700, 8, 8))
    windows = [tuple(src[i : i + 8].tolist()) for i in window_starts(2700, 8, 8)]
    x = torch.tensor(b8[0]).reshape(-1, 8)
    first_epoch = [tuple(r) for r in x[:n].tolist()]
    assert sorted(first_epoch) == sorted(windows)  # each epoch: every window once
    assert [tuple(r) for r in torch.tensor(b8[1]).reshape(-1, 8)[:, :-1].tolist()] == [
        w[1:] for w in first_epoch + [tuple(r) for r in x[n:].tolist()]
    ]  # targets: the next token
    rows8 = _stream(make_dm(text_file, seed=4, batch_size=8), 8)
    rows64 = _stream(make_dm(text_file, seed=4, batch_size=64, eval_batch_size=2), 1)
    assert rows8[0] != rows64[0]  # the batch size changes the order under ``rows``


def test_token_order_sampler_resumes_mid_stream():
    full = TokenOrderSampler(7, 3, seed=5, shuffle=True)
    stream = [i for e in range(4) for i in window_order(7, 5, e).tolist()]
    batches = [b for _ in range(4) for b in full]
    assert len(full) == 2 and sum(batches, []) == stream[:24]
    resumed = TokenOrderSampler(7, 3, seed=5, shuffle=True, start=3)
    assert list(resumed) == batches[3:4]  # the rest of the pass it resumed in
    assert list(resumed) + list(resumed) == batches[4:8]
    assert list(TokenOrderSampler(4, 2, 0, shuffle=False)) == [[0, 1], [2, 3]]


def test_token_order_needs_one_batch_of_windows(text_file):
    with pytest.raises(ConfigError, match="fewer than one batch") as err:
        make_dm(text_file, batch_size=400, order="tokens", eval_batch_size=2)
    assert err.value.key == "data.batch_size"
    with pytest.raises(ValueError, match="'rows', 'tokens' or 'random'"):
        DataConfig(order="shuffled")


# --- data.order: random (nanoGPT's get_batch) ------------------------------------------------


def test_random_offsets_cover_every_offset_uniformly():
    """20,000 draws over 50 offsets at each of 30 seeds (fixed, so the test is deterministic):
    every offset, the first and the last included, comes up; Pearson's chi-square against the
    uniform distribution does not reject it on the pooled draws, and its p-values over the
    seeds are themselves uniform (Kolmogorov-Smirnov), as for a uniform sampler."""
    from scipy.stats import chisquare, kstest

    n, b = 50, 10
    draws = [random_offsets(n, seed, first=0, count=20_000) for seed in range(30)]
    counts = [np.bincount(d, minlength=n) for d in draws]
    assert all(c.size == n and c.min() > 0 for c in counts)  # [0, n): n - 1 drawn, n never
    assert chisquare(np.sum(counts, axis=0)).pvalue > 0.01
    assert kstest([chisquare(c).pvalue for c in counts], "uniform").pvalue > 0.01
    # any stretch of a stream is the same drawn alone, batch by batch, or in a longer one
    batches = np.concatenate([random_offsets(n, 3, k * b, b) for k in range(40)])
    assert np.array_equal(batches, draws[3][:400])
    assert np.array_equal(random_offsets(n, 3, 63, 2), draws[3][63:65])  # across a block
    assert not np.array_equal(draws[4][:b], draws[3][:b])  # another seed, another stream


def test_random_order_batches_are_windows_at_the_drawn_offsets(text_file):
    dm = make_dm(text_file, seed=5, order="random")
    src = dm.tokens("train")
    assert dm.batched("train").shape == (1, 2700)
    # a nominal epoch is a pass over the tokens: 337 windows of 8 in batches of 4
    assert len(dm.train_dataloader()) == dm.num_train_windows == 337 // 4
    loader = dm.train_dataloader()
    for k, (x, y) in zip(range(3), loader, strict=False):
        offsets = random_offsets(2700 - 8, seed=5, first=4 * k, count=4).tolist()
        assert x.tolist() == [src[o : o + 8].tolist() for o in offsets]
        assert y.tolist() == [src[o + 1 : o + 9].tolist() for o in offsets]
    a = first_inputs(make_dm(text_file, seed=1, order="random").train_dataloader())
    assert a == first_inputs(make_dm(text_file, seed=1, order="random").train_dataloader())
    assert a != first_inputs(make_dm(text_file, seed=2, order="random").train_dataloader())
    # as under ``tokens``: the same sequences in the same order at every batch size
    b4 = _stream(make_dm(text_file, seed=4, batch_size=4, order="random"), 16)
    b16 = _stream(make_dm(text_file, seed=4, batch_size=16, order="random"), 4)
    assert b4 == b16 and len(b4[0]) == 64 * 8


def test_random_order_resumes_at_any_batch_and_ignores_the_worker_layout(text_file):
    dm = make_dm(text_file, seed=5, order="random")
    whole = []
    loader = dm.train_dataloader(start=0)
    for _ in range(2):  # two passes: across the nominal epoch boundary at batch 84
        whole += [x for x, _ in loader]
    for start in (0, 1, 83, 100):
        resumed = []
        loader = dm.train_dataloader(start=start)
        while len(resumed) < len(whole) - start:
            resumed += [x for x, _ in loader]
        assert all(torch.equal(a, b) for a, b in zip(whole[start:], resumed, strict=True))
    # the stream a stacked group reads (sampler indices into the dataset) and one with workers
    stacked_way = dm.train_dataloader(start=10)
    items = [stacked_way.dataset[k][0] for _, k in zip(range(5), stacked_way.sampler, strict=False)]
    assert all(torch.equal(a, b) for a, b in zip(whole[10:15], items, strict=True))
    base = dm.train_dataloader(start=0)
    workers = torch.utils.data.DataLoader(
        base.dataset, batch_size=None, sampler=base.sampler, num_workers=2
    )
    assert all(torch.equal(a, b) for a, (b, _) in zip(whole, workers, strict=False))


def test_each_member_of_a_stacked_group_draws_its_own_seeds_random_offsets(
    shakespeare, tiny_run, tmp_path
):
    """Members of a stacked group read their batches through their own data module: under
    ``data.order: random`` each trains exactly as its solo run (the same losses step by step),
    which a member reading another seed's stream would not."""
    from ablate.config import build_config
    from ablate.store import RunStore
    from ablate.training.train import train_group, train_run

    cfgs = [build_config(tiny_run | {"data.order": "random", "train.seed": s}) for s in (0, 1)]
    store = RunStore(tmp_path)
    solo = [train_run(c, store.run("solo", c.run_id())) for c in cfgs]
    stacked = train_group(cfgs, [store.run("stacked", c.run_id()) for c in cfgs])

    def losses(study, cfg):
        return [v for _, m, v in store.run(study, cfg.run_id()).read_metrics() if m == "train/loss"]

    for cfg, s, m in zip(cfgs, solo, stacked, strict=True):
        assert m["final_val_loss"] == pytest.approx(s["final_val_loss"], rel=1e-5)
        assert losses("stacked", cfg) == pytest.approx(losses("solo", cfg), rel=1e-5)


def test_data_reuse_counts_the_windows_each_order_can_draw(text_file):
    """Distinct windows as the loaders visit them in two epochs (2700 training tokens, seq_len
    8, batch 4), and a hand count: rows of 675 tokens hold 84 windows at stride 8 (offsets 0,
    8, ..., 664), so 4 rows 336; one row of 2700 holds 337; random offsets 2692."""
    n = 2700
    for order, stride, hand in (("rows", None, 336), ("rows", 3, 4 * 223), ("tokens", None, 337)):
        dm = make_dm(text_file, order=order, stride=stride)
        loader = dm.train_dataloader()
        visited = {tuple(x.tolist()) for _ in range(2) for xs, _ in loader for x in xs}
        assert distinct_windows(dm.cfg, n) == len(visited) == hand, (order, stride)
    random = make_dm(text_file, order="random").cfg
    assert distinct_windows(random, n) == n - 8
    r = data_reuse(random, steps=100, train_tokens=n)
    assert (r.drawn, r.passes) == (400, pytest.approx(400 * 8 / n))
    assert r.per_window == pytest.approx(400 / 2692)
    rows = data_reuse(make_dm(text_file).cfg, steps=1000, train_tokens=n)
    assert rows.per_window == pytest.approx(4000 / 336)  # each window about 12 times
    assert describe([rows, r]).startswith("0.15-11.90 windows drawn per distinct window")


def test_random_order_refuses_a_stride_or_no_shuffle():
    from ablate.config import build_config

    for key, value in (("data.stride", 1), ("data.shuffle", False)):
        with pytest.raises(ConfigError, match=f"{key} has no meaning under data.order: random"):
            build_config({"data.order": "random", key: value})


def test_val_loader_covers_the_split(text_file):
    dm = make_dm(text_file, eval_batch_size=3)
    src = dm.batched("val").long()  # (3, 100); the memmap holds uint16
    batches = list(dm.val_dataloader())
    assert len(batches) == (src.size(1) - 1) // 8 == 12
    xs = torch.cat([x for x, _ in batches], dim=1)
    ys = torch.cat([y for _, y in batches], dim=1)
    assert torch.equal(xs, src[:, : 12 * 8]) and torch.equal(ys, src[:, 1 : 1 + 12 * 8])


def test_eval_windows_other_lengths(text_file):
    dm = make_dm(text_file, eval_batch_size=3)
    x, y = next(iter(dm.eval_windows("val", 16)))
    assert x.shape == (3, 16) and torch.equal(y[:, :-1], x[:, 1:])
    assert len(dm.eval_windows("val", 32)) == 99 // 32
    with pytest.raises(ConfigError, match="val split") as err:
        dm.eval_windows("val", 100)  # raised at the call, not at the first batch
    assert err.value.key == "train.eval_lengths"


def test_sizes_that_do_not_fit_are_config_errors(text_file):
    # val: 300 tokens in 4 rows of 75, a window of seq_len 100 needs 101 per row
    with pytest.raises(ConfigError, match=r"seq_len 100 .*101.* 75 \(the val split") as err:
        make_dm(text_file, seq_len=100)
    assert err.value.key == "data.seq_len"
    with pytest.raises(ConfigError, match="the train split") as err:
        make_dm(text_file, seq_len=700)
    assert err.value.key == "data.seq_len"
    with pytest.raises(ConfigError, match="300 tokens, too few for 200 rows") as err:
        make_dm(text_file, seq_len=1, eval_batch_size=200)
    assert err.value.key == "data.eval_batch_size"


def test_word_and_bpe_modules(tmp_path):
    lines = [
        " ".join(random.Random(i).choice(["to", "be", "or", "not"]) for _ in range(6))
        for i in range(400)
    ]
    path = write(tmp_path / "words.txt", "\n".join(lines) + "\n")
    word = make_dm(path, tokenizer="word")
    assert word.vocab_size == 5 and not word.is_char  # 4 words + <eos>
    total = sum(word.tokens(s).numel() for s in ("train", "val", "test"))
    assert total == 400 * 7 and word.tokens("val").numel() == total - int(total * 0.9)
    bpe = make_dm(path, tokenizer="bpe", bpe_vocab_size=270)
    assert 256 < bpe.vocab_size <= 270
    assert 0 < bpe.bits_per_char_factor < 1 / math.log(2)  # fewer tokens than characters
    val_text = split_sequence(path.read_text(), 0.1)[1]
    assert bpe.tokenizer.decode(bpe.tokens("val").tolist()) == val_text


def test_unigram_entropy():
    assert unigram_entropy(torch.tensor([0, 1, 2, 3] * 5)) == pytest.approx(math.log(4))
    assert unigram_entropy(torch.zeros(10, dtype=torch.long)) == pytest.approx(0.0)
    p = torch.tensor([0.5, 0.25, 0.25])
    assert unigram_entropy(torch.tensor([0, 0, 1, 2])) == pytest.approx(float(-(p * p.log()).sum()))


@pytest.mark.filterwarnings("ignore:You passed in a `val_dataloader`")
@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")
@pytest.mark.parametrize("order", ["rows", "tokens", "random"])
def test_lightning_resume_sees_the_same_batches(text_file, tmp_path, order):
    pl = pytest.importorskip("pytorch_lightning")

    class Recorder(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.seen: list[list[int]] = []

        def training_step(self, batch, batch_idx):
            self.seen.append(batch[0][:, 0].tolist())
            return self.w.sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def fit(steps: int, ckpt: Path | None = None) -> tuple[list, pl.Trainer]:
        model = Recorder()
        trainer = pl.Trainer(
            max_steps=steps,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
            accelerator="cpu",
            default_root_dir=tmp_path,
        )
        trainer.fit(
            model,
            datamodule=make_dm(text_file, seed=3, seq_len=32, order=order),
            ckpt_path=str(ckpt) if ckpt else None,
        )
        return model.seen, trainer

    # 675 tokens per row, seq_len 32: 21 windows per epoch; stop mid-epoch 2 and resume
    full, _ = fit(50)
    first, trainer = fit(30)
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    rest, _ = fit(50, tmp_path / "mid.ckpt")
    assert first + rest == full


def test_a_study_fetches_its_registered_dataset_before_any_run(server, monkeypatch, tmp_path):
    """No network (here: a missing file on the loopback server) is one line naming the study,
    before a run directory exists, not every run failing with it in its worker."""
    from typer.testing import CliRunner

    from ablate.cli import app
    from ablate.execution.runner import run_study

    register(monkeypatch, "tiny", server.url("/missing.txt"), server.sha)
    monkeypatch.delenv("ABLATE_DATA_DIR", raising=False)
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: s\nbase:\n  data: {dataset: tiny, tokenizer: char, seq_len: 8, batch_size: 2}\n"
        "  model: {n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 8}\n"
        "  tracking: {wandb: false}\nseeds: [0, 1]\n"
    )
    store = tmp_path / "store"
    with pytest.raises(ConfigError, match="could not download") as err:
        run_study(spec, store=store, progress=False)
    assert err.value.key == "data.dataset" and str(err.value).startswith(str(spec))
    assert not store.exists() and server.hits == 1  # fetched once, not once per run
    plan = CliRunner().invoke(app, ["plan", str(spec), "--store", str(store)])  # as run checks
    assert plan.exit_code == 2 and "could not download" in plan.output, plan.output
    assert server.hits == 2 and not store.exists()
