# LRA's Linformer on Retrieval (google-research/long-range-arena, lra_benchmarks/models/linformer/
# linformer_attention.py): 16 projected positions (low_rank_features), one projection for keys and
# values, shared by the heads (docs/baselines.md).
#   python train.py configs/lra/retrieval_cpu.py configs/attention/linformer.py configs/lra/linformer/retrieval_cpu.py
attention_params = {"proj_len": 16, "sharing": "kv"}
