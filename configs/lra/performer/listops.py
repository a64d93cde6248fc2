# LRA's Performer on ListOps (google-research/long-range-arena, lra_benchmarks/listops/configs/
# performer_base.py): the softmax kernel with 2 orthogonal features (chi norms). LRA draws new
# features at every call; ours are redrawn at every optimizer step (docs/baselines.md).
#   python train.py configs/lra/listops.py configs/attention/performer.py configs/lra/performer/listops.py
attention_params = {"kernel": "softmax", "num_features": 2, "redraw_interval": 1}
