"""Generation (docs/generation.md, issue 59): the decode benchmark's tables (scripts/bench/decode.py's
decode.json) and the quality study at decode (scripts/analysis/decode_quality.py's quality.json).
Whether an aim is met is ``verdicts.aim_met``'s word.

Renderers (``RENDERERS``):

- ``decode_table <decode.json> [suite=layer|gpt]``: a row per method, its decode kind (and, for the
  GPT mini, how it generated: decode or recompute), its time per generated token at every context
  with the ratio to softmax's KV cache in brackets, and its state bytes (one value when constant in
  the context, else smallest-largest); cells the run skipped or failed say so; a line under the
  table names the CPU, threads, sizes and repeats.
- ``decode_aims <decode.json>``: the benchmark's four aims on this CPU (a state's time per token flat
  in the context, its bytes constant, tree attention's inner products per token, the context above
  which tree decodes faster than the KV cache), what was measured and the verdict.
- ``decode_quality <quality.json>``: a row per swapped-in method: the fraction of steps at which it
  picks exact attention's greedy token and the mean KL(exact || method), each as the mean over
  prompts with its bootstrap 95% interval and the median (range) across prompts; a line naming the
  model run, the prompts and the steps.
"""
from scripts.analysis.published import verdicts
from scripts.analysis.published.formatting import factor, markdown_table, short_cpu
from scripts.analysis.published.loading import RenderError, SourceMissing, load_json

SUITES = {"layer": "one attention layer", "gpt": "the GPT mini end to end"}
BASELINE = "softmax"  # the benchmark's reference (scripts/bench/decode.py's BASELINE)


def size(nbytes):
    """Bytes as the tables print them (binary units): 512 B, 130 KiB, 8.0 MiB, 1.2 GiB (one decimal
    below 10)."""
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{nbytes:.0f} B"


def milliseconds(seconds):
    """Seconds per token as milliseconds with three significant digits: 0.0821, 1.23, 45.6, 120."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def skipped(note):
    """A skipped or failed row's cell: "skipped (memory)", "skipped (time)", "failed", or "-"."""
    if note.startswith("failed"):
        return "failed"
    if note.startswith("skipped"):
        return "skipped (memory)" if "GB" in note else "skipped (time)" if "s >" in note else "skipped"
    return "-"


def load_decode(root, decode_json):
    """decode.json's payload; SourceMissing when absent or without rows."""
    payload = load_json(root, decode_json)
    if not payload.get("rows"):
        raise SourceMissing(f"a rendered block needs the rows of {decode_json}; it has none")
    return payload


def render_decode_table(root, decode_json, suite="layer"):
    """The decode benchmark's table of ``suite`` ("layer" or "gpt") from ``decode_json`` (module
    docstring). Raises RenderError for another suite, SourceMissing when the file or the suite's
    rows are absent."""
    if suite not in SUITES:
        raise RenderError(f"decode_table: suite {suite!r} unknown; allowed: {', '.join(SUITES)}")
    payload = load_decode(root, decode_json)
    rows = [r for r in payload["rows"] if r["suite"] == suite]
    if not rows:
        raise SourceMissing(f"a rendered block needs the {suite} rows of {decode_json}; it has none")
    contexts = sorted({r["context"] for r in rows if r["context"]})
    labels = list(dict.fromkeys(r["method"] for r in rows))
    by = {(r["method"], r["context"]): r for r in rows}
    table = []
    for label in labels:
        mine = [r for r in rows if r["method"] == label]
        cells = []
        for L in contexts:
            r = by.get((label, L))
            if r is None:
                cells.append("-")
            elif r["seconds_per_token"] is None:
                cells.append(skipped(r["note"]))
            else:
                ratio = r["ratio_to_baseline"]
                spread = (f" [{milliseconds(r['seconds_min'])}-{milliseconds(r['seconds_max'])}]"
                          if r.get("seconds_min") is not None and r.get("seconds_max") is not None else "")
                cells.append(milliseconds(r["seconds_per_token"]) + spread
                             + ("" if ratio is None or label == BASELINE else f" ({factor(ratio)})"))
        sizes = sorted({r["state_bytes"] for r in mine if r["state_bytes"] is not None})
        state = "-" if not sizes else size(sizes[0]) if len(sizes) == 1 else f"{size(sizes[0])}-{size(sizes[-1])}"
        kind = mine[0]["decode"] or "-"
        if suite == "gpt":
            modes = sorted({r["mode"] for r in mine if r["mode"]})
            kind += f", {' / '.join(modes)}" if modes else ""
        table.append([label, kind, *cells, state])
    header = ["method", "decode" + (", generated by" if suite == "gpt" else ""),
              *(f"L = {L:,} (ms)" for L in contexts), "state bytes"]
    s = payload["settings"]
    sizes_words = (f"B = 1, H = {s['heads']}, D = {s['D']}, {s['dtype']}" if suite == "layer" else
                   f"{s['gpt_config']}, randomly initialised, greedy")
    line = (f"\nTime per generated token in ms, median of {s['repeats']} samples of {s['steps']} tokens after a "
            f"warm-up [their range] (in round brackets: the median over softmax's KV cache's at the same context); {SUITES[suite]}, {sizes_words}; "
            f"{short_cpu(s['machine']['cpu'])}, {s['threads']} thread{'' if s['threads'] == 1 else 's'}"
            f"{', quick run' if s.get('quick') else ''}.\n")
    return markdown_table(header, table) + line


def aim_words(met, note=""):
    """"met" / "not met" (``verdicts.aim_met`` over the one run) or "not measured" (with ``note``)."""
    if met is None:
        return "not measured" + (f" ({note})" if note else "")
    return verdicts.aim_met([met], bool)


def render_decode_aims(root, decode_json):
    """The decode benchmark's aims (scripts/bench/decode.py's ``aims``) as a table: aim, what was
    measured, verdict. Raises SourceMissing when the file or its aims are absent."""
    payload = load_decode(root, decode_json)
    aims = payload.get("aims")
    if not aims:
        raise SourceMissing(f"a rendered block needs the aims of {decode_json}; it has none")
    flat, const, ips, cross = (aims[k] for k in ("state_time_flat", "state_bytes_constant", "tree_inner_products",
                                                "tree_crossover"))
    flat_cells = [f"{e['method']} {e['ratio']:.2f}x" + ("" if e["met"] else " (missed)")
                  for e in flat["methods"] if e["ratio"] is not None]
    flat_contexts = sorted({(e["reference_context"], e["largest_context"]) for e in flat["methods"]
                            if e["ratio"] is not None})
    span = (f" ({', '.join(f'{b:,} over {a:,}' for a, b in flat_contexts)})" if flat_contexts else "")
    const_cells = [f"{e['method']} {' / '.join(size(b) for b in e['bytes'])}" for e in const["methods"] if e["bytes"]]
    if ips["slope"] is not None:
        ratios = [p["over_L_to_E"] for p in ips["per_context"]]
        ips_cell = (f"{ips['method']}: slope {ips['slope']:.2f} (aim {ips['E']} ± {ips['tolerance']}); "
                    f"inner products / L^{ips['E']} {min(ratios):.2f}-{max(ratios):.2f}")
    else:
        ips_cell = "-"
    cross_cell = f"{cross['method']}: {cross['words']}" if cross.get("words") else "-"
    table = [
        [f"a state's time per token at the largest context within {flat['limit']}x of 1k", "; ".join(flat_cells) + span
         if flat_cells else "-", aim_words(flat["met"])],
        ["a state's bytes constant in the context", "; ".join(const_cells) or "-", aim_words(const["met"])],
        [f"tree (E = {ips['E']}) about L^{ips['E']} inner products per token", ips_cell,
         aim_words(ips["met"], ips.get("note", ""))],
        ["tree decodes faster than the KV cache above some context", cross_cell,
         aim_words(cross["met"], "" if cross["method"] else "no tree decode path")],
    ]
    return markdown_table(["aim", "measured", "verdict"], table)


def interval(stats, fmt):
    """"mean [low, high]" of a summary (the bootstrap interval when there is one)."""
    if stats.get("ci_low") is None:
        return f"{stats['mean']:{fmt}}"
    return f"{stats['mean']:{fmt}} [{stats['ci_low']:{fmt}}, {stats['ci_high']:{fmt}}]"


def spread(stats, fmt):
    """"median (min-max)" of a summary across prompts."""
    return f"{stats['median']:{fmt}} ({stats['min']:{fmt}}-{stats['max']:{fmt}})"


def render_decode_quality(root, quality_json):
    """The quality study's table from ``quality_json`` (module docstring). Raises SourceMissing when
    the file or its methods are absent."""
    payload = load_json(root, quality_json)
    methods = payload.get("methods")
    if not methods:
        raise SourceMissing(f"a rendered block needs the methods of {quality_json}; it has none")
    table = [[m["method"], interval(m["agreement"], ".3f"), spread(m["agreement"], ".3f"), interval(m["kl"], ".4f"),
              spread(m["kl"], ".4f")] for m in methods]
    s, ref = payload["settings"], payload["reference"]
    model = payload["model"]
    commit = (model.get("train") or {}).get("commit")
    line = (f"\n{s['prompts']} prompts of {s['prompt_len']} tokens from the WikiText-2 {s['split']} split (seed "
            f"{s['seed']}), {s['steps']} steps teacher-forced on exact ({ref['attention']}) attention's greedy "
            f"continuation; model {model['source']}" + (f" (trained at {commit[:12]})" if commit else "") +
            f"; exact attention's own forward agrees with its greedy tokens at "
            f"{ref['agreement_with_own_greedy']['mean']:.3f} of the steps. Means with bootstrap 95% intervals "
            f"over prompts ({s['bootstrap']} resamples); KL in nats.\n")
    header = ["method", "same token as exact", "per prompt: median (range)", "KL(exact ‖ method)",
              "per prompt: median (range)"]
    return markdown_table(header, table) + line


RENDERERS = {"decode_table": render_decode_table, "decode_aims": render_decode_aims,
             "decode_quality": render_decode_quality}
