# Fastmax p = 2 ("FAST: Factorizable Attention for Speeding up Transformers", Eq. 5-10:
# f(s) = 1 + s + s^2 / 2 of the normalized scores; the module's default normalization).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/fastmax2.py
attention = "fastmax"
attention_params = {"p": 2}
