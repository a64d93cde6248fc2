# Longformer (Beltagy et al. 2020) for the recall sweep: a causal window of 32 keys and the first
# token global. configs/attention/longformer.py (window 256) covers the whole of a 256-token MQAR
# sequence, i.e. is softmax there; with 32 a query sees the 2N = 32 context tokens only when it
# comes within 32 positions of them, the trade a sliding window makes.
#   python train.py configs/recall/mqar.py configs/recall/attention/longformer.py
attention = "longformer"
attention_params = {"window": 32, "num_global": 1}
