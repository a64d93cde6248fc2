"""Sample text from a trained model: one of our runs or a Hugging Face GPT-2, with any exactly
causal attention swapped in at sampling time (no retraining). nanoGPT's sample.py interface.

    python sample.py --out_dir=out/wikitext2_gpt_mini --start="The meaning of life is"
    python sample.py --out_dir=out/wikitext2_gpt_mini --start=FILE:prompt.txt --num_samples=3 \\
        --max_new_tokens=200 --temperature=0.8 --top_k=200 --seed=1337
    python sample.py --init_from=gpt2 --attention=fastmax --attention.p=2
    python sample.py --init_from=$GPT2_TINY_HF_DIR   (a local folder in Hugging Face format)
    python sample.py --help

The model is loaded as eval_ppl.py loads it (``eval_ppl.load_run``: the same sources, the same
``--attention`` swap and the same refusals, e.g. of an attention that is not exactly causal).
Its tokenizer is the run's: GPT-2 BPE (tiktoken's "gpt2") for WikiText-2 runs and Hugging Face
GPT-2, the characters of the prepared ``shakespeare_char`` meta.json for runs on that data set.
Sampling: temperature (0 = greedy) and top-k over the tokenizer's ids (a model's vocabulary padded
past them never yields the padding ids); one ``torch.Generator`` seeded with ``--seed``, so the same
seed gives the same text. Generation is ``model.GPT.generate``: the prompt is prefilled and every
new token decoded with one attention state per layer, or, for an attention or a model without a
decode path, the last block_size tokens recomputed at every step (said in one line).

Output: each sample (prompt and continuation) followed by a line of dashes, then one line with the
prefill and decode speeds in tokens per second. A model with learned positions stops at its
block_size (one line on stderr) unless ``--crop=True``, which recomputes the last block_size
tokens from then on. Bad input (no checkpoint, an empty prompt, an attention that is not causal, a
prompt the tokenizer cannot encode, ...) is one line, ``error: ...``, exit status 2.
"""
import torch

import configurator
import data
import eval_ppl
import training as T
from data.shakespeare_char import prepare as shakespeare
from model import run_key_defaults

# Keys that mean here what they mean in train.py take its declaration (default and help); the
# others are this script's own (the reason when train.py has a key of the same name).
SHARED_KEYS = (("device", T.COMMON_DEFAULTS, T.COMMON_HELP), ("num_threads", T.COMMON_DEFAULTS, T.COMMON_HELP),
               ("attention_params", *run_key_defaults()))
OWN_KEYS = {  # train.py key -> why this script declares its own
    "out_dir": "the run read (its ckpt.pt), not written",
    "init_from": "our run ('resume') or a Hugging Face GPT-2, never a new model",
    "attention": "'' keeps the trained model's attention",
    "seed": "the sampling's generator, not the initialisation's",
}
FILE_PREFIX = "FILE:"
DEFAULTS = dict(
    out_dir=eval_ppl.DEFAULTS["out_dir"],
    init_from="resume",
    start="\n",
    num_samples=3,
    max_new_tokens=200,
    temperature=0.8,
    top_k=200,
    seed=1337,
    crop=False,
    attention="",
    **{key: source[key] for key, source, _ in SHARED_KEYS},
)
HELP = dict(
    out_dir="run directory (out_dir/ckpt.pt), read when init_from='resume'",
    init_from="'resume' (our run in out_dir) | a Hugging Face GPT-2 name (gpt2, gpt2-medium, ...) | a local HF "
              "directory",
    start=f"the prompt, or {FILE_PREFIX}<path> to read it from a UTF-8 file",
    num_samples="samples drawn, one after the other",
    max_new_tokens="tokens generated per sample",
    temperature="softmax temperature of the sampling; 0 = greedy (the most likely token)",
    top_k="sample among the top_k most likely tokens; 0 = all",
    seed="seed of the sampling's generator (the same seed gives the same text)",
    crop="learned positions: past block_size, recompute the last block_size tokens (nanoGPT's way) instead of "
         "stopping",
    attention="'' keeps the model's attention; a registered, exactly causal name swaps it in (see "
              "attention.registered())",
    **{key: help[key] for key, _, help in SHARED_KEYS},
)


class Tokenizer:
    """Text <-> token ids of one vocabulary: ``encode(text) -> list of int``, ``decode(ids) -> str``,
    ``n_vocab`` (ids 0..n_vocab-1; a model's padded vocabulary may be larger) and ``name``."""

    def __init__(self, name, encode, decode, n_vocab):
        self.name, self.encode, self.decode, self.n_vocab = name, encode, decode, n_vocab


def gpt2_tokenizer():
    """GPT-2 BPE through tiktoken (the tokenizer of our WikiText-2 data and of GPT-2); the text
    "<|endoftext|>" in a prompt is GPT-2's end-of-text token."""
    import tiktoken

    enc = tiktoken.get_encoding("gpt2")
    return Tokenizer("GPT-2 BPE", lambda text: enc.encode(text, allowed_special={"<|endoftext|>"}), enc.decode,
                     enc.n_vocab)


def char_tokenizer(model):
    """The characters of the prepared shakespeare_char meta.json (``data.shakespeare_char``).

    Raises:
        ConfigError: not prepared, or a vocabulary whose size is not the model's.
    """
    try:
        vocab = shakespeare.load_meta()["vocab"]
    except data.DataError as e:  # not prepared, or a meta.json that is not JSON
        raise configurator.ConfigError(f"the run was trained on shakespeare_char, whose vocabulary is read from its "
                                       f"prepared data: {e}") from None
    if len(vocab) != model.config.vocab_size:
        raise configurator.ConfigError(f"the prepared shakespeare_char vocabulary has {len(vocab)} characters, the "
                                       f"model {model.config.vocab_size}: prepared from another text than the run's")
    return Tokenizer("characters", lambda text: shakespeare.encode(text, vocab).tolist(),
                     lambda ids: shakespeare.decode(ids, vocab), len(vocab))


def tokenizer_for(run_config, model):
    """The tokenizer of the run whose configuration is ``run_config`` (None: a Hugging Face GPT-2)."""
    if run_config is not None and run_config.get("dataset") == "shakespeare_char":
        return char_tokenizer(model)
    return gpt2_tokenizer()


def read_prompt(start):
    """The prompt text of ``--start``: the text itself, or the contents of the file after
    ``FILE:``.

    Raises:
        ConfigError: an empty prompt; a file that cannot be read or is not UTF-8.
    """
    text = start
    if start.startswith(FILE_PREFIX):
        path = start[len(FILE_PREFIX):]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise configurator.ConfigError(f"cannot read the prompt file {path!r} ({type(e).__name__}: "
                                           f"{str(e).splitlines()[0][:120]})") from None
    if not text:
        where = f" (the file {start[len(FILE_PREFIX):]!r} is empty)" if start.startswith(FILE_PREFIX) else ""
        raise configurator.ConfigError(f"empty prompt{where}: --start needs at least one character of text, "
                                       f"e.g. --start='\\n' (nanoGPT's default) or --start=FILE:prompt.txt")
    return text


def check_settings(cfg):
    """Raises ConfigError on a setting outside its range."""
    for key, low in (("num_samples", 1), ("max_new_tokens", 0), ("top_k", 0), ("num_threads", 0)):
        if cfg[key] < low:
            raise configurator.ConfigError(f"{key} must be >= {low}; got {cfg[key]}")
    if cfg["temperature"] < 0:
        raise configurator.ConfigError(f"temperature must be >= 0 (0 = greedy); got {cfg['temperature']}")
    configurator.check_device(cfg["device"])


def load(cfg):
    """(model, tokenizer, prompt ids (1, T) int64 on the device), or ConfigError."""
    loader_keys = ("out_dir", "init_from", "attention", "attention_params", "device")
    model, run_config = eval_ppl.load_run(dict(eval_ppl.DEFAULTS, **{key: cfg[key] for key in loader_keys}))
    tokenizer = tokenizer_for(run_config, model)
    text = read_prompt(cfg["start"])
    try:
        ids = tokenizer.encode(text)
    except ValueError as e:  # a character outside the run's vocabulary
        raise configurator.ConfigError(f"the prompt cannot be encoded with the run's tokenizer ({tokenizer.name}): "
                                       f"{e}") from None
    block = model.config.block_size
    if model.transformer.wpe is not None and len(ids) > block and not cfg["crop"]:
        raise configurator.ConfigError(f"the prompt has {len(ids)} tokens, more than the model's block_size {block} "
                                       f"(learned positions); shorten it, or --crop=True keeps its last {block}")
    return model, tokenizer, torch.tensor([ids], dtype=torch.long, device=cfg["device"])


def speed_line(totals, mode, model):
    """One line: prefill and decode tokens/s over every sample, how tokens were decoded, the attention."""
    def rate(tokens, seconds):
        return f"{tokens / seconds:,.0f}" if tokens and seconds > 0 else "-"

    return (f"prefill {rate(totals['prompt_tokens'], totals['prefill_seconds'])} tokens/s, "
            f"decode {rate(totals['new_tokens'], totals['decode_seconds'])} tokens/s "
            f"({totals['prompt_tokens']:,} prompt and {totals['new_tokens']:,} new tokens; {mode}; "
            f"attention={model.config.attention} {model.config.attention_params})")


def main(argv):
    """Parse ``argv`` (see HELP), print the samples and the speed line; returns the list of sample texts."""
    argv, _ = configurator.import_files(argv)  # a user's attention (--import=FILE), for --attention=NAME
    cfg = configurator.parse(DEFAULTS, argv, help=HELP)
    check_settings(cfg)
    if cfg["num_threads"]:
        torch.set_num_threads(cfg["num_threads"])
    model, tokenizer, prompt = load(cfg)
    generator = torch.Generator(device=prompt.device).manual_seed(cfg["seed"])
    totals = dict(prompt_tokens=0, prefill_seconds=0.0, new_tokens=0, decode_seconds=0.0)
    texts, modes = [], []
    for _ in range(cfg["num_samples"]):
        stats = {}
        out = model.generate(prompt, cfg["max_new_tokens"], temperature=cfg["temperature"],
                             top_k=cfg["top_k"] or None, crop=cfg["crop"], vocab_size=tokenizer.n_vocab,
                             generator=generator, stats=stats)
        texts.append(tokenizer.decode(out[0].tolist()))
        print(texts[-1])
        print("---------------", flush=True)
        for key in totals:
            totals[key] += stats[key]
        modes.append(stats["mode"])
    print(speed_line(totals, " / ".join(dict.fromkeys(modes)), model))
    return texts


if __name__ == "__main__":
    configurator.run_cli(main)
