# Fastmax p = 1 ("FAST: Factorizable Attention for Speeding up Transformers", Eq. 5-10:
# f(s) = 1 + s of the normalized scores; the module's default normalization, docs/fastmax.md).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/fastmax1.py
attention = "fastmax"
attention_params = {"p": 1}
