"""The rules that turn numbers into verdict words. README.md, docs/*.md and the scorecard's
leaderboard never type a verdict in a template: a renderer hands the numbers to one of these
functions and prints the words it returns, so a verdict follows its numbers when they change
(``tests/scripts/test_verdicts.py`` changes a number in a fixture and sees each verdict follow).

- ``separable``: two methods' seeds apart (their ranges do not overlap, two seeds or more each).
- ``ranking``: whether methods may be put in an order ("not ranked: one seed each", ...).
- ``solved`` and ``solved_words``: how many seeds solve a recall cell ("solved in k of n").
- ``bimodal``: seeds in two groups far apart, which a table shows seed by seed, not as mean ± sd.
- ``plateau_words``: a recall accuracy against the 1/N plateau ("stays at 1/N").
- ``at_chance``: a classifier within two binomial standard errors of its majority class ("fail").
- ``ratio_words``: a time ratio whose interquartile range includes 1 reads "≈ 1".
- ``ratio_verdict``: a time ratio's range wholly below 1 ("faster"), above ("slower"), else "not
  ranked".
- ``aim_met``: an aim over runs ("met", "not met", "met in k of n runs"), with the known cause of a
  miss said only while it is missed.
- ``reliably_faster``: faster than the reference in every run of every call, or "not reliably".
- ``cost_words``: whether a part of a method is its cost ("the normalization is not the cost").
- ``default_words``: a setting that is its method's default ("the new default") or its old one.
- ``compared_as``: two runs that differ in more than their attention compare "two model
  configurations", not the two attentions alone.

A base module: it imports nothing of the repository (``scripts/scorecard/leaderboard.py`` imports it).
"""


def separable(values, others):
    """Whether two sets of seeds' values do not overlap (the range of each, min..max), both with two
    values or more: a pass/fail summary that a single seed or a shared range cannot support."""
    if len(values) < 2 or len(others) < 2:
        return False
    return max(values) < min(others) or min(values) > max(others)


def ranking(groups):
    """Whether methods may be ranked by their seeds (``groups``: a list of per-seed values per method),
    in words: "not ranked: one seed each" while every method has one seed, "not ranked: one seed
    of some" when some has one, "not ranked: seed ranges overlap" when two methods' ranges overlap
    (``separable``), "ranked: no two seed ranges overlap" otherwise."""
    counts = [len(values) for values in groups]
    if all(n == 1 for n in counts):
        return "not ranked: one seed each"
    if any(n < 2 for n in counts):
        return "not ranked: one seed of some"
    apart = all(separable(a, b) for i, a in enumerate(groups) for b in groups[i + 1:])
    return "ranked: no two seed ranges overlap" if apart else "not ranked: seed ranges overlap"


def solved(values, threshold):
    """How many seeds solve a recall cell: test accuracy ``threshold`` or more."""
    return sum(v >= threshold for v in values)


def solved_words(values, threshold):
    """"solved in k of n" over several seeds (``solved``); "solved" or "not solved" for one seed."""
    if len(values) == 1:
        return "solved" if solved(values, threshold) else "not solved"
    return f"solved in {solved(values, threshold)} of {len(values)}"


BIMODAL_GAP = 0.25  # of the accuracy scale: a step this wide between seeds splits them in two groups


def bimodal(values, gap=BIMODAL_GAP):
    """Whether seeds fall in two groups far apart (some learn the task, some stay on a plateau), so
    that mean ± sd describes neither: sorted, the widest step between neighbours is ``gap`` or more
    and more than twice the spread (max - min) inside either group it leaves."""
    values = sorted(values)
    if len(values) < 2:
        return False
    step, i = max((b - a, i) for i, (a, b) in enumerate(zip(values, values[1:]), 1))
    inside = max(values[i - 1] - values[0], values[-1] - values[i])
    return step >= gap and step > 2 * inside


PLATEAU_TOLERANCE = 0.25  # relative: within a quarter of 1/N is on the plateau


def plateau_words(accuracy, pairs, tolerance=PLATEAU_TOLERANCE):
    """A recall accuracy against the plateau of a model that has learnt the values but not which key
    holds which, 1/N for N = ``pairs``: "stays at 1/N" within ``tolerance`` of it (relative),
    "stays below 1/N" under it, else "reaches <accuracy>%"."""
    if abs(accuracy * pairs - 1) <= tolerance:
        return "stays at 1/N"
    return "stays below 1/N" if accuracy * pairs < 1 else f"reaches {100 * accuracy:.1f}%"


def at_chance(accuracy, majority, examples):
    """Whether a classifier's test ``accuracy`` is within two binomial standard errors of (or below)
    the ``majority``-class rate of its ``examples`` test examples; False without the rate or count."""
    if majority is None or not examples:
        return False
    return accuracy <= majority + 2 * (majority * (1 - majority) / examples) ** 0.5


def ratio_words(ratio, low, high):
    """A time ratio (method over reference) with its interquartile range ``low``-``high``: "≈ 1" when
    the range includes 1 (the two times are not told apart, not ranked), else the ratio (2 decimals)."""
    return "≈ 1" if low <= 1 <= high else f"{ratio:.2f}"


def ratio_verdict(low, high):
    """A time ratio (method over reference) by its interquartile range ``low``-``high``: "faster"
    when the whole range is below 1, "slower" when it is above, "not ranked" when it includes 1 or
    no range was recorded (either is None: one median says nothing of the noise)."""
    if low is None or high is None or low <= 1 <= high:
        return "not ranked"
    return "faster" if high < 1 else "slower"


def aim_met(values, reaches, words=("met", "not met"), cause=""):
    """An aim over runs (``values``, one per run; ``reaches``: value -> whether it reaches the aim):
    ``words[0]`` ("met") for one run that reaches it, "met in both runs" / "met in every run" for
    several that all do; ``words[1]`` ("not met") when none does, "met in k of n runs" otherwise.
    ``cause``: the known cause of a miss, appended (with its own punctuation) unless every run
    reaches the aim, so that it goes when the aim is met."""
    yes, no = words
    hits, n = sum(1 for v in values if reaches(v)), len(values)
    if hits == n:
        return yes if n == 1 else f"{yes} in both runs" if n == 2 else f"{yes} in every run"
    return (no if hits == 0 else f"{yes} in {hits} of {n} runs") + cause


def reliably_faster(by_call, target, short=False, detail=""):
    """Whether a method is faster than the reference in every run of every call (``by_call``: call
    name -> the runs' speed-ups, reference time over the method's; faster: above ``target``):
    "**yes** in every run", else "not reliably: faster <call> in k of n runs, <call> in k of n"
    followed by ``detail``; ``short``: "faster in every run" or "so not reliably faster"."""
    hits = {call: sum(v > target for v in values) for call, values in by_call.items()}
    every = all(hits[call] == len(values) for call, values in by_call.items())
    if short:
        return "faster in every run" if every else "so not reliably faster"
    if every:
        return "**yes** in every run"
    (first, values), *rest = by_call.items()
    return (f"not reliably: faster {first} in {hits[first]} of {len(values)} runs"
            + "".join(f", {call} in {hits[call]} of {len(v)}" for call, v in rest) + detail)


def cost_words(part, speedups, changed):
    """Whether a part of a method (``part``, e.g. "the normalization") is what makes it slow, from its
    speed-ups over the reference (``speedups``, one per call) beside those of the method with that
    part changed (``changed``, the same calls): "<part> is a cost" when the changed method is faster
    in every call, else "<part> is not the cost"."""
    faster = all(other > mine for mine, other in zip(speedups, changed))
    return f"{part} is a cost" if faster else f"{part} is not the cost"


def default_words(setting, default, before=None):
    """A method's ``setting`` against its ``default`` and the default ``before`` it changed (None
    when it never did); any comparable values (e.g. tuples of parameters): "the new default", "the
    default" (never changed), "the old default", or "" for another setting."""
    if setting == default:
        return "the default" if before is None else "the new default"
    return "the old default" if before is not None and setting == before else ""


def compared_as(differences):
    """What a comparison of two runs compares, from what their configurations differ in besides
    the attention (``differences``: names of the differing parts, in order): "the two attentions
    alone" when nothing else differs, else "two model configurations (<differences>), not the two
    attentions alone"."""
    if not differences:
        return "the two attentions alone"
    return f"two model configurations ({', '.join(differences)}), not the two attentions alone"
