# Longformer sliding window + global tokens (Beltagy et al. 2020, section 3.1; docs/baselines.md).
# window = keys on each side (256: Hugging Face's attention_window 512 in total); the first
# token global. LRA's Longformer: a window of 512 in total, no global tokens (window=256,
# num_global=0).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/longformer.py
attention = "longformer"
attention_params = {"window": 256, "num_global": 1}
