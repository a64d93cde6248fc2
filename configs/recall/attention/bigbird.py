# BigBird (Zaheer et al. 2020) for the recall sweep: blocks of 16, 3 window blocks, 2 global blocks
# and 3 random blocks (Hugging Face's defaults but the block size). configs/attention/bigbird.py
# (blocks of 64) attends to everything below (5 + 2 x 3) x 64 = 704 tokens, i.e. is softmax on a
# 256-token MQAR sequence; with 16 it is sparse from 176 tokens on.
#   python train.py configs/recall/mqar.py configs/recall/attention/bigbird.py
attention = "bigbird"
attention_params = {"block_size_sparse": 16, "num_random_blocks": 3, "num_window_blocks": 3,
                    "num_global_blocks": 2, "seed": 0}
