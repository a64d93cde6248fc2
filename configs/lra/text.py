# LRA Text (byte-level IMDB), the papers' setting (for a GPU), from LRA's own files
# (google-research/long-range-arena at cd31e5c: lra_benchmarks/text_classification/configs/
# base_tc_config.py and its train.py): batch 32, base lr 0.05 with constant * linear_warmup *
# rsqrt_decay (warmup 8000; learning_rate is the peak, 0.05 / sqrt(8000)), 20,000 steps, emb 256, 4
# heads, 4 layers, MLP 1024 (= 4C), CLS pooling, length 1000, weight decay 0.1; LRA's
# TransformerEncoder embeddings (fixed sinusoidal positions, N(0, 1) tokens); Adam beta1 0.9
# (train.py's default), beta2 0.98, eps 1e-9, no gradient clipping. Evaluation on whole splits.
# Val = a 10% hold-out of train (data/lra/text.py); lra_options = {'val': 'test'} is LRA's choice.
# Softmax; another attention is a layer (FAST swapped only the attention):
#   python train.py configs/lra/text.py configs/attention/fastmax1.py     # out/lra/text_fastmax1
#   python train.py configs/lra/text.py configs/attention/dense.py configs/lra/dense/text.py
task = "classify"
lra_task = "text"
max_len = 1000
pooling = "cls"

n_layer = 4
n_head = 4
n_embd = 256
dropout = 0.1
pos_emb = "sinusoidal"
embedding_init_std = 1.0

batch_size = 32
max_iters = 20000
eval_interval = 1000
learning_rate = 0.000559  # 0.05 / sqrt(warmup)
lr_schedule = "rsqrt"
warmup_iters = 8000
weight_decay = 0.1
beta2 = 0.98
adam_eps = 1e-9
grad_clip = 0.0
log_interval = 50
device = "cuda"
