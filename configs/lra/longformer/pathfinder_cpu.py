# LRA's Longformer on Pathfinder (google-research/long-range-arena at cd31e5c;
# lra_benchmarks/image/configs/pathfinder32/longformer_base.py sets the model (2 layers, 2 heads,
# width 32, MLP 32), which is not taken: every attention runs the model of
# configs/lra/pathfinder[_cpu].py): sliding_window_size = 512 (models/longformer/longformer.py,
# LongformerEncoder's default) and no global tokens (global_mask = None, its default; image/train.py
# never sets it). Ours: window = 256 keys on each side, num_global = 0. Not exact
# (docs/baselines.md): LRA's 512 (longformer_attention.py, _build_sliding_window_mask) are 255 keys
# before the token, the token and 256 after; ours has 256 on each side, one key more. This machine's
# config keeps LRA's length (the same values as the GPU file): a query sees at most 513 of the 1,024
# positions (1,024 pixels, mean pooling), not softmax.
#   python train.py configs/lra/pathfinder_cpu.py configs/attention/longformer.py configs/lra/longformer/pathfinder_cpu.py
attention_params = {"window": 256, "num_global": 0}
