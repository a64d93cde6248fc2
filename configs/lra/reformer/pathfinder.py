# LRA's Reformer on Pathfinder (google-research/long-range-arena at cd31e5c;
# lra_benchmarks/image/configs/pathfinder32/reformer_base.py sets the model (2 layers, 8 heads,
# width 64, MLP 64, dropout 0.2), which is not taken: every attention runs the model of
# configs/lra/pathfinder[_cpu].py): the defaults of models/reformer/reformer_attention.py
# (ReformerAttention, which models/reformer/reformer.py calls without them): n_hashes = 1, n_buckets
# = 10, and 10 chunks (lsh_attention_single_head cuts the sorted sequence into chunk_size = n_hashes
# * n_buckets chunks; chunk_len = 10 only pads the length by 10 - T % 10 positions): at LRA's 1,024
# positions a chunk is (1024 + 6) / 10 = 103. The rotations: PRNGKey(0) in every call, layer and
# head. Ours: n_hashes 1, bucket_size 103 (10 buckets), chunk_size 103 (10 chunks), seed 0 (fixed
# rotations shared by layers and heads, as LRA's; other numbers). Not exact (docs/baselines.md): LRA
# attends every key of the chunk and the one before (chunk 0: the last chunk), bucket or not, with
# unnormalised keys, no self or padding mask and scores multiplied by sqrt(D); ours the query's
# bucket only, normalised keys, the self rule, padding in a bucket of its own. The task's length:
# 1,024 positions (1,024 pixels, mean pooling): n_buckets = ceil(1024 / 103) = 10 and 10 chunks of
# 103, not softmax.
#   python train.py configs/lra/pathfinder.py configs/attention/reformer.py configs/lra/reformer/pathfinder.py
attention_params = {"n_hashes": 1, "bucket_size": 103, "chunk_size": 103, "seed": 0}
