# Fastmax p = 2 ("FAST: Factorizable Attention for Speeding up Transformers", Eq. 5-10:
# f(s) = 1 + s + s^2 / 2 of the normalized scores). The module's defaults: normalization "paper"
# (Eq. 5-6) at temperature sqrt(D), chosen on recall (docs/fastmax.md); runs made before 2026-11-27
# used "max_norm" (add --attention.normalization=max_norm to repeat one).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/fastmax2.py
attention = "fastmax"
attention_params = {"p": 2}
