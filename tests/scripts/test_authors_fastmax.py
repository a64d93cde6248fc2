"""scripts/bench/authors_fastmax.py without the authors' code: stand-ins written here implement
their formulation (our authors_baseline.py with their normalization and parameterisation), laid out
as in their repositories, so that loading, the parameter mapping and the comparison logic run."""
import json
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scripts.bench import authors_fastmax as cmp

# armingerami/fastmax example.py: module-level CUDA import and GPU assert, which the loader must skip
EXAMPLE_PY = '''
import fastmax_cuda
assert torch.cuda.is_available()


def fastmax_function(q, k, v, mask=0, dropout_rate=0.0, normalize=0, temperature=1, a0=1, a1=1, a2=0.5, lim=1,
                     p=2, create_attn_matrix=0):
    from attention.fastmax.authors_baseline import authors_formulation
    from attention.fastmax.reference import normalize_qk
    if normalize:  # the whole sequence's largest norm, also when causal (as theirs)
        q, k = normalize_qk(q, k, "max_norm", lim, causal=False)
    # their temperature is overwritten with 1
    return authors_formulation(q, k, v, bool(mask), p=p, a0=a0, a1=a1, a2=a2, temperature=1.0,
                               normalization="none")
'''

# armingerami/reproducing_fastmax_results attention_mechanisms/fastattention_einops.py
EINOPS_PY = '''
import math
from attention.fastmax.authors_baseline import authors_formulation


def fastmax(q, k, v, mask=True, normalize_term=8, tensors_normalized=False, p=1, dropout_rate=0.0,
            create_attn=False):
    term = 1.0 if tensors_normalized else normalize_term * math.sqrt(q.shape[-1])
    return authors_formulation(q, k, v, bool(mask), p=p, temperature=term, normalization="none")
'''


@pytest.fixture
def authors_dir(tmp_path):
    (tmp_path / "fastmax").mkdir()
    (tmp_path / "fastmax" / "example.py").write_text(EXAMPLE_PY)
    einops_dir = tmp_path / "reproducing_fastmax_results" / "attention_mechanisms"
    einops_dir.mkdir(parents=True)
    (einops_dir / "fastattention_einops.py").write_text(EINOPS_PY)
    return tmp_path


def test_stand_ins_match_where_the_mapping_says_so(authors_dir, tmp_path):
    out = tmp_path / "cmp"
    result = cmp.main(["--authors_dir", str(authors_dir), "--no_time", "--T", "24", "--check_D", "4",
                       "--check_heads", "2", "--threads", "1", "--out", str(out)])
    rows = result["check_rows"]
    assert {r["variant"] for r in rows} == {"fastmax_function", "fastattention_einops"}  # score_function absent
    # 2 p x 2 dtypes x (fastmax_function: 2 + 1 + 2 causal flags; einops: 2 + 2)
    assert len(rows) == 2 * 2 * (5 + 4)
    same = [r for r in rows if r["same_function"]]
    assert same and all(r["match"] for r in same), [r for r in same if not r["match"]]
    assert all(r["out_rel"] < 1e-12 for r in same if r["dtype"] == "float64")
    # causal max_norm: whole-sequence max (theirs) vs running max (ours) differ and theirs sees the future
    different = [r for r in rows if not r["same_function"]]
    assert {(r["setting"], r["causal"]) for r in different} == {("normalize=True", True)}
    assert all(r["out_rel"] > 1e-3 and r["leak_theirs"] > 1e-3 and r["leak_ours"] < 1e-12 for r in different)
    causal_same = [r for r in same if r["causal"]]
    assert all(r["leak_ours"] < 1e-12 for r in causal_same)
    data = json.loads((tmp_path / "cmp.json").read_text())
    assert data["summary"]["same_function_mismatches"] == []
    assert data["settings"]["authors"]["fastmax_function"]["repo"] == "armingerami/fastmax"
    assert "temperature=8*sqrt(D)" in data["settings"]["mapping"]["fastattention_einops | normalize_term=8"]["ours"]
    assert data["findings"]["temperature_ignored_normalize_False"]["max_abs_change_temperature_1_vs_4"] == 0.0
    assert (tmp_path / "cmp.csv").read_text().count("\n") == len(rows) + 1
    assert (tmp_path / "cmp.png").stat().st_size > 0


def test_a_wrong_mapping_is_reported(authors_dir):
    loaded = cmp.load_authors(str(authors_dir))
    setting = dict(cmp.SETTINGS[3], ours=lambda D: dict(normalization="none", temperature=math_sqrt(D)))
    row = cmp.compare_setting(loaded["fastattention_einops"]["fn"], setting, 2, False, torch.float64, 16, 4, 1)
    assert row["same_function"] and not row["match"] and row["out_rel"] > 1e-6


def math_sqrt(x):  # temperature sqrt(D) instead of their 8 sqrt(D)
    return x ** 0.5


def test_missing_authors_dir_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cmp.main(["--authors_dir", str(tmp_path / "nowhere"), "--no_time"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "git clone https://github.com/armingerami/fastmax" in err
    with pytest.raises(SystemExit):
        cmp.main(["--authors_dir", str(tmp_path), "--no_time"])  # exists, but none of their files
    assert "holds none of the authors' files" in capsys.readouterr().err
