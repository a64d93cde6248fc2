# LRA ListOps on this machine (2 CPU cores) at LRA's full length 2000: 2 transformer layers (3
# DANet layers with configs/lra/dense/listops_cpu.py), width 64, 2 heads (head dim 32, FAST Table
# 2's), the same batch, steps and learning rate for every attention, so accuracies and steps per
# second compare. CLS pooling as LRA; batch 8 keeps softmax at ~1.3 s / iteration. Optimizer and
# schedule: train.py's defaults (AdamW lr 1e-3, warmup 100, cosine to 1e-4 at max_iters, weight
# decay 0.1, clipping 1.0), GPT-2's embeddings (learned positions, N(0, 0.02) tokens), no dropout.
# Time, s / iteration on one thread (a few timed iterations, machine busy) x 1,200 steps: softmax
# 1.3 (26 min), fastmax1 0.48 (10 min), fastmax2 1.9 (38 min), dense 0.43 (9 min); two threads
# about 1.6x faster (assumed). Plus 5 evaluations of 256 val examples + the 2,000 test examples:
# about 4 min (softmax, one thread); first run: generating the 96k / 2k / 2k ListOps files, about
# 3.5 CPU-minutes.
#   python train.py configs/lra/listops_cpu.py configs/attention/fastmax1.py      # or: scripts/sweeps/lra.sh
#   python train.py configs/lra/listops_cpu.py configs/attention/dense.py configs/lra/dense/listops_cpu.py
task = "classify"
lra_task = "listops"
max_len = 2000
pooling = "cls"
lra_options = {"workers": 1}

n_layer = 2
n_head = 2
n_embd = 64

batch_size = 8
max_iters = 1200
lr_decay_iters = 1200
eval_interval = 200
eval_max_batches = 32
