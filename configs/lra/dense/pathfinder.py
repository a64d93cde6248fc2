# DenseAttention's Pathfinder32 on top of LRA's (configs/lra/pathfinder.py): the authors'
# dense_attn_pathfinder32.json (docs/dense_attention.md, "DenseAttention's Long Range Arena
# settings"): hidden 128, 6 layers cycling local / shifted-local / global with window 256, 8 heads,
# first-token pooling, no dropout, FFN l_inf rescaling at 1 / sqrt(8 C) (their default; appendix G);
# lr 1e-3 (as LRA's), weight decay 0.1, 10% warmup, cosine cycle 320,000 steps (to 0, as LRA's);
# batch not in the files read: 100 assumed (210 epochs of 160,000). Their Adam settings are not in
# the files read: train.py's defaults replace LRA's.
#   python train.py configs/lra/pathfinder.py configs/attention/dense.py configs/lra/dense/pathfinder.py
pooling = "cls"

n_layer = 6
n_head = 8
n_embd = 128
dropout = 0.0
layer_scheme = "LSG"
window = 256
ffn_linf_norm = 0.03125
embedding_init_std = 0.02

batch_size = 100
max_iters = 320000
warmup_iters = 32000
lr_decay_iters = 320000
weight_decay = 0.1
beta2 = 0.99
adam_eps = 1e-8
grad_clip = 1.0

eval_interval = 1600
