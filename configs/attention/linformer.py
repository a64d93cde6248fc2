# Linformer (Wang et al. 2020): keys and values projected along the sequence to proj_len = 256 rows
# by learned E, F (one pair per layer, shared by the heads). Not causal: for encoders (BERT, LRA),
# not for the GPT configs (attention/linformer.py; docs/baselines.md: LRA uses 16, Text 32).
#   python train.py configs/lra/text_cpu.py configs/attention/linformer.py
attention = "linformer"
attention_params = {"proj_len": 256}
