# Softmax BERT mini: MLM pretraining on WikiText-2 (BERT uncased WordPiece), the baseline of the
# DenseAttention comparison; same budget as configs/mlm/wikitext2_danet_mini.py (and about the
# same number of block parameters: 4 transformer blocks x 12 C^2 = 48 C^2 vs 5 DANet blocks x 9 C^2
# = 45 C^2, as the paper matched BERT-large's size with more DANet layers).
#   python train.py configs/mlm/wikitext2_bert_mini.py
#   (offline: BERT_VOCAB_FILE=/path/to/bert-base-uncased/vocab.txt, a local copy of the vocabulary)
#   python eval_mlm.py --out_dir=out/wikitext2_bert_mini --seq_lens=128,512
out_dir = "out/wikitext2_bert_mini"
task = "mlm"
dataset = "wikitext2"
dataset_config = "wikitext-2-v1"
tokenizer = "bert-wordpiece"

block = "transformer"
attention = "softmax"
pos_emb = "learned"
n_layer = 4
n_head = 4
n_embd = 128
block_size = 512  # evaluated at 128 and 512: learned positions must cover 512
dropout = 0.0

batch_size = 8  # 4,096 tokens per iteration (about 600 of them predicted)
gradient_accumulation_steps = 1
max_iters = 2000  # 8.2M tokens, about 3.7 epochs of the 2.23M-token train split
lr_schedule = "cosine"
warmup_iters = 100
lr_decay_iters = 2000
learning_rate = 1e-3
min_lr = 1e-4
weight_decay = 0.01
grad_clip = 1.0

eval_interval = 250
eval_iters = 10
log_interval = 10
