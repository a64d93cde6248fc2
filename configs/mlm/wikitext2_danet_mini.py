# DANet BERT mini: MLM pretraining on WikiText-2 (BERT uncased WordPiece) with DenseAttention
# Network blocks; same data, sequence length, tokens per iteration and iterations as
# configs/mlm/wikitext2_bert_mini.py. 5 DANet blocks x 9 C^2 = 45 C^2 block parameters vs the
# softmax BERT's 4 x 12 C^2 = 48 C^2 (the paper matched sizes with more DANet layers).
# Training recipe of the paper's appendix G: one head (Sec. 3.1, the larger head size is better),
# Cosine RelPE, FFN weights rescaled to a fixed l_inf norm after every step, no weight decay, no
# warmup, a constant learning rate (the paper's 2e-4 is for BERT-large; this small model uses 1e-3,
# untuned).
#   python train.py configs/mlm/wikitext2_danet_mini.py
#   (offline: BERT_VOCAB_FILE=/path/to/bert-base-uncased/vocab.txt, a local copy of the vocabulary)
#   python eval_mlm.py --out_dir=out/wikitext2_danet_mini --seq_lens=128,512   # both regimes
out_dir = "out/wikitext2_danet_mini"
task = "mlm"
dataset = "wikitext2"
dataset_config = "wikitext-2-v1"
tokenizer = "bert-wordpiece"

block = "danet"
attention = "dense"
attention_params = {"regime": "auto"}
pos_emb = "cosine_relpe"
layer_scheme = "G"
n_layer = 5
n_head = 1
n_embd = 128
block_size = 512
dropout = 0.0
ffn_linf_norm = 0.03125  # 1 / sqrt(2 * 4 * n_embd), the authors' default norm

batch_size = 8
gradient_accumulation_steps = 1
max_iters = 2000
lr_schedule = "constant"
warmup_iters = 0
lr_decay_iters = 2000
learning_rate = 1e-3
min_lr = 1e-3
weight_decay = 0.0
grad_clip = 1.0

eval_interval = 250
eval_iters = 10
log_interval = 10
