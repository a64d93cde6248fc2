# LRA ListOps, the papers' setting (for a GPU), from LRA's own files (google-research/
# long-range-arena at cd31e5c: lra_benchmarks/listops/configs/base_listops_config.py and
# listops/train.py): batch 32, base lr 0.05 with constant * linear_warmup * rsqrt_decay (warmup
# 1000; learning_rate is the peak, 0.05 / sqrt(1000)), 5000 steps, emb 512, 8 heads, 4 layers, MLP
# 1024 (ours 4C = 2048), CLS pooling, weight decay 0.1; LRA's TransformerEncoder embeddings (fixed
# sinusoidal positions, N(0, 1) tokens); Adam beta1 0.9 (train.py's default), beta2 0.98, eps 1e-9,
# no gradient clipping. Evaluation on whole splits (eval_max_batches = 0, the default). docs/lra.md
# lists what still differs from LRA. Softmax; another attention is a layer (FAST swapped only it):
#   python train.py configs/lra/listops.py configs/attention/fastmax1.py     # out/lra/listops_fastmax1
#   python train.py configs/lra/listops.py configs/attention/dense.py configs/lra/dense/listops.py
task = "classify"
lra_task = "listops"
max_len = 2000
pooling = "cls"

n_layer = 4
n_head = 8
n_embd = 512
dropout = 0.1
pos_emb = "sinusoidal"
embedding_init_std = 1.0

batch_size = 32
max_iters = 5000
eval_interval = 500
learning_rate = 0.0015811  # 0.05 / sqrt(warmup)
lr_schedule = "rsqrt"
warmup_iters = 1000
weight_decay = 0.1
beta2 = 0.98
adam_eps = 1e-9
grad_clip = 0.0
log_interval = 50
device = "cuda"
