# The mini GPT of configs/wikitext2_gpt_mini.py with Fastmax p = 1 attention (FAST paper, Eq. 5-10:
# f(s) = 1 + s, s = q_hat . k_hat) instead of softmax: the same data, model size,
# iterations, tokens per iteration and schedule (650 x 4,096 = 2.66M GPT-2 BPE tokens).
# normalization = the module's default (see docs/fastmax.md for the choice).
#   python train.py configs/wikitext2_gpt_mini_fastmax1.py
#   python eval_ppl.py --out_dir=out/wikitext2_gpt_mini_fastmax1 --split=test --protocol=blocks
task = "lm"
dataset = "wikitext2"
dataset_config = "wikitext-2-v1"

n_layer = 4
n_head = 4
n_embd = 128
block_size = 1024
dropout = 0.0
attention = "fastmax"
attention_params = {"p": 1}

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
