# DenseAttention's Retrieval on top of LRA's (configs/lra/retrieval.py): the authors'
# dense_attn_aan_matching.json (docs/dense_attention.md, "DenseAttention's Long Range Arena
# settings"): hidden 128, 4 heads, 4000 bytes per document, first-token pooling (as LRA's), 6 layers
# cycling local / shifted-local / global with window 10, FFN l_inf rescaling at 1 / sqrt(8 C) (their
# default; appendix G); lr 1e-3, no weight decay, 5% warmup, cosine cycle 150,000 steps; batch not
# in the files read: LRA's 32. Their Adam settings are not in the files read: train.py's defaults
# replace LRA's.
#   python train.py configs/lra/retrieval.py configs/attention/dense.py configs/lra/dense/retrieval.py
n_layer = 6
dropout = 0.05
layer_scheme = "LSG"
window = 10
ffn_linf_norm = 0.03125
embedding_init_std = 0.02

max_iters = 150000
learning_rate = 1e-3
lr_schedule = "cosine"
warmup_iters = 7500
lr_decay_iters = 150000
min_lr = 0.0
weight_decay = 0.0
beta2 = 0.99
adam_eps = 1e-8
grad_clip = 1.0

eval_interval = 4600
