# Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): phi(x) = elu(x) + 1,
# causal by chunked prefix sums (attention/linear.py; docs/baselines.md). LRA's setting is the same.
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/linear.py
attention = "linear"
attention_params = {}
