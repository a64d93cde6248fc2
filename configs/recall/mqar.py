# Multi-query associative recall, the reference cell (tasks/recall.py; Zoology, Arora et al. 2023,
# Figure 2): length 256, 16 key-value pairs, width 64, 2 layers, one head, vocabulary 8,192.
#   python train.py configs/recall/mqar.py [configs/attention/<name>.py]
# Cells of the sweep override block_size, recall_pairs and n_embd (scripts/sweeps/recall.sh).
task = "recall"
block_size = 256
recall_pairs = 16
recall_vocab = 8192
n_layer = 2
n_head = 1
n_embd = 64
# A token shift (model.ModelConfig.token_shift) hands each value position its key, so the task
# measures the lookup the attentions differ in. Without it a 2-layer softmax model here (ours and
# Zoology's own model, same data) stays at accuracy 1 / N for 1,000-4,000 steps while a
# previous-token head has to form first (docs/recall.md); Zoology trains up to 64 epochs of 100k.
token_shift = True
dropout = 0.0
batch_size = 64
learning_rate = 3e-3
weight_decay = 0.1
beta2 = 0.99
max_iters = 1000
lr_decay_iters = 1000
warmup_iters = 50
min_lr = 3e-4
eval_interval = 100
log_interval = 20
