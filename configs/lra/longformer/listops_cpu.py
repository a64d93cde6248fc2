# LRA's Longformer on ListOps (google-research/long-range-arena at cd31e5c;
# lra_benchmarks/listops/configs/longformer_base.py sets only model_type): sliding_window_size = 512
# (models/longformer/longformer.py, LongformerEncoder's default) and no global tokens (global_mask =
# None, its default; listops/train.py never sets it). Ours: window = 256 keys on each side,
# num_global = 0. Not exact (docs/baselines.md): LRA's 512 (longformer_attention.py,
# _build_sliding_window_mask) are 255 keys before the token, the token and 256 after; ours has 256
# on each side, one key more. This machine's config keeps LRA's length (the same values as the GPU
# file): a query sees at most 513 of the 2,001 positions (2,000 tokens + CLS), not softmax.
#   python train.py configs/lra/listops_cpu.py configs/attention/longformer.py configs/lra/longformer/listops_cpu.py
attention_params = {"window": 256, "num_global": 0}
