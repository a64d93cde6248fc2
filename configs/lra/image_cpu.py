# LRA Image on this machine (2 CPU cores) at LRA's length 1024: 2 transformer layers (3 DANet
# layers with configs/lra/dense/image_cpu.py), width 64, 2 heads (head dim 32, FAST Table 2's), the
# same batch, steps and learning rate for every attention. CLS pooling as LRA; 600 steps = about 10
# epochs of the 900-image subset. Optimizer and schedule: train.py's defaults (AdamW lr 1e-3,
# warmup 100, cosine to 1e-4 at max_iters, weight decay 0.1, clipping 1.0), GPT-2's embeddings
# (learned positions, N(0, 0.02) tokens), no dropout.
# Time, s / iteration on one thread x 600 steps (Text's at T = 1000: same model, batch and length;
# not measured separately): softmax 0.8 (8 min), fastmax1 0.4 (4 min), fastmax2 2.2 (22 min), dense
# 0.5 (5 min); two threads about 1.6x faster (assumed). Plus 6 evaluations of the 100 val images +
# 1,000 test images: about 1 min. Data: the 1k + 1k CIFAR-10 subset here (900 / 100 / 1,000), the
# full 45k / 5k / 10k where CIFAR10_DIR points at the batches.
#   python train.py configs/lra/image_cpu.py configs/attention/fastmax1.py      # or: scripts/sweeps/lra.sh
#   python train.py configs/lra/image_cpu.py configs/attention/dense.py configs/lra/dense/image_cpu.py
task = "classify"
lra_task = "image"
max_len = 1024
pooling = "cls"

n_layer = 2
n_head = 2
n_embd = 64

batch_size = 16
max_iters = 600
lr_decay_iters = 600
eval_interval = 100
eval_max_batches = 0
test_max_batches = 0
