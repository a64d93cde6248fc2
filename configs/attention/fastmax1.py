# Fastmax p = 1 ("FAST: Factorizable Attention for Speeding up Transformers", Eq. 5-10:
# f(s) = 1 + s of the normalized scores). The module's defaults: normalization "paper" (Eq. 5-6) at
# temperature D (|s| <= 1, so no weight is negative), chosen on recall (docs/fastmax.md); runs made
# before 2026-11-27 used "max_norm" (add --attention.normalization=max_norm to repeat one).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/fastmax1.py
attention = "fastmax"
attention_params = {"p": 1}
