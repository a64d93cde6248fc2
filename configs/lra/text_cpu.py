# LRA Text on this machine (2 CPU cores) at LRA's length 1000 (DenseAttention's is 4000): 2
# transformer layers (3 DANet layers with configs/lra/dense/text_cpu.py), width 64, 2 heads (head
# dim 32, FAST Table 2's), the same batch, steps and learning rate for every attention, so
# accuracies and steps per second compare. Mean pooling (DenseAttention's choice for Text) learns
# faster than CLS in a short run; 4,000 steps = about 2.8 epochs (1,500 steps, one epoch, left
# every attention below 60%). Optimizer and schedule: train.py's defaults (AdamW lr 1e-3, warmup
# 100, cosine to 1e-4 at max_iters, weight decay 0.1, clipping 1.0), GPT-2's embeddings (learned
# positions, N(0, 0.02) tokens), no dropout.
# Time, s / iteration on one thread (a few timed iterations, machine busy) x 4,000 steps: softmax
# 0.78 (52 min), fastmax1 0.39 (26 min), fastmax2 2.17 (145 min), dense 0.47 (31 min); two threads
# about 1.6x faster (assumed). Plus 8 evaluations of 320 held-out reviews + 4,000 random test
# reviews (test_max_batches = 250; standard error about 0.8 points): about 3 min (softmax, one
# thread).
#   python train.py configs/lra/text_cpu.py configs/attention/fastmax1.py      # or: scripts/sweeps/lra.sh
#   python train.py configs/lra/text_cpu.py configs/attention/dense.py configs/lra/dense/text_cpu.py
task = "classify"
lra_task = "text"
max_len = 1000
pooling = "mean"

n_layer = 2
n_head = 2
n_embd = 64

batch_size = 16
max_iters = 4000
lr_decay_iters = 4000
eval_interval = 500
eval_max_batches = 20
test_max_batches = 250
