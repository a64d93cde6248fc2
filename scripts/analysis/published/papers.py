"""The papers' numbers: the one copy in the repository of the published LRA accuracies and steps per
second (``PUBLISHED_ACCURACY``, ``PUBLISHED_STEPS``, with their sources, ``SHORT_SOURCES`` and
``PUBLISHED_NOTES``), the LRA task columns they are in (``TASKS``, ``TITLES``) and Zoology's recall
result (``ZOOLOGY_NOTE``). docs/baselines.md, the LRA tables, the recall table and the scorecard's
leaderboard quote them from here. A base module: it imports nothing."""


# Zoology's Figure 2 as its text says and its plot shows (the recall table and the leaderboard quote it)
ZOOLOGY_NOTE = ("Zoology (Arora et al. 2023, Figure 2; 2 layers, one head, no MLP, 100k examples, best of 4 "
                "learning rates in 1e-4..1e-2, 64 epochs): attention about 1.0 in every cell; at 256/16 "
                "BaseConv, H3, RWKV and Hyena 0.05-0.14 at width 64 and 0.54-0.82 at width 256.")


TASKS = ("listops", "text", "retrieval", "image", "pathfinder", "pathx")
TITLES = ("ListOps", "Text", "Retrieval", "Image", "Pathfinder", "Path-X")


# (attention, source): (accuracies in TASKS order, None = not reported, "fail" = at chance; avg)
PUBLISHED_ACCURACY = [
    ("softmax", "LRA paper, Tay et al. 2021", (36.37, 64.27, 57.46, 42.44, 71.40, "fail"), 54.39),
    ("softmax", "FAST Table 1", (38.37, 61.95, 80.69, 40.57, 65.26, None), 57.37),
    ("fastmax1", "FAST Table 1", (37.20, 63.25, 78.21, 42.76, 66.67, None), 57.62),
    ("fastmax2", "FAST Table 1", (37.40, 64.30, 78.11, 43.18, 66.55, None), 57.90),
    ("dense", "DenseAttention Table 1", (50.50, 81.19, 87.51, 72.55, 87.40, 88.82), 77.99),
    # the baselines (docs/baselines.md): LRA Table 1 as quoted in DenseAttention Table 5 (and FAST
    # Table 1 for Linear Trans.), then FAST Table 1's own runs and DenseAttention's Informer row
    ("linear", "LRA paper, Tay et al. 2021", (16.13, 65.90, 53.09, 42.34, 75.30, "fail"), 50.55),
    ("performer", "LRA paper, Tay et al. 2021", (18.01, 65.40, 53.82, 42.77, 77.05, "fail"), 51.41),
    ("performer", "FAST Table 1", (37.80, 64.39, 79.05, 39.78, 67.41, None), 57.69),
    ("linformer", "LRA paper, Tay et al. 2021", (35.70, 53.94, 52.27, 38.56, 76.34, "fail"), 51.36),
    ("longformer", "LRA paper, Tay et al. 2021", (35.63, 62.85, 56.89, 42.22, 69.71, "fail"), 53.46),
    ("bigbird", "LRA paper, Tay et al. 2021", (36.05, 64.02, 59.29, 40.83, 74.87, "fail"), 55.01),
    ("reformer", "LRA paper, Tay et al. 2021", (37.27, 56.10, 53.40, 38.07, 68.50, "fail"), 50.67),
    ("reformer", "FAST Table 1", (37.00, 64.75, 78.50, 43.72, 66.40, None), 58.07),
    ("informer", "FAST Table 1", (36.95, 63.60, 75.25, 37.55, 50.33, None), 52.74),
    ("informer", "DenseAttention Table 5 (from Chen et al. 2021)", (32.53, 62.64, 77.57, 38.10, 57.83, None), 53.73),
]
PUBLISHED_STEPS = [  # FAST Table 2: training steps per second on an RTX A5000, head dim 32
    ("softmax", "FAST Table 2 (RTX A5000)", (6.4, 1.8, 1.7, 3.0, 6.1, None), 3.8),
    ("fastmax1", "FAST Table 2 (RTX A5000)", (47.4, 26.7, 24.7, 12.8, 24.4, None), 27.2),
    ("fastmax2", "FAST Table 2 (RTX A5000)", (11.6, 6.1, 6.9, 3.0, 6.8, None), 6.9),
]
SHORT_SOURCES = {"LRA paper, Tay et al. 2021": "LRA Table 1",
                 "DenseAttention Table 5 (from Chen et al. 2021)": "DenseAttention Table 5"}
# where else a published row is printed, or whose runs it is (docs/baselines.md's table)
PUBLISHED_NOTES = {("linear", "LRA paper, Tay et al. 2021"): "= FAST Table 1, DenseAttention Table 5",
                   **{(a, "LRA paper, Tay et al. 2021"): "= DenseAttention Table 5"
                      for a in ("performer", "linformer", "longformer", "bigbird", "reformer")},
                   ("performer", "FAST Table 1"): "their runs",
                   ("informer", "DenseAttention Table 5 (from Chen et al. 2021)"): "from Chen et al. 2021"}
