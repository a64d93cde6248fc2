# Tree / bud-expansion attention ("High Attention Scores and Where to Find Them"), E = 0.5.
# Inference only: swap it into a trained model at evaluation,
#   python eval_ppl.py configs/attention/tree.py --out_dir=out/wikitext2_gpt_mini --protocol=blocks
attention = "tree"
attention_params = {"E": 0.5}
