# DenseAttention's Text on top of LRA's (configs/lra/text.py): the authors' dense_attn_text_cls.json
# (docs/dense_attention.md, "DenseAttention's Long Range Arena settings"): hidden 512, 9 layers
# cycling local / shifted-local / global with window 10, 8 heads, length 4000, mean pooling, FFN
# l_inf rescaling at 1 / sqrt(8 C) (their default; appendix G); lr 2e-3, weight decay 0.1 (as
# LRA's), batch 100, 65 epochs of 25,000 = 16,250 steps, 10% warmup, cosine cycle 12,800 steps; val
# = test in their config, lra_options {'val': 'test'} here. Their Adam settings are not in the files
# read: train.py's defaults replace LRA's.
#   python train.py configs/lra/text.py configs/attention/dense.py configs/lra/dense/text.py
max_len = 4000
pooling = "mean"
lra_options = {"val": "test"}

n_layer = 9
n_head = 8
n_embd = 512
layer_scheme = "LSG"
window = 10
ffn_linf_norm = 0.01562
embedding_init_std = 0.02

batch_size = 100
max_iters = 16250
learning_rate = 2e-3
lr_schedule = "cosine"
warmup_iters = 1280
lr_decay_iters = 12800
min_lr = 0.0
beta2 = 0.99
adam_eps = 1e-8
grad_clip = 1.0

eval_interval = 250
