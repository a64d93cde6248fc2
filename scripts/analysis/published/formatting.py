"""How the published tables write numbers and names: mean ± sd and spreads over seeds, learning rates,
scientific notation, speed factors, thousands of tokens/s, CPU names without trademarks
(``short_cpu``), count words, the published names of attentions (``display_name``), the note of a
run made under an older default of its method (``older_defaults``), and a markdown table
(``markdown_table``). A base module: it imports no renderer (``scripts/scorecard/leaderboard.py``
imports it)."""
import math
import re
import statistics


def spread(values, fmt):
    """"mean +- sd (min-max, n seeds)" of ``values`` in format ``fmt`` (e.g. ".3f"), or "v (1 seed)"."""
    if len(values) == 1:
        return f"{values[0]:{fmt}} (1 seed)"
    return (f"{statistics.mean(values):{fmt}} +- {statistics.stdev(values):{fmt}} "
            f"({min(values):{fmt}}-{max(values):{fmt}}, {len(values)} seeds)")


def mean_sd(values, fmt, scale=1.0, sep=" ± "):
    """"mean ± sd" of ``values`` times ``scale`` in format ``fmt``; one value alone when there is one."""
    values = [scale * v for v in values]
    if len(values) == 1:
        return f"{values[0]:{fmt}}"
    return f"{statistics.mean(values):{fmt}}{sep}{statistics.stdev(values):{fmt}}"


def sci(x):
    """``x`` with two significant digits in scientific notation, exponent without padding: 5.4e-15."""
    mantissa, exponent = f"{x:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def rate(x):
    """A learning rate as the docs write it: 3e-3, 1e-2, 2.5e-4."""
    mantissa, exponent = f"{x:.6e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def about(x):
    """``x`` rounded to one significant digit, as an integer string ("about 30" for 32)."""
    if x == 0:
        return "0"
    digits = 10 ** int(math.floor(math.log10(abs(x))))
    return f"{round(x / digits) * digits:.0f}"


def short_cpu(name):
    """A CPU model name without trademarks and the trailing "Processor"/"CPU": "Intel(R) Xeon(R)
    Processor" -> "Intel Xeon"; "not recorded" for None."""
    if not name:
        return "not recorded"
    name = re.sub(r"\((R|TM)\)", "", name)
    name = re.sub(r"\s+(Processor|CPU)$", "", name.strip())
    return re.sub(r"\s+", " ", name).strip()


NUMBER_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def number_word(n):
    """The English word of a small count ("three"), the digits beyond ten."""
    return NUMBER_WORDS.get(n, str(n))


def join_words(words):
    """"a", "a and b", "a, b and c"."""
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


NAMES = {"softmax": "softmax", "fastmax1": "fastmax p = 1", "fastmax2": "fastmax p = 2", "dense": "dense (DANet)",
         "linear": "linear", "performer": "Performer", "linformer": "Linformer", "longformer": "Longformer",
         "bigbird": "BigBird", "reformer": "Reformer", "informer": "Informer", "danet": "DANet mini"}


def display_name(label, params=None):
    """The published name of an attention label (``NAMES``; else the label), with BigBird's block size
    and Longformer's window and global tokens when ``params`` (its attention_params) gives them."""
    name = NAMES.get(label, label)
    params = params or {}
    if label == "bigbird" and "block_size_sparse" in params:
        name += f" (blocks of {params['block_size_sparse']})"
    elif label == "longformer" and "window" in params:
        g = params.get("num_global", 0)
        extra = "" if not g else " + first token" if g == 1 else f" + {g} global tokens"
        name += f" (window {params['window']}{extra})"
    return name


def older_defaults(name, date):
    """"made with <old setting>, the default before <day>" for a run of the registered attention
    ``name`` started at ``date`` (ISO 8601 str or None, ``runs.run_date``) under a default the method
    has since changed (``Attention.made_before_defaults``, ``defaults_before``); "" for a run of
    today's defaults, an attention no longer registered or none named. Tables that show such a run
    say so (``bracketed``)."""
    import attention

    if name is None:
        return ""
    try:
        cls = attention.attention_class(name)
    except ValueError:
        return ""
    if not cls.made_before_defaults(date):
        return ""
    return f"made with {cls.defaults_before}, the default before {cls.defaults_date[:10]}"


def bracketed(note):
    """" (note)" to follow a name or a number; "" for no note."""
    return f" ({note})" if note else ""


def markdown_table(header, rows):
    """A markdown table of ``header`` (column names) and ``rows`` (lists of cells, ``str``-ed), ending
    in a newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]) + "\n"


def thousands(tokens_per_s):
    """Tokens/s as the layer tables print them: 509k, 32.0k, 950."""
    if tokens_per_s >= 1e5:
        return f"{tokens_per_s / 1e3:.0f}k"
    return f"{tokens_per_s / 1e3:.1f}k" if tokens_per_s >= 1e3 else f"{tokens_per_s:.0f}"


def factor(x):
    """A speed factor as the docs print it: 25x, 5.8x, 1.04x (two decimals near and below 1)."""
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x" if x >= 1.1 else f"{x:.2f}x"


def fmt_cell(v):
    """A table value: "" for None, a string as is, a number with 2 decimals."""
    if v is None:
        return ""
    return v if isinstance(v, str) else f"{v:.2f}"


def median_range(values, fmt=".2f"):
    """(median, "lo-hi") of ``values`` formatted with ``fmt``."""
    return f"{statistics.median(values):{fmt}}", f"{min(values):{fmt}}-{max(values):{fmt}}"


def percent(values):
    """Accuracies (fractions) as "mean ± sd" in % with one decimal (``mean_sd``)."""
    return mean_sd(values, ".1f", scale=100)
