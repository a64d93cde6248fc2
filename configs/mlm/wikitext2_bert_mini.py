# Softmax BERT mini: MLM pretraining on WikiText-2 (BERT uncased WordPiece), the baseline of the
# DenseAttention comparison; same budget as configs/mlm/wikitext2_danet_mini.py (and about the
# same number of block parameters: 4 transformer blocks x 12 C^2 = 48 C^2 vs 5 DANet blocks x 9 C^2
# = 45 C^2, as the paper matched BERT-large's size with more DANet layers).
# Issue 25, part 1 (docs/mlm.md): sequences of 128 (BERT's phase-1 length), 32 per batch, lr 2e-3
# with 20 warmup steps and the MLM output bias started at the log unigram of the train split. The
# issue's run adds local attention, softmax within +-8 positions in every layer, as the layer
# configs/mlm/softmax_window8.py (kept out of this file so that attention files layered on it,
# configs/attention/<name>.py, do not inherit a window).
# Positions: learned, as BERT. They cover block_size = 128 only, so this model is evaluated at
# L = 128 and left out at L = 512 (rows 128-511 would never be trained). For the L = 512 column
# train the variant with --pos_emb=sinusoidal (docs/mlm.md).
#   python train.py configs/mlm/wikitext2_bert_mini.py configs/mlm/softmax_window8.py   # issue 25's run
#   python train.py configs/mlm/wikitext2_bert_mini.py configs/attention/<name>.py      # another attention
#   (offline: BERT_VOCAB_FILE=/path/to/bert-base-uncased/vocab.txt, a local copy of the vocabulary)
#   python eval_mlm.py --out_dir=out/wikitext2_bert_mini --seq_lens=128
out_dir = "out/wikitext2_bert_mini"
task = "mlm"
dataset = "wikitext2"
dataset_config = "wikitext-2-v1"
tokenizer = "bert-wordpiece"
mlm_bias_init = "log_unigram"

block = "transformer"
attention = "softmax"  # global; configs/mlm/softmax_window8.py makes it local
pos_emb = "learned"
n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
dropout = 0.0

batch_size = 32  # 4,096 tokens per iteration (about 600 of them predicted)
gradient_accumulation_steps = 1
max_iters = 3500  # 14.3M tokens, 6.4 epochs of the 2.23M-token train split; about 37 min at 2 threads (docs/mlm.md)
lr_schedule = "cosine"
warmup_iters = 20
lr_decay_iters = 3500
learning_rate = 2e-3
min_lr = 2e-4
weight_decay = 0.01
grad_clip = 1.0

eval_interval = 250
eval_iters = 10
log_interval = 10
