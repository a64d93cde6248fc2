import json

import numpy as np
import pytest

from scripts.analysis import per_position_table as ppt


def test_buckets_cover_every_context_length_once():
    buckets = ppt.buckets_for(1023)
    assert buckets[:4] == [(1, 1), (2, 2), (3, 4), (5, 8)]
    assert buckets[-1] == (513, 1023)
    covered = [c for lo, hi in buckets for c in range(lo, hi + 1)]
    assert covered == list(range(1, 1024))


def test_bucket_means_are_token_weighted():
    context = np.array([1, 2, 3, 4])
    count = np.array([10, 10, 1, 3])
    nll = np.array([5.0, 4.0, 2.0, 6.0])
    means, counts = ppt.bucket_means(context, count, nll, [(1, 1), (2, 2), (3, 4)])
    assert counts == [10, 10, 4]
    assert means[:2] == [5.0, 4.0]
    assert means[2] == pytest.approx((1 * 2.0 + 3 * 6.0) / 4)


def test_cli_writes_table_and_rejects_files_without_positions(tmp_path):
    L = 16
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"per_position": {"context_length": list(range(1, L)), "count": [2] * (L - 1),
                                                 "mean_nll": [float(c) for c in range(1, L)]}}))
    out = tmp_path / "pp"
    ppt.main([str(good), str(good), "--labels=a,b", f"--out={out}"])
    rows = (tmp_path / "pp.csv").read_text().splitlines()
    assert rows[0] == "model,context_lo,context_hi,tokens,mean_nll"
    assert "a,9,15,14,12.000000" in rows  # mean of 9..15
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"value": 1.0}))
    with pytest.raises(ValueError, match="per_position"):
        ppt.main([str(bad), f"--out={out}"])
