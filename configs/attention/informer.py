# Informer ProbSparse self-attention (Zhou et al. 2021, Eq. 3-4; docs/baselines.md): factor 5
# (Informer2020's default): u = ceil(5 ln T) active queries, the others get the mean of the
# values (the running mean when causal). LRA has no Informer configuration.
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/informer.py
attention = "informer"
attention_params = {"factor": 5.0, "seed": 0}
