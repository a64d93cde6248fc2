# Exact softmax attention (PyTorch SDPA). Layer it after a task/model config:
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/softmax.py
attention = "softmax"
attention_params = {}
