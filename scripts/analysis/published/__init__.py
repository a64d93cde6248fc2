"""The published numbers: what the table tools aggregate from finished runs, and the renderers that
turn the files under ``results/`` into the tables and sentences of README.md and docs/*.md
(issue 42, item 5: no number typed by hand; ``python -m scripts.analysis.publish`` writes them,
its ``--check`` and ``tests/scripts/test_publish.py`` fail when a committed block differs).

A library of ``scripts/analysis`` (like ``runs.py``): the table tools (``recall_table``,
``recall_ablation_table``, ``gpt_mini_table``, ``lra_table``, ``tree_sweep_table``) and the
publishing command (``publish.py``) import it; tools never import tools.

Its modules, named after what they hold, so that the file to change is the one named after the
table to change. Base modules (they import no renderer; ``scripts/scorecard/leaderboard.py``
imports them):

- ``loading``: reading results files, parsing a marker's arguments, and the two errors,
  ``SourceMissing`` (a FileNotFoundError naming the absent file) and ``RenderError``.
- ``formatting``: how numbers and names are written (mean ± sd, ``short_cpu``, ``factor``,
  ``thousands``, ``display_name``, ``markdown_table``...).
- ``papers``: the papers' numbers (``PUBLISHED_ACCURACY``, ``PUBLISHED_NOTES``...), the one copy.
- ``verdicts``: the rules that turn numbers into verdict words ("separable", "met", "solved in k
  of n", "not reliably", "at chance"...): no template types a verdict.

Renderer modules, by area, each with the list of its renderers in its docstring and in its
``RENDERERS``: ``recall`` (docs/recall.md), ``lm`` (language models: WikiText-2, swapped
attentions, context use), ``lra`` (Long Range Arena), ``benchmark`` (speed, memory and the aims),
``tree`` (tree attention), ``fastmax`` (Fastmax's own small studies: f(s), dropout variants),
``mlm`` (masked language models and the copy probe), ``generation`` (the decode benchmark and
the quality study at decode, docs/generation.md), ``table_file`` (a tool's table copied),
``leaderboard`` (the scorecard's), ``readme`` (README.md's Results table), ``sentences`` (the
sentences of the docs' prose that carry a verdict: an aim met or not, a model at chance or on the
recall plateau; each reads its area's files through that area's module, issue 58).

Renderers (``RENDERERS``, the names a block's marker uses, gathered from those modules on first
use, so that importing a base module does not import the renderers): each is
``fn(root, *args, **kwargs)`` returning the block's markdown (ending in a newline); ``root`` is
the repository root and every path argument is relative to it. Each reads only files under
``results/`` (a run's ``final_metrics.json``, ``log.jsonl``, ``train.log``, ``manifest.json``,
through ``runs.open_run`` / ``runs.find_runs``, from its packed file or its folder; a tool's
``summary.csv``; a benchmark's ``.json``; beyond ``results/`` only the config files that a run's
manifest names, for what two compared runs differ in, ``loading.run_config``), and raises
``SourceMissing`` when one is absent.
Output is byte-stable: fixed row orders and fixed formats.

Renderers that write files (a figure beside its data): only ``leaderboard_figure`` today. Such a
renderer declares a keyword-only parameter ``write``; ``render(spec, root, write=...)`` passes it
(a marker cannot set it), and only ``python -m scripts.analysis.publish`` without ``--check`` (and
the scorecard's re-rendering of the blocks it makes stale) passes ``write=True``. With
``write=False`` (the default: ``publish --check``, ``publish.stale``, the tests) it writes nothing
and returns a text that differs from the committed block when its files are stale, so that the block
reads stale.
"""
import inspect

from scripts.analysis.published.loading import RenderError, SourceMissing  # the errors every caller catches

__all__ = ["RenderError", "SourceMissing", "render", "renderers", "writes_files"]  # and RENDERERS (``__getattr__``)

_RENDERERS = {}


def renderers():
    """{renderer name: function} of every renderer module (their ``RENDERERS``), imported on the first
    call. Raises RenderError if two modules name a renderer alike."""
    if not _RENDERERS:
        from scripts.analysis.published import (benchmark, fastmax, generation, leaderboard, lm, lra, mlm, readme,
                                                recall, sentences, table_file, tree)

        found = {}
        for module in (recall, lm, lra, benchmark, tree, fastmax, mlm, generation, table_file, leaderboard, readme,
                       sentences):
            clash = found.keys() & module.RENDERERS.keys()
            if clash:
                raise RenderError(f"renderers named twice: {', '.join(sorted(clash))} ({module.__name__})")
            found.update(module.RENDERERS)
        _RENDERERS.update(found)
    return _RENDERERS


def __getattr__(name):
    """``published.RENDERERS``: ``renderers()`` (a module attribute computed on first use, PEP 562)."""
    if name == "RENDERERS":
        return renderers()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def writes_files(fn):
    """Whether the renderer ``fn`` writes files: it has a keyword-only parameter ``write``."""
    parameter = inspect.signature(fn).parameters.get("write")
    return parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY


def render(spec, root, write=False):
    """The text of a block whose marker says ``spec`` ("<renderer> [arg ...] [key=value ...]"):
    the renderer of RENDERERS called with ``root``, the positional args and the key=value args;
    a renderer that writes files (``writes_files``) also gets ``write`` (False: it writes nothing).

    Raises:
        RenderError: an unknown renderer, or arguments it does not take.
        SourceMissing: a results file it needs does not exist.
    """
    found = renderers()
    name, *tokens = spec.split()
    if name not in found:
        raise RenderError(f"unknown renderer {name!r} (known: {', '.join(sorted(found))})")
    args = [t for t in tokens if "=" not in t]
    kwargs = dict(t.split("=", 1) for t in tokens if "=" in t)
    if "write" in kwargs:
        raise RenderError(f"renderer {name}: write= is not a marker argument "
                          "(publish decides whether files are written)")
    if writes_files(found[name]):
        kwargs["write"] = bool(write)
    try:
        inspect.signature(found[name]).bind(root, *args, **kwargs)
    except TypeError as e:
        raise RenderError(f"renderer {name}: {e}") from None
    return found[name](root, *args, **kwargs)
