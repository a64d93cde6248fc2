# The character-level GPT of configs/shakespeare_char_gpt.py with Fastmax p = 2 attention (FAST
# paper, Eq. 5-10: f(s) = 1 + s + s^2/2 of the normalized scores; the module's default
# normalization) instead of softmax: the same data, size, iterations and schedule. The Fastmax model
# of the paper's Figure 4, and the model of the Figure 2 dropout grid
# (scripts/sweeps/shakespeare_dropout.sh adds --attention.dropout=... --attention.dropout_variant=...).
#   python train.py configs/shakespeare_char_gpt_fastmax2.py --num_threads=2
# Time (see configs/shakespeare_char_gpt.py): measured 2.8-4.3 s per iteration on 1 thread of a
# shared CPU (the same with attention dropout); estimated about 1.45 s per iteration with
# --num_threads=2 on an idle 2-core CPU, so about 7-8 minutes for the 250 iterations and 10
# evaluations (up to about twice that if the cores are shared with another job).
task = "lm"
dataset = "shakespeare_char"

n_layer = 4
n_head = 4
n_embd = 128  # head dim 32
block_size = 256
dropout = 0.0
attention = "fastmax"
attention_params = {"p": 2}

batch_size = 16  # 4,096 characters per iteration
gradient_accumulation_steps = 1
max_iters = 250
lr_decay_iters = 250
lr_schedule = "cosine"
warmup_iters = 25
learning_rate = 2e-3
min_lr = 2e-4
weight_decay = 0.1
grad_clip = 1.0

eval_interval = 25
eval_iters = 8
log_interval = 5
