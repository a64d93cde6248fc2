import json
import os

import numpy as np
import pytest

from data import write_json
from data.wikitext2 import prepare as wt2

# GPT-2 BPE token counts of the WikiText-2 v1 copy in ../shared (sha256 recorded in manifest.json)
EXPECTED_TOKENS = {"train": 2_448_405, "val": 258_659, "test": 295_877}


def test_prepare_real_wikitext2(tmp_path, wikitext2_dir):
    out = tmp_path / "wt2"
    meta = wt2.prepare("wikitext-2-v1", source_dir=wikitext2_dir, out_dir=str(out), verbose=False)
    assert meta["tokens"] == EXPECTED_TOKENS
    for split, n in EXPECTED_TOKENS.items():
        ids = np.fromfile(out / f"{split}.bin", dtype=np.uint16)
        assert ids.size == n and ids.max() < 50257
    assert json.loads((out / "manifest.json").read_text())["sha256"]["test"].startswith("d790b833")
    # decoding gives back the source text
    import tiktoken
    test_ids = np.fromfile(out / "test.bin", dtype=np.uint16)[:200].tolist()
    text = open(os.path.join(wikitext2_dir, "wiki.test.tokens"), encoding="utf-8").read()
    assert text.startswith(tiktoken.get_encoding("gpt2").decode(test_ids))
    # a rerun is a no-op
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert wt2.prepare("wikitext-2-v1", source_dir=wikitext2_dir, out_dir=str(out), verbose=False) == meta
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes


def test_missing_source_is_a_clear_error(tmp_path):
    import pytest
    with pytest.raises(wt2.DataUnavailable, match="wiki.train.tokens"):
        wt2.prepare("wikitext-2-v1", source_dir=str(tmp_path), out_dir=str(tmp_path / "o"))
    with pytest.raises(ValueError, match="allowed"):
        wt2.prepare("wikitext-3", source_dir=str(tmp_path))


def gpt2():
    import tiktoken
    return tiktoken.get_encoding("gpt2")


def test_chunked_encoding_equals_whole_text_encoding(wikitext2_dir):
    enc = gpt2()
    # whitespace runs, newlines, contractions, digits and punctuation around every possible cut
    tricky = "a\n\n\nb  c \n \n = Title = \n\nit's 12,345.6 cats' toys ...  \n\n  x\ty\n" * 50
    for size in (1, 7, 64):
        pieces = list(wt2.text_chunks(tricky, size))
        assert "".join(pieces) == tricky and len(pieces) > 1
        by_piece = [t for p in pieces for t in enc.encode_ordinary(p)]
        assert by_piece == enc.encode_ordinary(tricky)
    text = open(os.path.join(wikitext2_dir, "wiki.valid.tokens"), encoding="utf-8").read()
    chunked = np.concatenate([np.array(enc.encode_ordinary(p), np.uint16) for p in wt2.text_chunks(text, 4096)])
    assert np.array_equal(chunked, np.array(enc.encode_ordinary(text), np.uint16))
    assert np.array_equal(wt2.encode(text, enc), chunked)


def test_open_split_never_prepares(tmp_path, monkeypatch):
    import pytest
    import data
    monkeypatch.setattr(wt2, "HERE", str(tmp_path))
    with pytest.raises(data.DataUnavailable, match="data.wikitext2.prepare --config=wikitext-2-v1"):
        wt2.open_split("train")
    assert not wt2.is_prepared() and os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="allowed: train, val, test"):
        wt2.open_split("valid")


def test_sample_windows_covers_every_start_and_rejects_short_arrays():
    import pytest
    import data
    tokens = np.arange(12, dtype=np.uint16)
    windows = data.sample_windows(tokens, 400, 10, seed=[3, 1])
    assert windows.shape == (400, 10) and windows.dtype == np.int64
    assert set(windows[:, 0].tolist()) == {0, 1, 2}  # starts 0 .. N - length, the last included
    assert np.array_equal(windows, data.sample_windows(tokens, 400, 10, seed=[3, 1]))
    assert (np.diff(windows, axis=1) == 1).all()  # consecutive tokens
    with pytest.raises(ValueError, match="val has 12 tokens, fewer than the 13 a window needs"):
        data.sample_windows(tokens, 1, 13, seed=0, name="val")


def test_prepare_leaves_no_temporary_files(tmp_path, wikitext2_dir, monkeypatch):
    # a tiny copy of the corpus keeps this fast
    src = tmp_path / "src"
    src.mkdir()
    for name in ("train", "valid", "test"):
        text = open(os.path.join(wikitext2_dir, f"wiki.{name}.tokens"), encoding="utf-8").read()[:20_000]
        (src / f"wiki.{name}.tokens").write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    meta = wt2.prepare("wikitext-2-v1", source_dir=str(src), out_dir=str(out), verbose=False)
    assert sorted(os.listdir(out)) == ["manifest.json", "test.bin", "train.bin", "val.bin"]
    assert wt2.is_prepared(out_dir=str(out)) and all(n > 1000 for n in meta["tokens"].values())


def test_write_json_creates_the_directory_and_never_leaves_a_half_written_file(tmp_path):
    path = tmp_path / "a" / "b" / "result.json"
    assert write_json(str(path), {"x": [1, 2.5], "s": "é"}) == str(path)
    assert json.loads(path.read_text()) == {"x": [1, 2.5], "s": "é"}
    before = path.read_text()
    with pytest.raises(TypeError):  # a set is not JSON: the previous file stays as it was
        write_json(str(path), {"x": {1, 2}})
    assert path.read_text() == before
    assert os.listdir(path.parent) == ["result.json"]  # no temporary file left behind
    write_json(str(path), {"when": object()}, default=lambda o: "obj")  # dump keywords pass through
    assert json.loads(path.read_text()) == {"when": "obj"}


def test_a_broken_manifest_is_a_data_format_error(tmp_path):
    import data
    (tmp_path / "manifest.json").write_text('{"source": "x",\n "sizes": }\n')
    with pytest.raises(data.DataFormatError, match=r"manifest.json, line 2: not valid JSON .*; got ' \"sizes\": }'"):
        data.read_manifest(str(tmp_path))
    (tmp_path / "manifest.json").write_text("[1, 2]")
    with pytest.raises(data.DataFormatError, match="expected a JSON object"):
        data.read_manifest(str(tmp_path))
    assert data.read_manifest(str(tmp_path / "none")) is None
