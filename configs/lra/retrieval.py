# LRA Retrieval (AAN), the papers' setting (for a GPU), from LRA's own files (google-research/
# long-range-arena at cd31e5c: lra_benchmarks/matching/configs/base_match_config.py and its
# train.py): batch 32, base lr 0.05 with constant * linear_warmup * rsqrt_decay (warmup 8000 > 5000
# steps: the rate never peaks, as in LRA; learning_rate = 0.05 / sqrt(8000)), emb 128, 4 heads, 4
# layers, MLP 512 (= 4C), CLS pooling, 4000 bytes per document, two towers, weight decay 0.1; LRA's
# TransformerEncoder embeddings (fixed sinusoidal positions, N(0, 1) tokens); Adam beta1 0.9
# (train.py's default), beta2 0.98, eps 1e-9, no gradient clipping. Evaluation on whole splits.
# Softmax; another attention is a layer:
#   python train.py configs/lra/retrieval.py configs/attention/fastmax1.py     # out/lra/retrieval_fastmax1
#   python train.py configs/lra/retrieval.py configs/attention/dense.py configs/lra/dense/retrieval.py
task = "classify"
lra_task = "retrieval"
max_len = 4000
pooling = "cls"

n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.1
pos_emb = "sinusoidal"
embedding_init_std = 1.0

batch_size = 32
max_iters = 5000
eval_interval = 500
learning_rate = 0.000559  # 0.05 / sqrt(warmup)
lr_schedule = "rsqrt"
warmup_iters = 8000
weight_decay = 0.1
beta2 = 0.98
adam_eps = 1e-9
grad_clip = 0.0
log_interval = 50
device = "cuda"
