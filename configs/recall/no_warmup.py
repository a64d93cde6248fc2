# Ablation layer: the recall protocol before RECALL_VERSION 2 (issue 57), no warmup, no gradient
# clipping, 1,500 steps, no early stop. After configs/recall/mqar.py it reproduces the archived runs
# of docs/recall.md made before 2026-11-29 (their recorded commands name mqar.py alone):
#   python train.py configs/recall/mqar.py configs/recall/no_warmup.py [configs/attention/<name>.py]
grad_clip = 0.0
warmup_iters = 0
max_iters = 1500
lr_decay_iters = 1500
stop_at = 0.0
