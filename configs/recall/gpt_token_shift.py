# Ablation layer: the recall setting of the sweeps before 2026-11-27 (docs/recall.md, "with a token
# shift"): the GPT-2-initialised GPT (MLP, tied head, Linear and embeddings N(0, 0.02^2), learned
# positions), a token shift before the first block (RWKV's; it hands each value position its key,
# so the attention only does the lookup), AdamW beta2 0.99, clipping at 1, 50 warmup steps, cosine
# decay to 3e-4 over 1,000 steps. Put it after the attention config:
#   python train.py configs/recall/mqar.py configs/attention/<name>.py configs/recall/gpt_token_shift.py
#   scripts/sweeps/recall.sh configs/recall/gpt_token_shift.py
token_shift = True
mlp = True
tie_lm_head = True
linear_init = "gpt2"
embedding_init_std = 0.02
pos_emb = "learned"
pos_embedding_init_std = 0.02
beta2 = 0.99
grad_clip = 1.0
lr_schedule = "cosine"
warmup_iters = 50
max_iters = 1000
lr_decay_iters = 1000
min_lr = 3e-4
