# DenseAttention ("DenseAttention: No-Compromise Exact All NxN Interactions Algorithm with O(N)
# Space and Time Complexity") in the paper's DANet blocks (MaxNorm, no softmax, keys = values = x;
# model.py DANetBlock) with Cosine RelPE positions; regime "auto" takes the cheaper of Q(K^T V) and
# (Q K^T) V. Global layers unless a later layer sets layer_scheme and window (the LRA runs:
# configs/lra/dense/<task>.py); FFN rescaling (ffn_linf_norm) depends on the width, set beside it.
#   python train.py configs/wikitext2_gpt_tiny.py configs/attention/dense.py
#   python train.py configs/lra/text_cpu.py configs/attention/dense.py configs/lra/dense/text_cpu.py
block = "danet"
attention = "dense"
attention_params = {"regime": "auto"}
pos_emb = "cosine_relpe"
mlp = True  # DANet blocks always have their FFN (a recall config that sets mlp = False is overridden here)
