# Reformer LSH attention with shared QK (Kitaev et al. 2020, section 2; docs/baselines.md):
# 8 hashing rounds, buckets of 64 tokens on average, chunks of 64 sorted positions
# (reformer-pytorch's defaults). LRA's Reformer: 1 round, 10 buckets, 10 chunks per sequence
# (configs/lra/reformer/<task>.py, e.g. Text's 1,001 positions: n_hashes=1, bucket_size=101).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/reformer.py
attention = "reformer"
attention_params = {"n_hashes": 8, "bucket_size": 64, "seed": 0}
