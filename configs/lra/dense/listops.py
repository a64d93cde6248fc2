# DenseAttention's ListOps on top of LRA's (configs/lra/listops.py): the authors'
# dense_attn_listops.json / deepspeed_config_listops.json (docs/dense_attention.md,
# "DenseAttention's Long Range Arena settings"): hidden 512, 8 heads, length 2000, first-token
# pooling (as LRA's), 9 layers cycling local / shifted-local / global with window 20, FFN l_inf
# rescaling at 1 / sqrt(8 C) (their default; appendix G); lr 1e-3, weight decay 0.1 (as LRA's),
# cosine with 10% warmup over 75,000 steps, batch 128. Their Adam settings are not in the files
# read: train.py's defaults replace LRA's.
#   python train.py configs/lra/listops.py configs/attention/dense.py configs/lra/dense/listops.py
n_layer = 9
dropout = 0.05
layer_scheme = "LSG"
window = 20
ffn_linf_norm = 0.01562
embedding_init_std = 0.02

batch_size = 128
max_iters = 75000
learning_rate = 1e-3
lr_schedule = "cosine"
warmup_iters = 7500
lr_decay_iters = 75000
min_lr = 0.0
beta2 = 0.99
adam_eps = 1e-8
grad_clip = 1.0

eval_interval = 750
