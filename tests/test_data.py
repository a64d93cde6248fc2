import json
import os

import numpy as np

from data.wikitext2 import prepare as wt2

# GPT-2 BPE token counts of the WikiText-2 v1 copy in ../shared (sha256 recorded in meta.json)
EXPECTED_TOKENS = {"train": 2_448_405, "val": 258_659, "test": 295_877}


def test_prepare_real_wikitext2(tmp_path, wikitext2_dir):
    out = tmp_path / "wt2"
    meta = wt2.prepare("wikitext-2-v1", source_dir=wikitext2_dir, out_dir=str(out), verbose=False)
    assert meta["tokens"] == EXPECTED_TOKENS
    for split, n in EXPECTED_TOKENS.items():
        ids = np.fromfile(out / f"{split}.bin", dtype=np.uint16)
        assert ids.size == n and ids.max() < 50257
    assert json.loads((out / "meta.json").read_text())["sha256"]["test"].startswith("d790b833")
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
