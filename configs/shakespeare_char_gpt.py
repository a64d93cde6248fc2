# A small character-level GPT on Tiny Shakespeare with softmax attention: the softmax model of the
# FAST paper's Figure 4 (attention maps, section 3.1) for issue 8. Its Fastmax p = 2 twin (the model
# of Figure 4 and of the Figure 2 dropout grid, scripts/sweeps/shakespeare_dropout.sh) is this file
# with configs/attention/fastmax2.py layered on it (identical except the attention).
#   python train.py configs/shakespeare_char_gpt.py --num_threads=2                 # out/shakespeare_char_gpt
#   python train.py configs/shakespeare_char_gpt.py configs/attention/fastmax2.py --num_threads=2
#   python -m scripts.analysis.attention_maps out/shakespeare_char_gpt out/shakespeare_char_gpt_fastmax2
# Data: data/shakespeare_char/prepare.py (65 characters, 90/5/5 train/val/test, prepared on the
# first run from $TINYSHAKESPEARE_FILE, a local copy of karpathy/char-rnn's
# data/tinyshakespeare/input.txt, else a download; the module docstring gives the full lookup order).
#
# Size and time: 0.80M parameters (non-embedding), 250 iterations x 4,096 characters = 1.02M
# characters (about one pass over the train split), an evaluation (8 batches per split) every 25
# iterations. Measured (5 iterations, 1 thread, while another 2-thread job shared the 2 cores):
# softmax 0.73 s per iteration, Fastmax p = 2 2.8 s per iteration (its chunked causal path; the
# attention is 2.2 s of it), 4.3 s in a second measurement under heavier load; attention dropout
# (any variant) costs about the same. Estimate with --num_threads=2 on an otherwise idle 2-core
# CPU (about 2x faster: 1.3x without the other job, 1.5x from the second thread; not measured, the
# cores were busy): softmax about 0.37 s per
# iteration, so about 2 minutes per run; Fastmax p = 2 about 1.45 s per iteration plus about 8 s
# per evaluation, so about 7-8 minutes per run (the runs the 6-8 minute budget was sized for).
# If the machine is busy, shorten a run with --max_iters=N (lr_decay_iters follows it; same for both models).
task = "lm"
dataset = "shakespeare_char"

n_layer = 4
n_head = 4
n_embd = 128  # head dim 32
block_size = 256
dropout = 0.0
# attention: softmax, train.py's default (configs/attention/<name>.py layers another)

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

eval_interval = 25  # 10 points per loss curve (scripts/analysis/loss_curves.py)
eval_iters = 8
log_interval = 5
