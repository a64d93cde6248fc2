# A GPT small enough to train on WikiText-2 in under an hour on a 2-core CPU.
# python train.py configs/wikitext2_gpt_mini.py
task = "lm"
dataset = "wikitext2"
dataset_config = "wikitext-2-v1"

n_layer = 4
n_head = 4
n_embd = 128
block_size = 1024  # the paper's tree block L = 1024
dropout = 0.0

batch_size = 4  # 4,096 tokens per iteration
gradient_accumulation_steps = 1
max_iters = 650
lr_decay_iters = 650
lr_schedule = "cosine"
warmup_iters = 50
learning_rate = 2e-3
min_lr = 1e-4
weight_decay = 0.1
grad_clip = 1.0

eval_interval = 100
eval_iters = 10
log_interval = 10
attention = "softmax"
