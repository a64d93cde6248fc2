# Local softmax attention for the softmax BERT mini: keys within +-8 positions of the query in every
# layer (the registry's softmax `window`, non-causal |i - j| < 9; attention/softmax.py), the local
# attention issue 25 found to make the MLM minis learn from context (docs/mlm.md). A layer after the
# model config, so that configs/mlm/wikitext2_bert_mini.py stays attention-neutral for the
# attention files (attention_params of layered files are merged, a window would leak into them):
#   python train.py configs/mlm/wikitext2_bert_mini.py configs/mlm/softmax_window8.py
attention = "softmax"
attention_params = {"window": 9}
