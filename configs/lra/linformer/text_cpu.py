# LRA's Linformer on Text (google-research/long-range-arena, lra_benchmarks/text_classification/
# configs/linformer_base.py: low_rank_features = 32, a setting its train.py never passes to the
# model, whose default is 16; docs/baselines.md): one projection for keys and values, shared by
# the heads (models/linformer/linformer_attention.py).
#   python train.py configs/lra/text_cpu.py configs/attention/linformer.py configs/lra/linformer/text_cpu.py
attention_params = {"proj_len": 32, "sharing": "kv"}
