# Multi-query associative recall, the reference cell (tasks/recall.py; Zoology, Arora et al. 2023,
# "Zoology: Measuring and Improving Recall in Efficient Language Models", Figure 2): length 256,
# 16 key-value pairs, width 64, 2 layers, one head, vocabulary 8,192, no token shift.
#   python train.py configs/recall/mqar.py [configs/attention/<name>.py]
# Cells of the sweep override block_size, recall_pairs and n_embd (scripts/sweeps/recall.sh).
task = "recall"
block_size = 256
recall_pairs = 16
recall_vocab = 8192
n_layer = 2
n_head = 1
n_embd = 64
# The model of Zoology's Figure 2 (attention-only blocks, an untied LM head, PyTorch's default
# Linear initialisation, token embeddings N(0, 1)): with GPT-2's initialisation instead (Linear and
# embeddings N(0, 0.02^2), tied head) softmax stays at accuracy about 1 / N without a token shift
# (docs/recall.md, "The 1/N plateau and its cause": each of the three is necessary at 64/4).
# Sinusoidal positions instead of their learned ones: at 256/16 the lookup began earlier in every
# seed tried (docs/recall.md); the table is the sum of a sine/cosine pair per frequency, amplitude 1.
token_shift = False
mlp = False
tie_lm_head = False
linear_init = "pytorch"
embedding_init_std = 1.0
pos_emb = "sinusoidal"
dropout = 0.0
# Zoology's optimizer: AdamW (0.9, 0.999), weight decay 0.1, a constant rate, no clipping (a cosine
# decay ends the rate before the lookup forms at 64/4; docs/recall.md).
batch_size = 64
learning_rate = 3e-3
weight_decay = 0.1
beta2 = 0.999
grad_clip = 0.0
lr_schedule = "constant"
warmup_iters = 0
max_iters = 1500
lr_decay_iters = 1500
eval_interval = 100
log_interval = 20
