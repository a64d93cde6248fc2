"""One line style per attention method, the same in every figure of the repo, and the figure
legend placed outside the panels. A library for the figure scripts of scripts/bench/ and
scripts/analysis/, not a script.

``method_style(label)`` returns ``{"color", "marker", "linestyle"}`` (keyword arguments of
``Axes.plot``) for a series label. It is derived from the attention registry, with no list of
methods kept here:

- a registered name (``attention.registered()``, sorted) at index ``b`` gets color
  ``COLORS[b % len(COLORS)]``, marker ``MARKERS[b % len(MARKERS)]`` and a solid line. The two
  lengths are coprime, so every registered name gets its own (color, marker) pair (up to
  len(COLORS) x len(MARKERS) names); neighbours in the sorted list (fastmax / informer / linear,
  softmax / softmax_reference / tree) get different colors;
- a variant of a registered method, a label that starts with the registered name followed by a
  character that is not a letter (``fastmax1``, ``fastmax_p2``, ``tree_E0.5``,
  ``tree:E=0.3,sampler=alignment``, ``dense:regime=quadratic``; the longest such name wins, so
  ``softmax_reference`` is its own method), keeps its method's marker (the marker names the
  method) and gets a dashed line and another color: ``COLORS[(b + v) % len(COLORS)]`` with the
  variant index ``v = 1 + crc32(rest) % (len(COLORS) - 1)`` of the rest of the label (``"1"``,
  ``"E0.5"``), so never its method's color;
- any other label (``sdpa``, ``authors:p=1``, ``danet_linear``, ``no dropout``) gets a
  dash-dotted line, the marker of crc32 of its leading word (``authors``) and the color of crc32
  of the whole label.

crc32 (not Python's ``hash``) makes a style the same in every process. Two labels of one figure
can still draw the same (color, marker) pair (two variants with equal ``v``, an unregistered
label on a registered one's pair) or two dashed lines of one color: ``figure_styles(labels)``
gives every label of a figure its ``method_style`` and moves a label that is not a registered
name, when its pair is taken (or its color, in a figure with no more labels than colors; or its
color with its line style), to the next free color (same marker), labels taken in a fixed order
(registered names first, then sorted), so the result depends on the set of labels only.
Registered names keep their style in every figure; another label keeps it in every figure where
nothing collides with it.

``legend_outside(fig)`` draws one legend for all panels right of them; save the figure with
``bbox_inches="tight"`` so the legend is inside the image.
"""
import functools
import re
import zlib

# tab10 without its gray: nine hues that are told apart easily (tab20's light/dark pairs are not;
# gray and black are left to references such as the benchmark's SDPA).
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
# 13 markers (coprime with the 9 colors).
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p", "d")
LINESTYLES = {"registered": "-", "variant": "--", "other": "-."}


@functools.lru_cache(maxsize=None)
def registered_names():
    """The registered attention names, sorted (``attention.registered()``)."""
    import attention  # here: importing the families takes a moment, only figures need it
    return tuple(sorted(attention.registered()))


def _crc(text):
    return zlib.crc32(text.encode("utf-8"))


def parse_label(label):
    """(registered base name or None, variant text) of a series label: ``"fastmax1"`` ->
    ``("fastmax", "1")``, ``"tree:E=0.3,sampler=alignment"`` -> ``("tree", "e=0.3,sampler=alignment")`` (lower case),
    ``"softmax_reference"`` -> ``("softmax_reference", "")``, ``"sdpa"`` -> ``(None, "sdpa")``.
    Case-insensitive; the base is the longest registered name that the label starts with,
    followed by the end or by a character that is not a letter."""
    text = str(label).strip().lower()
    matches = [name for name in registered_names()
               if text == name or (text.startswith(name) and not text[len(name)].isalpha())]
    if not matches:
        return None, text
    base = max(matches, key=len)
    return base, text[len(base):].lstrip("_:-=., ")


def _slots(label):
    """(color index, marker index, linestyle) of ``method_style``."""
    names = registered_names()
    base, rest = parse_label(label)
    if base is not None:
        b = names.index(base)
        if base == str(label).strip().lower():
            return b % len(COLORS), b % len(MARKERS), LINESTYLES["registered"]
        v = 1 + _crc(rest) % (len(COLORS) - 1)
        return (b + v) % len(COLORS), b % len(MARKERS), LINESTYLES["variant"]
    word = re.match(r"[a-z]*", rest).group() or rest
    return _crc(rest) % len(COLORS), _crc(word) % len(MARKERS), LINESTYLES["other"]


def method_style(label):
    """``{"color": hex color, "marker": matplotlib marker, "linestyle": "-" | "--" | "-."}`` of a
    series label, the same in every figure and process (see the module docstring for the rule)."""
    c, m, ls = _slots(label)
    return {"color": COLORS[c], "marker": MARKERS[m], "linestyle": ls}


def figure_styles(labels):
    """label -> style (``method_style``'s dict) for the labels of one figure, with no (color,
    marker) pair drawn twice; a label that is not a registered name also avoids a color drawn
    already when the figure has at most len(COLORS) labels, else a (color, line style) pair drawn
    already: it moves to the next such color with its marker (then to the next marker). Labels
    are taken registered names first, then sorted, so the result is deterministic in the set of
    labels; registered names always keep their ``method_style``."""
    labels = list(dict.fromkeys(labels))
    names = set(registered_names())
    order = sorted(labels, key=lambda x: (str(x).strip().lower() not in names, str(x)))
    pairs, lines, colors, out = set(), set(), set(), {}
    few = len(labels) <= len(COLORS)
    for label in order:
        c, m, ls = _slots(label)
        registered = ls == LINESTYLES["registered"]
        candidates = [((c + step) % len(COLORS), (m + step // len(COLORS)) % len(MARKERS))
                      for step in range(len(COLORS) * len(MARKERS))]
        free = [(cc, mm) for cc, mm in candidates if (cc, mm) not in pairs]
        # a variant or other label also avoids a color drawn already (when the figure has no more
        # labels than colors), else a color drawn with its line style
        unused = [(cc, mm) for cc, mm in free if registered or cc not in colors] if few else []
        better = [(cc, mm) for cc, mm in free if registered or (cc, ls) not in lines]
        cc, mm = (unused or better or free)[0]
        pairs.add((cc, mm))
        lines.add((cc, ls))
        colors.add(cc)
        out[label] = {"color": COLORS[cc], "marker": MARKERS[mm], "linestyle": ls}
    return {label: out[label] for label in labels}


def legend_outside(fig, axes=None, fontsize=7, title=None):
    """One legend for the panels ``axes`` (default: all of ``fig``), right of them, one entry per
    label (the first handle drawn with it); returns the legend, or None when nothing is labelled.
    Lays the panels out first (``tight_layout``); save with ``bbox_inches="tight"``."""
    handles, names = [], []
    for ax in (fig.axes if axes is None else axes):
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.tight_layout()
    if not handles:
        return None
    return fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=fontsize,
                      title=title, title_fontsize=fontsize, frameon=False)
