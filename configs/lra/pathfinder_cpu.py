# LRA Pathfinder32 on this machine (2 CPU cores) at LRA's length 1024: 2 transformer layers (3
# DANet layers with configs/lra/dense/pathfinder_cpu.py), width 64, 2 heads (head dim 32, FAST
# Table 2's), the same batch, steps and learning rate for every attention. MEAN pooling as LRA;
# 20,000 generated images instead of 200,000. Optimizer and schedule: train.py's defaults (AdamW lr
# 1e-3, warmup 100, cosine to 1e-4 at max_iters, weight decay 0.1, clipping 1.0), GPT-2's
# embeddings (learned positions, N(0, 0.02) tokens), no dropout.
# Time, s / iteration on one thread x 1,500 steps (Text's at T = 1000: same model, batch and
# length): softmax 0.8 (20 min), fastmax1 0.4 (10 min), fastmax2 2.2 (55 min), dense 0.5 (12 min);
# two threads about 1.6x faster (assumed). Plus 6 evaluations of 512 val images + the 2,000 test
# images: about 3 min (softmax, one thread); first run: generating 20,000 images (16k / 2k / 2k),
# about 8 CPU-minutes.
#   python train.py configs/lra/pathfinder_cpu.py configs/attention/fastmax1.py      # or: scripts/sweeps/lra.sh
#   python train.py configs/lra/pathfinder_cpu.py configs/attention/dense.py configs/lra/dense/pathfinder_cpu.py
task = "classify"
lra_task = "pathfinder"
max_len = 1024
pooling = "mean"
lra_options = {"resolution": 32, "difficulty": "curv_contour_length_14", "num": 20000, "workers": 1}

n_layer = 2
n_head = 2
n_embd = 64

batch_size = 16
max_iters = 1500
lr_decay_iters = 1500
eval_interval = 250
eval_max_batches = 32
