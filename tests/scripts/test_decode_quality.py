"""scripts/analysis/decode_quality.py: on tiny GPTs built here, exact attention against itself agrees
at every step with KL 0, another attention gives KL >= 0; the method list with tree's samplers; the
summaries; and the command end to end on a run train.py makes here (a few steps), with its outputs,
its manifest naming the model run, and bad input in one line."""
import copy
import csv
import json
import os

import numpy as np
import pytest
import torch

import configurator
from attention.tree.samplers import SAMPLERS
from model import GPT, ModelConfig
from scripts.analysis import decode_quality as dq

VOCAB, PROMPT, STEPS = 61, 20, 6
TINY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs",
                    "wikitext2_gpt_tiny.py")


@pytest.fixture(scope="module")
def tiny():
    """A random 2-layer softmax GPT whose weights are scaled up so that attention is not uniform,
    and seeded prompts (5, PROMPT)."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, vocab_size=VOCAB, attention="softmax"))
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight.mul_(8)
    prompts = torch.randint(0, VOCAB, (5, PROMPT), generator=torch.Generator().manual_seed(1))
    return model.eval(), prompts


def swapped(model, name, params):
    other = copy.deepcopy(model)
    other.set_attention(name, params)
    return other.eval()


def test_exact_against_itself_agrees_everywhere_and_other_methods_have_kl_at_least_zero(tiny):
    model, prompts = tiny
    sequences = dq.greedy_continuations(model, prompts, STEPS, VOCAB, batch_size=2)
    assert sequences.shape == (5, PROMPT + STEPS) and torch.equal(sequences[:, :PROMPT], prompts)
    models = {"self": swapped(model, "softmax", {}), "tree": swapped(model, "tree", {"E": 0.2}),
              "window": swapped(model, "longformer", {"window": 2, "num_global": 0})}
    out = dq.compare(model, models, sequences, PROMPT, VOCAB, batch_size=2)
    assert np.all(out["self"]["agreement"] == 1.0) and np.all(out["self"]["kl"] == 0.0)
    assert np.all(out[None]["agreement"] == 1.0)  # the forward picks the greedy (decoded) tokens
    for label in ("tree", "window"):
        agreement = out[label]["agreement"]
        assert agreement.shape == (5,) and np.all((0 <= agreement) & (agreement <= 1))
        assert np.all(out[label]["kl"] >= 0) and out[label]["kl"].max() > 1e-6, label
    # teacher forcing in batches equals one prompt at a time (softmax: no draws)
    single = dq.compare(model, {"window": models["window"]}, sequences, PROMPT, VOCAB, batch_size=1)
    np.testing.assert_allclose(single["window"]["kl"], out["window"]["kl"], rtol=1e-6, atol=1e-9)


def test_methods_expand_over_tree_samplers():
    methods = dq.expand_methods("tree:E=0.2,tree:E=0.5,longformer:window=32", "edh,alignment")
    assert [m[0] for m in methods] == ["tree:E=0.2,sampler=edh", "tree:E=0.2,sampler=alignment",
                                       "tree:E=0.5,sampler=edh", "tree:E=0.5,sampler=alignment",
                                       "longformer:window=32"]
    assert methods[1][1:] == ("tree", {"E": 0.2, "sampler": "alignment"})
    assert len(dq.expand_methods("tree:E=0.2,tree:E=0.5", "all")) == 2 * len(SAMPLERS)
    assert dq.expand_methods("tree:E=0.5,sampler=uniform", "all") == [("tree:E=0.5,sampler=uniform", "tree",
                                                                          {"E": 0.5, "sampler": "uniform"})]
    assert dq.expand_methods("tree", "") == [("tree", "tree", {})]
    for methods, samplers, words in (("tree:E=0.2", "edhh", "unknown edhh"), ("longformer", "edh", "names none"),
                                     ("nope", "", "unknown attention"), ("tree:F=1", "", "unknown parameter"),
                                     ("sdpa", "", "registered attentions")):
        with pytest.raises(configurator.ConfigError, match=words):
            dq.expand_methods(methods, samplers)


def test_summary_of_per_prompt_values():
    s = dq.summary([0.25, 0.5, 1.0, 0.75], 200, seed=0)
    assert (s["mean"], s["median"], s["min"], s["max"]) == (0.625, 0.625, 0.25, 1.0)
    assert s["ci_low"] <= s["mean"] <= s["ci_high"] and s["ci_low"] >= 0.25 and s["ci_high"] <= 1.0
    assert dq.summary([0.25, 0.5, 1.0, 0.75], 200, seed=0) == s
    assert dq.summary([0.5], 0, seed=0)["ci_low"] is None


@pytest.fixture(scope="module")
def run(tmp_path_factory, wikitext2_dir):
    import train
    out = tmp_path_factory.mktemp("tiny_run")
    train.main([TINY, f"--out_dir={out}", "--max_iters=2", "--eval_interval=2",
                "--eval_iters=1", "--num_threads=1"])
    return str(out)


def test_the_command_writes_quality_files_naming_the_model_run(run, tmp_path):
    results = tmp_path / "results"
    args = [f"--out_dir={run}", "--prompts=4", "--prompt_len=24", "--steps=5", "--batch_size=2", "--bootstrap=50",
            "--methods=tree:E=0.5,longformer:window=8,softmax", "--samplers=uniform", f"--results_dir={results}",
            "--name=tiny", "--num_threads=1"]
    payload = configurator.run_cli(dq.main, args)
    folder = results / "tiny"
    data = json.loads((folder / "quality.json").read_text())
    assert data == json.loads(json.dumps(payload))
    assert [m["method"] for m in data["methods"]] == ["tree:E=0.5,sampler=uniform", "longformer:window=8", "softmax"]
    assert data["reference"]["attention"] == "softmax" and data["settings"]["vocab"] == 50257
    exact = data["methods"][2]
    assert exact["agreement"]["mean"] == 1.0 and exact["kl"]["max"] == 0.0 and len(exact["per_prompt"]["kl"]) == 4
    with open(folder / "quality.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["method"] for r in rows] == [m["method"] for m in data["methods"]] and list(rows[0]) == dq.FIELDS
    manifest = json.loads((folder / "manifest.json").read_text())["quality"]
    train_entry = json.loads(open(f"{run}/manifest.json").read())["train"]
    assert manifest["model_run"] == run and manifest["model_commit"] == train_entry["commit"]
    assert data["model"]["train"]["commit"] == train_entry["commit"]
    # the same seed, the same numbers
    again = configurator.run_cli(dq.main, args)
    assert again["methods"] == payload["methods"]


@pytest.mark.parametrize("args,words", [
    (["--prompt_len=60", "--steps=8"], "block_size 64"),
    (["--methods=reformer"], "not exactly causal"),
    (["--methods=tree:E=2"], "E must be in"),
    (["--prompts=0"], "prompts must be >= 1"),
])
def test_bad_input_is_one_line(run, tmp_path, capsys, args, words):
    with pytest.raises(SystemExit) as e:
        configurator.run_cli(dq.main, [f"--out_dir={run}", f"--results_dir={tmp_path}", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], err


def test_no_checkpoint_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        configurator.run_cli(dq.main, [f"--out_dir={tmp_path}", f"--results_dir={tmp_path}"])
    assert e.value.code == 2 and "no checkpoint" in capsys.readouterr().err


def test_keys_of_train_are_redeclared_only_with_a_reason():
    import train
    own = set(dq.DEFAULTS) & set(train.DEFAULTS) - set(dq.SHARED_KEYS)
    assert own == set(dq.OWN_KEYS) and all(dq.OWN_KEYS.values())
    assert all(dq.DEFAULTS[key] == train.DEFAULTS[key] for key in dq.SHARED_KEYS)
