# Performer / FAVOR+ (Choromanski et al. 2021): positive orthogonal random features of the softmax
# kernel, 256 features, redrawn every 1000 optimizer steps (attention/performer.py; docs/baselines.md
# for performer-pytorch's and LRA's settings: LRA uses kernel "relu" with features "deterministic").
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/performer.py
attention = "performer"
attention_params = {"num_features": 256, "kernel": "softmax", "redraw_interval": 1000}
