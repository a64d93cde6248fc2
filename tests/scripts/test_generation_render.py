"""scripts/analysis/published/generation.py, docs/generation.md's renderers, on small fixture files
written here in the shapes scripts/bench/decode.py and scripts/analysis/decode_quality.py write: a
number changed in a fixture shows in the rendered text, an aim's verdict follows its numbers, and a
missing source raises SourceMissing (through ``published.render``, so the renderers are
registered)."""
import copy
import json

import pytest

from scripts.analysis import published
from scripts.analysis.published import generation
from scripts.analysis.published.loading import RenderError, SourceMissing

DECODE = "results/decode/2026-01-01_intel-xeon/decode.json"
QUALITY = "results/decode_quality/gpt_mini/quality.json"


def decode_row(suite, method, kind, L, seconds, ratio, state, mode="decode", note=""):
    return {"suite": suite, "method": method, "spec": method, "decode": kind, "mode": mode, "context": L, "steps": 16,
            "repeats": 5, "seconds_per_token": seconds, "seconds_min": seconds, "seconds_max": seconds,
            "ratio_to_baseline": ratio, "prefill_seconds": 0.1, "state_bytes": state,
            "inner_products_per_token": None, "terms_per_token": None, "note": note}


DECODE_PAYLOAD = {
    "settings": {"repeats": 5, "steps": 16, "heads": 8, "D": 64, "dtype": "float32", "threads": 2, "quick": False,
                 "gpt_config": "configs/wikitext2_gpt_mini.py", "machine": {"cpu": "Intel(R) Xeon(R) Processor"}},
    "methods": [],
    "rows": [
        decode_row("layer", "softmax", "kv_cache", 1024, 8e-4, 1.0, 8 * 2 ** 20),
        decode_row("layer", "softmax", "kv_cache", 65536, 9e-3, 1.0, 512 * 2 ** 20),
        decode_row("layer", "linear", "state", 1024, 1e-4, 0.125, 133120),
        decode_row("layer", "linear", "state", 65536, 1.1e-4, 0.0122, 133120),
        decode_row("layer", "softmax_reference", "kv_cache", 1024, 4e-4, 0.5, 8 * 2 ** 20),
        decode_row("layer", "softmax_reference", "kv_cache", 65536, None, None, None,
                   note="skipped: prefill estimated at 384.0 GB > 11.7 GB (--max_gb)"),
        decode_row("gpt", "softmax", "kv_cache", 1024, 2e-3, 1.0, 4 * 2 ** 20),
        decode_row("gpt", "softmax (recompute)", "kv_cache", 1024, 5e-2, 25.0, None, mode="recompute"),
    ],
    "aims": {
        "state_time_flat": {"limit": 1.2, "met": True, "methods": [
            {"method": "linear", "reference_context": 1024, "largest_context": 65536, "ratio": 1.1, "met": True}]},
        "state_bytes_constant": {"met": True, "methods": [{"method": "linear", "bytes": [133120], "met": True}]},
        "tree_inner_products": {"method": "tree", "E": 0.5, "tolerance": 0.1, "slope": 0.52, "met": True,
                                "per_context": [{"context": 1024, "inner_products": 40, "over_L_to_E": 1.25},
                                                {"context": 65536, "inner_products": 400, "over_L_to_E": 1.56}]},
        "tree_crossover": {"method": "tree", "baseline": "softmax", "context": 8000,
                           "words": "above about 8,000 tokens", "met": True},
    },
}


def summary(mean, low, high, median, lo, hi):
    return {"mean": mean, "median": median, "min": lo, "max": hi, "ci_low": low, "ci_high": high}


QUALITY_PAYLOAD = {
    "settings": {"prompts": 100, "prompt_len": 256, "steps": 64, "seed": 0, "split": "test", "bootstrap": 1000},
    "model": {"source": "out/wikitext2_gpt_mini", "train": {"commit": "0123456789abcdef0123"}},
    "reference": {"attention": "softmax", "params": {},
                  "agreement_with_own_greedy": summary(1.0, None, None, 1.0, 1.0, 1.0)},
    "methods": [
        {"method": "tree:E=0.2", "name": "tree", "params": {"E": 0.2},
         "agreement": summary(0.61, 0.58, 0.64, 0.62, 0.3, 0.9), "kl": summary(0.4123, 0.39, 0.43, 0.41, 0.1, 0.9)},
        {"method": "longformer:window=32", "name": "longformer", "params": {"window": 32},
         "agreement": summary(0.8, 0.78, 0.82, 0.81, 0.5, 1.0), "kl": summary(0.1, 0.09, 0.11, 0.1, 0.01, 0.3)},
    ],
}


def write(root, rel, payload):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload))


def test_decode_table_follows_its_numbers(tmp_path):
    write(tmp_path, DECODE, DECODE_PAYLOAD)
    text = published.render(f"decode_table {DECODE}", str(tmp_path))
    assert "| method | decode | L = 1,024 (ms) | L = 65,536 (ms) | state bytes |" in text
    assert "| linear | state | 0.1 [0.1-0.1] (0.12x) | 0.11 [0.11-0.11] (0.01x) | 130 KiB |" in text
    assert "| softmax | kv_cache | 0.8 [0.8-0.8] | 9 [9-9] | 8.0 MiB-512 MiB |" in text
    assert "| softmax_reference | kv_cache | 0.4 [0.4-0.4] (0.50x) | skipped (memory) | 8.0 MiB |" in text
    assert "median of 5 samples of 16 tokens" in text and "Intel Xeon, 2 threads." in text
    changed = copy.deepcopy(DECODE_PAYLOAD)
    changed["rows"][2].update(seconds_per_token=2.34e-4, seconds_min=2.1e-4, seconds_max=2.5e-4)
    write(tmp_path, DECODE, changed)
    assert "| linear | state | 0.234 [0.21-0.25] (0.12x) |" in published.render(f"decode_table {DECODE}", str(tmp_path))
    gpt = published.render(f"decode_table {DECODE} suite=gpt", str(tmp_path))
    assert "| softmax (recompute) | kv_cache, recompute | 50 [50-50] (25x) | - |" in gpt and "GPT mini" in gpt
    with pytest.raises(RenderError, match="suite"):
        published.render(f"decode_table {DECODE} suite=nope", str(tmp_path))


def test_decode_aims_verdicts_follow_the_numbers(tmp_path):
    write(tmp_path, DECODE, DECODE_PAYLOAD)
    text = published.render(f"decode_aims {DECODE}", str(tmp_path))
    assert "linear 1.10x (65,536 over 1,024) | met |" in text
    assert "tree: slope 0.52 (aim 0.5 ± 0.1); inner products / L^0.5 1.25-1.56 | met |" in text
    assert "tree: above about 8,000 tokens | met |" in text
    missed = copy.deepcopy(DECODE_PAYLOAD)
    missed["aims"]["state_time_flat"]["methods"][0].update(ratio=1.5, met=False)
    missed["aims"]["state_time_flat"]["met"] = False
    missed["aims"]["tree_crossover"].update(context=None, words="not reached in the range", met=False)
    missed["aims"]["tree_inner_products"] = {"method": None, "E": 0.5, "tolerance": 0.1, "slope": None,
                                             "per_context": [], "met": None, "note": "no tree decode path"}
    write(tmp_path, DECODE, missed)
    text = published.render(f"decode_aims {DECODE}", str(tmp_path))
    assert "linear 1.50x (missed) (65,536 over 1,024) | not met |" in text
    assert "tree: not reached in the range | not met |" in text
    assert "| - | not measured (no tree decode path) |" in text


def test_decode_quality_table_follows_its_numbers(tmp_path):
    write(tmp_path, QUALITY, QUALITY_PAYLOAD)
    text = published.render(f"decode_quality {QUALITY}", str(tmp_path))
    assert "| tree:E=0.2 | 0.610 [0.580, 0.640] | 0.620 (0.300-0.900) | 0.4123 [0.3900, 0.4300] |" in text
    assert "100 prompts of 256 tokens" in text and "64 steps" in text and "(trained at 0123456789ab)" in text
    changed = copy.deepcopy(QUALITY_PAYLOAD)
    changed["methods"][1]["agreement"]["mean"] = 0.777
    write(tmp_path, QUALITY, changed)
    assert "| longformer:window=32 | 0.777 [0.780, 0.820] |" in published.render(f"decode_quality {QUALITY}",
                                                                                 str(tmp_path))


@pytest.mark.parametrize("spec", [f"decode_table {DECODE}", f"decode_table {DECODE} suite=gpt",
                                  f"decode_aims {DECODE}", f"decode_quality {QUALITY}"])
def test_a_missing_source_raises_source_missing(tmp_path, spec):
    with pytest.raises(SourceMissing):
        published.render(spec, str(tmp_path))


def test_a_file_without_rows_or_methods_is_a_missing_source(tmp_path):
    write(tmp_path, DECODE, {**DECODE_PAYLOAD, "rows": []})
    write(tmp_path, QUALITY, {**QUALITY_PAYLOAD, "methods": []})
    with pytest.raises(SourceMissing):
        generation.render_decode_table(str(tmp_path), DECODE)
    with pytest.raises(SourceMissing):
        generation.render_decode_quality(str(tmp_path), QUALITY)
    write(tmp_path, DECODE, {**DECODE_PAYLOAD, "rows": DECODE_PAYLOAD["rows"][:6]})  # no GPT rows
    with pytest.raises(SourceMissing):
        generation.render_decode_table(str(tmp_path), DECODE, suite="gpt")


def test_sizes_and_times_as_printed():
    assert [generation.size(n) for n in (512, 133120, 8 * 2 ** 20, 512 * 2 ** 20, 1.25 * 2 ** 30)] == [
        "512 B", "130 KiB", "8.0 MiB", "512 MiB", "1.2 GiB"]
    assert [generation.milliseconds(s) for s in (8.21e-5, 1.234e-3, 4.56e-2, 0.1204)] == ["0.0821", "1.23", "45.6",
                                                                                         "120"]
