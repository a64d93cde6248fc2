# BigBird block-sparse attention (Zaheer et al. 2020; docs/baselines.md): blocks of 64, 3 window
# blocks, 3 random blocks per query block, 2 global blocks (the first and the last), seeded.
# These are Hugging Face's and LRA's settings (LRA: block 64, 3 random blocks).
#   python train.py configs/wikitext2_gpt_mini.py configs/attention/bigbird.py
attention = "bigbird"
attention_params = {"block_size_sparse": 64, "num_random_blocks": 3, "num_window_blocks": 3,
                    "num_global_blocks": 2, "seed": 0}
