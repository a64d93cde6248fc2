# LRA Pathfinder32, the papers' setting (for a GPU), from LRA's own files (google-research/
# long-range-arena at cd31e5c: lra_benchmarks/image/configs/pathfinder32/base_pathfinder32_config.py
# and image/train.py): batch 512, lr 1e-3, linear warmup 1 epoch (312 steps) + cosine over all
# steps (steps_per_cycle; no floor), 200 epochs of 160,000 = 62,400 steps, emb 32, 2 heads, 1
# layer, MLP 32 (ours 4C = 128), dropout 0.1, MEAN pooling, LRA's TransformerEncoder embeddings
# (fixed sinusoidal positions, N(0, 1) tokens), no weight decay; Adam beta1 0.9 (train.py's
# default), beta2 0.98, eps 1e-9, no gradient clipping. Evaluation on whole splits. Data: 200,000
# generated images of curv_contour_length_14 (160k / 20k / 20k). Softmax; another attention is a
# layer:
#   python train.py configs/lra/pathfinder.py configs/attention/fastmax1.py     # out/lra/pathfinder_fastmax1
#   python train.py configs/lra/pathfinder.py configs/attention/dense.py configs/lra/dense/pathfinder.py
task = "classify"
lra_task = "pathfinder"
max_len = 1024
pooling = "mean"
lra_options = {"resolution": 32, "difficulty": "curv_contour_length_14", "num": 200000}

n_layer = 1
n_head = 2
n_embd = 32
dropout = 0.1
pos_emb = "sinusoidal"
embedding_init_std = 1.0

batch_size = 512
max_iters = 62400
eval_interval = 312
learning_rate = 1e-3
lr_schedule = "cosine"
warmup_iters = 312
lr_decay_iters = 62712  # warmup + all steps
min_lr = 0.0
weight_decay = 0.0
beta2 = 0.98
adam_eps = 1e-9
grad_clip = 0.0
log_interval = 50
device = "cuda"
