"""Token caches: memmap-backed splits, streamed tokenization, content keys, ``hf:`` datasets."""

from __future__ import annotations

import os

import pytest
import torch

import ablate.data.source as source
from ablate.config import ConfigError, DataConfig, build_config
from ablate.data import LMDataModule
from ablate.data.token_cache import token_splits
from ablate.data.tokenizers import CharTokenizer, WordTokenizer, train_bpe
from ablate.study import planned_run_id, run_content

TEXT = "".join(
    f"Line {i}: the quick brown fox {'jumps' if i % 3 else 'naps'} over dog {i % 7}.\n"
    "  indented, with  double spaces\n\n"
    for i in range(300)
)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "cache"


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def cfg(dataset, **kw) -> DataConfig:
    return DataConfig(dataset=str(dataset), **kw)


def test_char_splits_match_the_whole_string_reference(corpus):
    s = token_splits(cfg(corpus, test_fraction=0.1))
    ref = CharTokenizer(sorted(set(TEXT)))
    n = len(TEXT)
    a, b = int(n * 0.8), n - int(n * 0.1)  # nanoGPT-style contiguous split, by hand
    for split, (lo, hi) in {"train": (0, a), "val": (a, b), "test": (b, n)}.items():
        assert s.tokens[split].tolist() == ref.encode(TEXT[lo:hi])
        assert s.chars[split] == hi - lo
    assert s.tokens["train"].dtype == torch.uint16
    assert (s.path / "tokens.bin").stat().st_size == 2 * n  # one uint16 per character


@pytest.mark.parametrize("kind", ["char", "word"])
def test_streaming_in_small_chunks_gives_the_same_ids(corpus, monkeypatch, kind, cache):
    whole = token_splits(cfg(corpus, tokenizer=kind))
    monkeypatch.setattr(source, "CHUNK_CHARS", 97)  # many chunks, cut mid-paragraph
    chunked = token_splits(cfg(corpus, tokenizer=kind), root=cache / "other")
    assert chunked.path != whole.path
    for split in ("train", "val"):
        assert torch.equal(chunked.tokens[split].long(), whole.tokens[split].long())
    if kind == "word":
        ref = WordTokenizer.fit(TEXT)
        ids = ref.encode(TEXT)
        a = int(len(ids) * 0.9)
        assert whole.tokens["train"].tolist() == ids[:a]
        assert whole.tokens["val"].tolist() == ids[a:]


def test_bpe_single_chunk_matches_training_on_the_whole_split(corpus):
    s = token_splits(cfg(corpus, tokenizer="bpe", bpe_vocab_size=300))
    a = int(len(TEXT) * 0.9)
    ref = train_bpe(TEXT[:a], 300)
    assert s.tokens["train"].tolist() == ref.encode(TEXT[:a])
    assert s.tokens["val"].tolist() == ref.encode(TEXT[a:])


def test_bpe_streamed_in_chunks_round_trips(corpus, monkeypatch):
    monkeypatch.setattr(source, "CHUNK_CHARS", 500)
    s = token_splits(cfg(corpus, tokenizer="bpe", bpe_vocab_size=300))
    a = int(len(TEXT) * 0.9)
    assert s.tokenizer.decode(s.tokens["train"].tolist()) == TEXT[:a]
    assert s.tokenizer.decode(s.tokens["val"].tolist()) == TEXT[a:]


def test_changed_file_is_a_new_cache_entry_and_run_id(corpus):
    c1 = build_config({"data.dataset": str(corpus)})
    id1, s1 = planned_run_id(c1), token_splits(c1.data)
    before = (s1.path / "tokens.bin").read_bytes()
    st = corpus.stat()
    corpus.write_text(TEXT.replace("fox", "cat"), encoding="utf-8")  # same size
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    c2 = build_config({"data.dataset": str(corpus)})
    s2 = token_splits(c2.data)
    assert id1 != planned_run_id(c2) and s1.path != s2.path
    assert (s1.path / "tokens.bin").read_bytes() == before  # the old entry is untouched


def test_registered_dataset_adds_nothing_to_the_run_id():
    assert run_content(build_config({})) == {}


def test_bad_utf8_is_one_line_with_the_offset(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"hello\n" * 10 + b"\xff\n")
    with pytest.raises(ConfigError, match=r"not UTF-8 text \(invalid byte 0xff at offset 60\)"):
        token_splits(cfg(path))


# --- hf: datasets, built locally and read with the hub disabled ----------------------------------


@pytest.fixture
def hf_dir(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = TEXT.split("\n")[:-1]  # one row per line, without its newline (as in most datasets)
    path = tmp_path / "hf_ds"
    datasets.Dataset.from_dict({"text": rows, "id": list(range(len(rows)))}).save_to_disk(path)
    return path


def test_hf_dataset_through_the_hf_prefix(hf_dir):
    spec = f"hf:{hf_dir}"
    s = token_splits(cfg(spec))
    ref = CharTokenizer(sorted(set(TEXT)))
    a = int(len(TEXT) * 0.9)  # rows joined with newlines give back TEXT exactly
    assert s.tokens["train"].tolist() == ref.encode(TEXT[:a])
    assert s.tokens["val"].tolist() == ref.encode(TEXT[a:])
    run_cfg = build_config({"data.dataset": spec})
    key = source.data_key(spec)
    assert key.startswith("hf:") and planned_run_id(run_cfg) != planned_run_id(build_config({}))
    dm = LMDataModule(
        DataConfig(dataset=spec, seq_len=8, batch_size=4, shuffle=True), seed=3
    ).prepare()
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.long and torch.equal(x[:, 1:], y[:, :-1])


def test_hf_spec_parsing_and_errors(hf_dir):
    p = source.parse_hf
    assert p("hf:wikitext/wikitext-103-raw-v1") == source.HFSpec(
        "wikitext", "wikitext-103-raw-v1", "train"
    )
    assert p("hf:org/name/cfg:validation") == source.HFSpec("org/name", "cfg", "validation")
    assert p("hf:tiny:test") == source.HFSpec("tiny", None, "test")
    assert p(f"hf:{hf_dir}").name == str(hf_dir)
    with pytest.raises(ConfigError, match=r"data.dataset: cannot load 'hf:no_such_dataset_xyz'"):
        source.load_hf("hf:no_such_dataset_xyz")


def test_study_plan_checks_hf_datasets(tmp_path, hf_dir):
    import yaml

    from ablate.study import load_study

    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({"base": {"data.dataset": f"hf:{hf_dir}"}}))
    assert load_study(study).runs[0].config.data.dataset == f"hf:{hf_dir}"
    study.write_text(yaml.safe_dump({"base": {"data.dataset": "hf:no_such_dataset_xyz"}}))
    with pytest.raises(ConfigError, match="s.yaml: base.data.dataset: cannot load"):
        load_study(study)


def test_text_without_line_breaks_is_still_streamed(tmp_path, monkeypatch):
    path = tmp_path / "oneline.txt"
    text = "word " * 3000 + "x" * 500  # no newline anywhere
    path.write_text(text)
    monkeypatch.setattr(source, "CHUNK_CHARS", 100)
    chunks = list(source.iter_text(str(path)))
    assert "".join(chunks) == text and max(map(len, chunks)) < 1000
    s = token_splits(cfg(path))
    a = int(len(text) * 0.9)
    assert s.tokenizer.decode(s.tokens["train"].tolist()) == text[:a]
