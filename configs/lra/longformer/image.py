# LRA's Longformer on Image (google-research/long-range-arena at cd31e5c;
# lra_benchmarks/image/configs/cifar10/longformer_base.py sets the model (4 layers, width 128, 4
# heads, MLP 128, MEAN pooling), which is not taken: every attention runs the model of
# configs/lra/image[_cpu].py): sliding_window_size = 512 (models/longformer/longformer.py,
# LongformerEncoder's default) and no global tokens (global_mask = None, its default; image/train.py
# never sets it). Ours: window = 256 keys on each side, num_global = 0. Not exact
# (docs/baselines.md): LRA's 512 (longformer_attention.py, _build_sliding_window_mask) are 255 keys
# before the token, the token and 256 after; ours has 256 on each side, one key more. The task's
# length: a query sees at most 513 of the 1,025 positions (1,024 pixels + CLS), not softmax.
#   python train.py configs/lra/image.py configs/attention/longformer.py configs/lra/longformer/image.py
attention_params = {"window": 256, "num_global": 0}
