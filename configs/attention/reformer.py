# Reformer LSH attention with shared QK (Kitaev et al. 2020, section 2; docs/baselines.md):
# 8 hashing rounds, buckets of 64 tokens on average, chunks of 64 sorted positions
# (reformer-pytorch's defaults). LRA's Reformer: 1 round, 10 buckets, 10 chunks per sequence
# (at LRA Text's 4,000 tokens: n_hashes=1, bucket_size=400, chunk_size=400).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/reformer.py
attention = "reformer"
attention_params = {"n_hashes": 8, "bucket_size": 64, "seed": 0}
