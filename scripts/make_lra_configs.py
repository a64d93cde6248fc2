"""Write ``configs/lra/<task>_<attention>[_cpu].py``: the Long Range Arena configs of task
"classify" for every task (listops, text, retrieval, image, pathfinder) and attention (softmax,
fastmax1, fastmax2, dense).

    python scripts/make_lra_configs.py          # rewrites configs/lra/*.py from the tables below

The configurator runs each config file on its own (a config cannot import another), so the 40
files are written out from the tables here; edit the tables and re-run rather than editing the
files. Two sizes per task:

- ``<task>_<attention>.py``: the papers' setting (GPU). softmax / fastmax: the LRA paper's
  hyperparameters, read from google-research/long-range-arena (commit cd31e5c):
  ``lra_benchmarks/{listops,text_classification,matching}/configs/base_*_config.py``,
  ``lra_benchmarks/image/configs/{cifar10,pathfinder32}/base_*_config.py`` and each task's
  ``train.py`` (Adam beta1 0.9, beta2 0.98, eps 1e-9, weight decay per task, no gradient clipping);
  fastmax swaps only the attention, as the FAST paper did. ListOps / Text / Retrieval use
  ``constant * linear_warmup * rsqrt_decay`` with base 0.05: ``lr_schedule = "rsqrt"`` with
  ``learning_rate`` = 0.05 / sqrt(warmup), its peak. Image and Pathfinder use
  ``constant * linear_warmup * cosine_decay`` (warmup one epoch, ``steps_per_cycle`` = all steps,
  no floor): ``lr_schedule = "cosine"``, ``min_lr = 0``, ``lr_decay_iters`` = warmup + all steps.
  LRA's MLP widths are not all 4C (ours always are; noted per file); docs/lra.md lists every
  remaining difference. Position information and
  token embeddings as LRA's ``TransformerEncoder``: token embeddings initialised N(0, 1)
  (``embedding_init_std = 1.0``) and the fixed sinusoidal table (``pos_emb = "sinusoidal"``, its
  default) except Image, whose upstream config learns its positions. dense: the DenseAttention authors' LRA configs
  (hidden / layers / heads / window / pooling from their configs, docs/dense_attention.md "Sources"; learning rate,
  weight decay, epochs, warmup ratio and cosine cycle from their ``configs/lra/*.json``, read with
  the search tool), DANet blocks with Cosine RelPE and the Local / Shifted-local / Global scheme
  (``layer_scheme = "LSG"``), FFN l_inf rescaling at 1 / sqrt(8 C) (their default; appendix G).
- ``<task>_<attention>_cpu.py``: sized for the 2-core development machine at the full LRA sequence
  length: C = 64, 2 transformer layers / 3 DANet layers (L, S, G; 27 C^2 vs 24 C^2 block
  parameters), 2 heads (head dim 32, FAST Table 2's), the same batch, steps and learning rate for
  every attention of a task, so accuracies and steps per second compare. The time estimates in
  each file come from a few timed training iterations on ONE thread (``torch.set_num_threads(1)``,
  the machine busy with another job), scaled by the steps; two threads are assumed about 1.6x
  faster. Evaluation time is extra (stated).
"""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "configs", "lra")
ATTENTIONS = ("softmax", "fastmax1", "fastmax2", "dense")
TASKS = ("listops", "text", "retrieval", "image", "pathfinder")

ATTENTION_KEYS = {
    "softmax": dict(attention="softmax"),
    "fastmax1": dict(attention="fastmax", attention_params={"p": 1}),
    "fastmax2": dict(attention="fastmax", attention_params={"p": 2}),
}


def danet(n_embd, window):
    return dict(block="danet", attention="dense", attention_params={"regime": "auto"}, pos_emb="cosine_relpe",
                layer_scheme="LSG", window=window, ffn_linf_norm=round(1 / (8 * n_embd) ** 0.5, 5))


RSQRT_TASKS = ("listops", "text", "retrieval")  # LRA's constant * linear_warmup * rsqrt_decay


def rsqrt(base, warmup, steps):
    """(peak, final) learning rates of LRA's rsqrt schedule: base / sqrt(warmup) at the end of the
    warmup (our ``learning_rate``), base / sqrt(steps) at the last step (for the notes)."""
    return round(base / warmup ** 0.5, 7), round(base / max(steps, warmup) ** 0.5, 7)


# ------------------------------------------------------------------ the papers' settings
# LRA's TransformerEncoder: token embeddings N(0, 1), fixed sinusoidal positions unless learn_pos_emb
LRA_EMBEDDINGS = dict(pos_emb="sinusoidal", embedding_init_std=1.0)
# every LRA train.py: optim.Adam(beta1=0.9, beta2=0.98, eps=1e-9, weight_decay=config.weight_decay), no clipping
LRA_OPTIMIZER = dict(beta1=0.9, beta2=0.98, adam_eps=1e-9, grad_clip=0.0)
LRA = {
    "listops": dict(
        note="LRA ListOps: batch 32, base lr 0.05 rsqrt (warmup 1000), 5000 steps, emb 512, 8 heads, 4 layers, "
             "MLP 1024 (ours 4C = 2048), CLS pooling, weight decay 0.1 (upstream base config); fixed sinusoidal positions and "
             "N(0, 1) token embeddings (LRA's TransformerEncoder defaults)",
        keys=dict(max_len=2000, pooling="cls", n_layer=4, n_head=8, n_embd=512, dropout=0.1, batch_size=32,
                  max_iters=5000, warmup_iters=1000, weight_decay=0.1, **LRA_EMBEDDINGS), lr=rsqrt(0.05, 1000, 5000),
        eval=dict(eval_interval=500, eval_max_batches=0)),
    "text": dict(
        note="LRA Text: batch 32, base lr 0.05 rsqrt (warmup 8000), 20,000 steps, emb 256, 4 heads, 4 layers, "
             "MLP 1024 (= 4C), CLS pooling, length 1000, weight decay 0.1 (upstream base config). "
             "Val = a 10% hold-out of train (data/lra/text.py); lra_options = {'val': 'test'} is LRA's choice; fixed "
             "sinusoidal positions and N(0, 1) token embeddings (LRA's TransformerEncoder defaults)",
        keys=dict(max_len=1000, pooling="cls", n_layer=4, n_head=4, n_embd=256, dropout=0.1, batch_size=32,
                  max_iters=20000, warmup_iters=8000, weight_decay=0.1, **LRA_EMBEDDINGS), lr=rsqrt(0.05, 8000, 20000),
        eval=dict(eval_interval=1000, eval_max_batches=0)),
    "retrieval": dict(
        note="LRA Retrieval (AAN): batch 32, base lr 0.05 rsqrt (warmup 8000 > 5000 steps: the rate never peaks, "
             "as in LRA), emb 128, 4 heads, 4 layers, MLP 512 (= 4C), CLS pooling, 4000 bytes per document, "
             "two towers, weight decay 0.1 (upstream base config); fixed sinusoidal positions and N(0, 1) token embeddings "
             "(LRA's TransformerEncoder defaults)",
        keys=dict(max_len=4000, pooling="cls", n_layer=4, n_head=4, n_embd=128, dropout=0.1, batch_size=32,
                  max_iters=5000, warmup_iters=8000, weight_decay=0.1, **LRA_EMBEDDINGS),
        lr=(round(0.05 / 8000 ** 0.5, 7), None),
        eval=dict(eval_interval=500, eval_max_batches=0)),
    "image": dict(
        note="LRA Image (upstream base_cifar10_config.py): batch 256, lr 5e-4, linear warmup 1 epoch (175 steps) + "
             "cosine over all steps (no floor), 200 epochs of 45,000 = 35,000 steps, emb 32, 1 head, 1 layer, MLP 64 (ours 4C = 128), "
             "dropout 0.3, CLS pooling, learned positions, N(0, 1) token embeddings, no weight decay",
        keys=dict(max_len=1024, pooling="cls", n_layer=1, n_head=1, n_embd=32, dropout=0.3, batch_size=256,
                  max_iters=35000, warmup_iters=175, weight_decay=0.0, embedding_init_std=1.0), lr=(5e-4, 0.0),
        eval=dict(eval_interval=175, eval_max_batches=0)),
    "pathfinder": dict(
        note="LRA Pathfinder32 (upstream base_pathfinder32_config.py): batch 512, lr 1e-3, linear warmup 1 epoch "
             "(312 steps) + cosine over all steps (no floor), 200 epochs of 160,000 = 62,400 steps, emb 32, 2 heads, 1 layer, MLP 32 (ours "
             "4C = 128), dropout 0.1, MEAN pooling, fixed sinusoidal positions and N(0, 1) token embeddings, no "
             "weight decay; "
             "data: 200,000 generated images of curv_contour_length_14 (160k / 20k / 20k)",
        keys=dict(max_len=1024, pooling="mean", n_layer=1, n_head=2, n_embd=32, dropout=0.1, batch_size=512,
                  max_iters=62400, warmup_iters=312, weight_decay=0.0, **LRA_EMBEDDINGS), lr=(1e-3, 0.0),
        eval=dict(eval_interval=312, eval_max_batches=0)),
}

DENSE = {  # DenseAttention authors' configs/lra/dense_attn_<task>.json
    "listops": dict(
        note="DenseAttention ListOps: hidden 512, 9 layers, 8 heads, window 20, length 2000, first-token pooling "
             "(authors' config); lr 1e-3, weight decay 0.1, cosine with 10% warmup over 75,000 steps, batch 128 "
             "(authors' dense_attn_listops.json / deepspeed_config_listops.json)",
        keys=dict(max_len=2000, pooling="cls", n_layer=9, n_head=8, n_embd=512, dropout=0.05, batch_size=128,
                  max_iters=75000, warmup_iters=7500, weight_decay=0.1, **danet(512, 20)), lr=(1e-3, 0.0),
        eval=dict(eval_interval=750, eval_max_batches=0)),
    "text": dict(
        note="DenseAttention Text: hidden 512, 9 layers, 8 heads, window 10, length 4000, mean pooling (authors' config); "
             "lr 2e-3, weight decay 0.1, batch 100, 65 epochs of 25,000 = 16,250 steps, 10% warmup, cosine cycle "
             "12,800 steps (authors' dense_attn_text_cls.json); val = test in their config, lra_options "
             "{'val': 'test'} here",
        keys=dict(max_len=4000, pooling="mean", n_layer=9, n_head=8, n_embd=512, dropout=0.1, batch_size=100,
                  max_iters=16250, warmup_iters=1280, lr_decay_iters=12800, weight_decay=0.1,
                  lra_options={"val": "test"}, **danet(512, 10)), lr=(2e-3, 0.0),
        eval=dict(eval_interval=250, eval_max_batches=0)),
    "retrieval": dict(
        note="DenseAttention Retrieval: hidden 128, 6 layers, 4 heads, window 10, 4000 per document, first-token "
             "pooling (authors' config); lr 1e-3, no weight decay, 5% warmup, cosine cycle 150,000 steps (authors' "
             "dense_attn_aan_matching.json); batch not in the files read: LRA's 32",
        keys=dict(max_len=4000, pooling="cls", n_layer=6, n_head=4, n_embd=128, dropout=0.05, batch_size=32,
                  max_iters=150000, warmup_iters=7500, weight_decay=0.0, **danet(128, 10)), lr=(1e-3, 0.0),
        eval=dict(eval_interval=4600, eval_max_batches=0)),
    "image": dict(
        note="DenseAttention Image: hidden 256, 9 layers, 4 heads, window 64, mean pooling (authors' config); lr 1e-2, "
             "weight decay 0.1, 5% warmup, cosine cycle 45,000 steps (authors' dense_attn_cifar.json); batch not "
             "in the files read: LRA's 256",
        keys=dict(max_len=1024, pooling="mean", n_layer=9, n_head=4, n_embd=256, dropout=0.05, batch_size=256,
                  max_iters=45000, warmup_iters=2250, weight_decay=0.1, **danet(256, 64)), lr=(1e-2, 0.0),
        eval=dict(eval_interval=175, eval_max_batches=0)),
    "pathfinder": dict(
        note="DenseAttention Pathfinder32: hidden 128, 6 layers, 8 heads, window 256, first-token pooling "
             "(authors' config); lr 1e-3, weight decay 0.1, 10% warmup, cosine cycle 320,000 steps (authors' "
             "dense_attn_pathfinder32.json); batch not in the files read: 100 assumed (210 epochs of 160,000)",
        keys=dict(max_len=1024, pooling="cls", n_layer=6, n_head=8, n_embd=128, dropout=0.0, batch_size=100,
                  max_iters=320000, warmup_iters=32000, weight_decay=0.1, **danet(128, 256)), lr=(1e-3, 0.0),
        eval=dict(eval_interval=1600, eval_max_batches=0)),
}

DATA_OPTIONS = {"pathfinder": {"resolution": 32, "difficulty": "curv_contour_length_14", "num": 200000}}

# ------------------------------------------------------------------ this machine
# seconds per training iteration on ONE thread at this batch (measured on a few iterations)
CPU = {
    "listops": dict(
        keys=dict(max_len=2000, pooling="cls", batch_size=8, max_iters=1200, eval_interval=200, eval_max_batches=32,
                  test_max_batches=0, lra_options={"workers": 1}),
        window=20, s_per_iter={"softmax": 1.3, "fastmax1": 0.48, "fastmax2": 1.9, "dense": 0.43},
        evals="5 evaluations of 256 val examples + the 2,000 test examples: about 4 min (softmax, one thread); "
              "first run: generating the 96k / 2k / 2k ListOps files, about 3.5 CPU-minutes",
        why="CLS pooling as LRA; batch 8 keeps softmax at ~1.3 s/iteration"),
    "text": dict(
        keys=dict(max_len=1000, pooling="mean", batch_size=16, max_iters=4000, eval_interval=500, eval_max_batches=20,
                  test_max_batches=250),
        window=10, s_per_iter={"softmax": 0.78, "fastmax1": 0.39, "fastmax2": 2.17, "dense": 0.47},
        evals="8 evaluations of 320 held-out reviews + 4,000 random test reviews (test_max_batches = 250; standard "
              "error about 0.8 points): about 3 min (softmax, one thread)",
        why="LRA's length 1000 (DenseAttention: max_len = 4000); mean pooling (DenseAttention's choice for Text) "
            "learns faster than CLS in a short run; 4,000 steps = about 2.8 epochs (1,500 steps, one epoch, left "
            "every attention below 60%)"),
    "retrieval": dict(
        keys=dict(max_len=4000, pooling="cls", batch_size=4, max_iters=300, eval_interval=100, eval_max_batches=25,
                  test_max_batches=100),
        window=10, s_per_iter={"softmax": 4.7, "fastmax1": 0.92, "fastmax2": 9.0, "dense": 0.9},
        evals="3 evaluations of 100 pairs + 400 test pairs; needs the LRA release's tsv_data/ (not on this machine; "
              "untested at full size); fastmax2 and dense times are guesses (not measured)",
        why="two towers of 4000 bytes each; a short run only"),
    "image": dict(
        keys=dict(max_len=1024, pooling="cls", batch_size=16, max_iters=600, eval_interval=100, eval_max_batches=0,
                  test_max_batches=0),
        window=64, s_per_iter={"softmax": 0.8, "fastmax1": 0.4, "fastmax2": 2.2, "dense": 0.5},
        evals="6 evaluations of the 100 val images + 1,000 test images: about 1 min; data: the 1k + 1k CIFAR-10 "
              "subset here (900 / 100 / 1,000), the full 45k / 5k / 10k where CIFAR10_DIR points at the batches",
        why="CLS pooling as LRA; 600 steps = about 10 epochs of the 900-image subset. Times not measured "
            "separately: Text's at T = 1000 (same model, batch and length)"),
    "pathfinder": dict(
        keys=dict(max_len=1024, pooling="mean", batch_size=16, max_iters=1500, eval_interval=250, eval_max_batches=32,
                  test_max_batches=0, lra_options={"resolution": 32, "difficulty": "curv_contour_length_14",
                                                   "num": 20000, "workers": 1}),
        window=256, s_per_iter={"softmax": 0.8, "fastmax1": 0.4, "fastmax2": 2.2, "dense": 0.5},
        evals="6 evaluations of 512 val images + the 2,000 test images: about 3 min (softmax, one thread); first "
              "run: generating 20,000 images (16k / 2k / 2k), about 8 CPU-minutes",
        why="MEAN pooling as LRA; 20,000 generated images instead of 200,000. Times: Text's at T = 1000 (same "
            "model, batch and length)"),
}
CPU_COMMON = dict(n_layer=2, n_head=2, n_embd=64, dropout=0.0, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100,
                  weight_decay=0.1, lr_schedule="cosine", log_interval=10)


def fmt(key, value):
    return f"{key} = {value!r}\n"


def render(name, header, keys):
    lines = [f"# {name}: generated by scripts/make_lra_configs.py (edit the tables there and re-run)\n"]
    lines += [f"# {h}\n" for h in header]
    lines.append("\n")
    for k, v in keys.items():
        lines.append(fmt(k, v))
    return "".join(lines)


def paper_config(task, attention):
    spec = DENSE[task] if attention == "dense" else LRA[task]
    keys = dict(out_dir=f"out/lra/{task}_{attention}", task="classify", lra_task=task)
    model = dict(spec["keys"])
    if attention != "dense":
        model.update(ATTENTION_KEYS[attention])
    peak, final = spec["lr"]
    keys.update(model)
    if attention == "dense":  # the DenseAttention authors' cosine schedules (their optimizer settings are not in the files read)
        decay = model.get("lr_decay_iters", model["max_iters"])
        keys.update(learning_rate=peak, lr_schedule="cosine", lr_decay_iters=decay, min_lr=final, grad_clip=1.0)
    elif task in RSQRT_TASKS:
        keys.update(learning_rate=peak, lr_schedule="rsqrt", **LRA_OPTIMIZER)
    else:  # LRA's cosine_decay: from the end of warmup over steps_per_cycle = all steps, to 0
        keys.update(learning_rate=peak, lr_schedule="cosine", lr_decay_iters=model["warmup_iters"] + model["max_iters"],
                    min_lr=0.0, **LRA_OPTIMIZER)
    keys.update(log_interval=50, **spec["eval"])
    if task in DATA_OPTIONS and "lra_options" not in keys:
        keys["lra_options"] = DATA_OPTIONS[task]
    keys["device"] = "cuda"
    header = [spec["note"] + ".",
              "Full-size setting for a GPU; the attention is the only difference between the softmax / fastmax files."
              if attention != "dense" else "Full-size setting for a GPU.",
              f"python train.py configs/lra/{task}_{attention}.py"]
    return render(f"LRA {task}, {attention}", header, keys)


def cpu_config(task, attention):
    spec = CPU[task]
    keys = dict(out_dir=f"out/lra/{task}_{attention}_cpu", task="classify", lra_task=task)
    keys.update(CPU_COMMON)
    keys.update(spec["keys"])
    keys["lr_decay_iters"] = keys["max_iters"]
    if attention == "dense":
        keys.update(n_layer=3, **danet(64, spec["window"]))
    else:
        keys.update(ATTENTION_KEYS[attention])
    s = spec["s_per_iter"][attention]
    minutes = s * keys["max_iters"] / 60
    header = [f"This machine (2 CPU cores), full LRA length {keys['max_len']}: {spec['why']}.",
              f"Time: {s} s / iteration on one thread x {keys['max_iters']} steps = about {minutes:.0f} min on one "
              f"thread, about {minutes / 1.6:.0f} min on two (assumed 1.6x); plus {spec['evals']}.",
              f"python train.py configs/lra/{task}_{attention}_cpu.py      # or: scripts/sweeps/lra.sh"]
    return render(f"LRA {task}, {attention}, CPU size", header, keys)


def main():
    os.makedirs(OUT, exist_ok=True)
    written = []
    for task in TASKS:
        for attention in ATTENTIONS:
            for name, text in ((f"{task}_{attention}.py", paper_config(task, attention)),
                               (f"{task}_{attention}_cpu.py", cpu_config(task, attention))):
                with open(os.path.join(OUT, name), "w") as f:
                    f.write(text)
                written.append(name)
    print(f"wrote {len(written)} files to {OUT}")


if __name__ == "__main__":
    main()
