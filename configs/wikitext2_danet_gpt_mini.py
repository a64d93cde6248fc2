# Causal DANet GPT on WikiText-2: the same data, block size, tokens per iteration and iterations as
# configs/wikitext2_gpt_mini.py (650 x 4,096 = 2.66M GPT-2 BPE tokens), DenseAttention Network
# blocks instead of transformer blocks. 5 DANet blocks x 9 C^2 = 45 C^2 block parameters vs the
# softmax GPT's 4 x 12 C^2 = 48 C^2. One head, Cosine RelPE, local / shifted-local / global layers
# (windows of 64; the causal linear regime within each), FFN rescaling, no weight decay, no warmup,
# constant learning rate (paper appendix G; the rate itself is untuned for this size).
# Needs the lm task to accept the architecture keys (model.RUN_KEYS).
#   python train.py configs/wikitext2_danet_gpt_mini.py
#   python eval_ppl.py --out_dir=out/wikitext2_danet_gpt_mini --split=test --protocol=blocks
task = "lm"
dataset = "wikitext2"
dataset_config = "wikitext-2-v1"

block = "danet"
attention = "dense"
attention_params = {"regime": "auto"}
pos_emb = "cosine_relpe"
layer_scheme = "LSG"
window = 64
n_layer = 5
n_head = 1
n_embd = 128
block_size = 1024
dropout = 0.0
ffn_linf_norm = 0.03125  # 1 / sqrt(2 * 4 * n_embd), the authors' default norm

batch_size = 4  # 4,096 tokens per iteration
gradient_accumulation_steps = 1
max_iters = 650
lr_decay_iters = 650
lr_schedule = "constant"
warmup_iters = 0
learning_rate = 1e-3
min_lr = 1e-3
weight_decay = 0.0
grad_clip = 1.0

eval_interval = 100
eval_iters = 10
log_interval = 10
