"""``python -m attention [--import=FILE ...]``: the registered attentions and their metadata, one
line each (name, causal support, trainable, attention_mask support, the reference its fast path is
tested against), read from the registry (``attention.attention_class``); this is the list the docs
point to instead of keeping one."""
import sys

import attention
import configurator


def rows():
    """(name, causal, trainable, mask, reference) of every registered attention, by name."""
    out = []
    for name in attention.registered():
        cls = attention.attention_class(name)
        if cls.reference_name is None and cls.reference_params is None:
            reference = "-"
        else:
            reference = cls.reference_name or name
            if cls.reference_params:
                reference += " " + ",".join(f"{k}={v}" for k, v in cls.reference_params.items())
        out.append((name, cls.causal, "yes" if cls.trainable else "no (inference only)",
                    "yes" if cls.supports_attention_mask else "no", reference))
    return out


USAGE = """usage: python -m attention [--import=FILE ...]

Lists the registered attentions, one line each: name, causal support (exact, leaky or
unsupported), whether it trains (inference-only methods do not), whether it takes an
attention_mask, and the reference implementation its fast path is tested against.
--import=FILE (repeatable) imports a Python file first, so the attentions it registers are
listed too."""


def main(argv):
    if any(arg in configurator.HELP_FLAGS for arg in argv):
        print(USAGE)
        return
    rest, _ = configurator.import_files(argv)
    if rest:
        raise configurator.ConfigError(f"unknown arguments {' '.join(rest)}; usage: python -m attention [--import=FILE ...]")
    header = ("name", "causal", "trainable", "attention_mask", "reference")
    table = [header, *rows()]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


if __name__ == "__main__":
    configurator.run_cli(main, sys.argv[1:])
