# LRA Retrieval on this machine (2 CPU cores): two towers of 4000 bytes each, a short run only. 2
# transformer layers (3 DANet layers with configs/lra/dense/retrieval_cpu.py), width 64, 2 heads
# (head dim 32, FAST Table 2's), the same batch, steps and learning rate for every attention.
# Optimizer and schedule: train.py's defaults (AdamW lr 1e-3, warmup 100, cosine to 1e-4 at
# max_iters, weight decay 0.1, clipping 1.0), GPT-2's embeddings (learned positions, N(0, 0.02)
# tokens), no dropout.
# Time, s / iteration on one thread x 300 steps: softmax 4.7 (24 min), fastmax1 0.92 (5 min),
# fastmax2 9.0 (45 min), dense 0.9 (4 min); fastmax2 and dense times are guesses (not measured);
# two threads about 1.6x faster (assumed). Plus 3 evaluations of 100 pairs + 400 test pairs; needs
# the LRA release's tsv_data/ (not on this machine; untested at full size).
#   python train.py configs/lra/retrieval_cpu.py configs/attention/fastmax1.py      # or: scripts/sweeps/lra.sh
#   python train.py configs/lra/retrieval_cpu.py configs/attention/dense.py configs/lra/dense/retrieval_cpu.py
task = "classify"
lra_task = "retrieval"
max_len = 4000
pooling = "cls"

n_layer = 2
n_head = 2
n_embd = 64

batch_size = 4
max_iters = 300
lr_decay_iters = 300
eval_interval = 100
eval_max_batches = 25
test_max_batches = 100
