# A very small GPT for smoke tests and CI: trains in seconds.
task = "lm"
n_layer = 2
n_head = 2
n_embd = 32
block_size = 64
batch_size = 4
max_iters = 20
lr_decay_iters = 20
warmup_iters = 2
learning_rate = 3e-3
min_lr = 3e-4
eval_interval = 10
eval_iters = 2
log_interval = 5
