# DenseAttention's Image on top of LRA's (configs/lra/image.py): the authors' dense_attn_cifar.json
# (docs/dense_attention.md, "DenseAttention's Long Range Arena settings"): hidden 256, 9 layers
# cycling local / shifted-local / global with window 64, 4 heads, mean pooling, FFN l_inf rescaling
# at 1 / sqrt(8 C) (their default; appendix G), Cosine RelPE instead of learned positions; lr 1e-2,
# weight decay 0.1, 5% warmup, cosine cycle 45,000 steps (to 0, as LRA's); batch not in the files
# read: LRA's 256. Their Adam settings are not in the files read: train.py's defaults replace LRA's.
#   python train.py configs/lra/image.py configs/attention/dense.py configs/lra/dense/image.py
pooling = "mean"

n_layer = 9
n_head = 4
n_embd = 256
dropout = 0.05
layer_scheme = "LSG"
window = 64
ffn_linf_norm = 0.0221
embedding_init_std = 0.02

max_iters = 45000
learning_rate = 1e-2
warmup_iters = 2250
lr_decay_iters = 45000
weight_decay = 0.1
beta2 = 0.99
adam_eps = 1e-8
grad_clip = 1.0
