# LRA's Reformer on Text (google-research/long-range-arena at cd31e5c;
# lra_benchmarks/text_classification/configs/reformer_base.py sets only model_type): the defaults of
# models/reformer/reformer_attention.py (ReformerAttention, which models/reformer/reformer.py calls
# without them): n_hashes = 1, n_buckets = 10, and 10 chunks (lsh_attention_single_head cuts the
# sorted sequence into chunk_size = n_hashes * n_buckets chunks; chunk_len = 10 only pads the length
# by 10 - T % 10 positions): at LRA's 1,001 positions a chunk is (1001 + 9) / 10 = 101. The
# rotations: PRNGKey(0) in every call, layer and head. Ours: n_hashes 1, bucket_size 101 (10
# buckets), chunk_size 101 (10 chunks), seed 0 (fixed rotations shared by layers and heads, as
# LRA's; other numbers). Not exact (docs/baselines.md): LRA attends every key of the chunk and the
# one before (chunk 0: the last chunk), bucket or not, with unnormalised keys, no self or padding
# mask and scores multiplied by sqrt(D); ours the query's bucket only, normalised keys, the self
# rule, padding in a bucket of its own. This machine's config keeps LRA's length (the same values as
# the GPU file): 1,000 positions (1,000 bytes, mean pooling): n_buckets = ceil(1000 / 101) = 10 and
# 10 chunks of 101, not softmax.
#   python train.py configs/lra/text_cpu.py configs/attention/reformer.py configs/lra/reformer/text_cpu.py
attention_params = {"n_hashes": 1, "bucket_size": 101, "chunk_size": 101, "seed": 0}
