# LRA's Performer on Image (google-research/long-range-arena, lra_benchmarks/models/performer/
# performer.py: generalized attention by default): the ReLU kernel with deterministic features,
# phi(x) = ReLU(x) + 1e-3 over the head dim (ours scales x by D^(-1/4) first; docs/baselines.md).
#   python train.py configs/lra/image_cpu.py configs/attention/performer.py configs/lra/performer/image_cpu.py
attention_params = {"kernel": "relu", "features": "deterministic"}
