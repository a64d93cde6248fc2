# LRA Image (CIFAR-10 as 1,024 gray-level tokens), the papers' setting (for a GPU), from LRA's own
# files (google-research/long-range-arena at cd31e5c: lra_benchmarks/image/configs/cifar10/
# base_cifar10_config.py and image/train.py): batch 256, lr 5e-4, linear warmup 1 epoch (175 steps)
# + cosine over all steps (steps_per_cycle; no floor), 200 epochs of 45,000 = 35,000 steps, emb
# 32, 1 head, 1 layer, MLP 64 (ours 4C = 128), dropout 0.3, CLS pooling, learned positions
# (upstream's learn_pos_emb) and N(0, 1) token embeddings, no weight decay; Adam beta1 0.9
# (train.py's default), beta2 0.98, eps 1e-9, no gradient clipping. Evaluation on whole splits.
# Softmax; another attention is a layer:
#   python train.py configs/lra/image.py configs/attention/fastmax1.py     # out/lra/image_fastmax1
#   python train.py configs/lra/image.py configs/attention/dense.py configs/lra/dense/image.py
task = "classify"
lra_task = "image"
max_len = 1024
pooling = "cls"

n_layer = 1
n_head = 1
n_embd = 32
dropout = 0.3
embedding_init_std = 1.0

batch_size = 256
max_iters = 35000
eval_interval = 175
learning_rate = 5e-4
lr_schedule = "cosine"
warmup_iters = 175
lr_decay_iters = 35175  # warmup + all steps
min_lr = 0.0
weight_decay = 0.0
beta2 = 0.98
adam_eps = 1e-9
grad_clip = 0.0
log_interval = 50
device = "cuda"
