"""scripts/plot_style.py: one style per attention method, derived from the registry, the same in
every figure and process; the figure scripts use it and put their legend outside the panels."""
import json
import os
import random
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.colors  # noqa: E402
import matplotlib.figure  # noqa: E402
import matplotlib.image  # noqa: E402
import matplotlib.lines  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402

import attention  # noqa: E402
from attention.testing import in_repository  # noqa: E402
from scripts import plot_style  # noqa: E402
from scripts.analysis import loss_curves, per_position_table  # noqa: E402
from scripts.bench import attention as bench  # noqa: E402
from scripts.bench import authors_fastmax  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ALL_JSON = os.path.join(ROOT, "results", "bench_attention", "all.json")
PAIRS = [("fastmax1", "fastmax2"), ("informer", "linear"), ("softmax", "tree")]


def pair(style):
    return style["color"], style["marker"]


def test_every_registered_attention_gets_its_own_color_and_marker():
    names = attention.registered()
    assert list(plot_style.registered_names()) == sorted(names)
    styles = {name: plot_style.method_style(name) for name in names}
    for name, style in styles.items():
        assert set(style) == {"color", "marker", "linestyle"}
        assert style["color"] in plot_style.COLORS and style["marker"] in matplotlib.lines.Line2D.markers
        assert style["linestyle"] == "-"
    assert len({pair(s) for s in styles.values()}) == len(names)
    # the registry's neighbours (sorted) differ in color, so related methods are told apart
    for a, b in zip(names, names[1:]):
        assert styles[a]["color"] != styles[b]["color"], (a, b)


@pytest.mark.parametrize("a,b", PAIRS)
def test_the_pairs_that_were_confused_get_different_colors(a, b):
    assert plot_style.method_style(a)["color"] != plot_style.method_style(b)["color"]
    styles = plot_style.figure_styles([a, b, "sdpa"])
    assert styles[a]["color"] != styles[b]["color"]


def test_a_label_maps_to_its_registered_method_and_a_variant_of_it():
    assert plot_style.parse_label("fastmax1") == ("fastmax", "1")
    assert plot_style.parse_label("fastmax_p2") == ("fastmax", "p2")
    assert plot_style.parse_label("tree_E0.5") == ("tree", "e0.5")
    assert plot_style.parse_label("tree:E=0.3,sampler=alignment") == ("tree", "e=0.3,sampler=alignment")
    assert plot_style.parse_label("dense:regime=quadratic") == ("dense", "regime=quadratic")
    assert plot_style.parse_label("softmax_reference") == ("softmax_reference", "")
    assert plot_style.parse_label("softmax_layer") == ("softmax", "layer")
    assert plot_style.parse_label("linformer") == ("linformer", "")  # not a variant of "linear"
    assert plot_style.parse_label("sdpa") == (None, "sdpa")
    assert plot_style.parse_label("danet_linear")[0] is None  # a registered name inside is not a prefix
    for name in attention.registered():
        base = plot_style.method_style(name)
        for label in (name + "1", name + "2", name + ":p=2", name.upper() + "_x"):
            assert plot_style.parse_label(label)[0] == name
            variant = plot_style.method_style(label)
            # the marker names the method, the color and the dashed line the variant
            assert variant["marker"] == base["marker"] and variant["linestyle"] == "--"
            assert variant["color"] != base["color"], label


def test_the_registry_drives_the_styles(monkeypatch):
    plot_style.registered_names.cache_clear()
    monkeypatch.setitem(attention._REGISTRY, "aaa_probe", attention.Attention)
    try:
        names = plot_style.registered_names()
        assert names[0] == "aaa_probe"
        assert plot_style.parse_label("aaa_probe2") == ("aaa_probe", "2")
        assert plot_style.method_style("aaa_probe") == {"color": plot_style.COLORS[0], "marker": plot_style.MARKERS[0],
                                                        "linestyle": "-"}
        assert len({pair(plot_style.method_style(n)) for n in names}) == len(names)
    finally:
        monkeypatch.undo()
        plot_style.registered_names.cache_clear()
    assert "aaa_probe" not in plot_style.registered_names()


SCRIPT = ("import json, sys, configurator; configurator.import_files(json.loads(sys.argv[2])); "
          "from scripts.plot_style import method_style, figure_styles; "
          "labels = json.loads(sys.argv[1]); "
          "print(json.dumps([{l: method_style(l) for l in labels}, figure_styles(labels)]))")


def imports_of_registered_attentions():
    """``--import=FILE`` for each file outside the repository that registered an attention here (pytest's
    ``--import``), so that another process has the same registry, hence the same styles."""
    outside = {attention.attention_class(name).__module__ for name in attention.registered() if not in_repository(name)}
    return [f"--import={sys.modules[module].__file__}" for module in sorted(outside)]


def test_a_style_is_the_same_in_every_process():
    with open(ALL_JSON) as f:
        labels = [m["label"] for m in json.load(f)["methods"]]
    labels += attention.registered() + ["fastmax_p1", "tree_E0.5", "no dropout", "authors2"]
    here = [{label: plot_style.method_style(label) for label in labels}, plot_style.figure_styles(labels)]
    imports = json.dumps(imports_of_registered_attentions())
    for seed in ("0", "12345"):  # Python's str hash changes with the seed; the styles must not
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(labels), imports], cwd=ROOT, env=env,
                             capture_output=True, text=True, check=True).stdout
        assert json.loads(out) == json.loads(json.dumps(here))
    assert plot_style.method_style("fastmax1") == plot_style.method_style("fastmax1")


def test_figure_styles_draw_no_pair_twice_and_keep_registered_styles():
    with open(ALL_JSON) as f:
        labels = [m["label"] for m in json.load(f)["methods"]]
    labels += ["fastmax_p1", "fastmax_p2", "tree_E0.5", "tree_E0.8", "authors1", "authors2"]
    styles = plot_style.figure_styles(labels)
    assert list(styles) == labels
    assert len({pair(s) for s in styles.values()}) == len(labels)
    for name in attention.registered():
        if name in styles:
            assert styles[name] == plot_style.method_style(name)
    shuffled = labels[:]
    random.Random(0).shuffle(shuffled)
    assert plot_style.figure_styles(shuffled) == styles  # the set decides, not the order
    # two tree variants whose canonical styles coincide are told apart in one figure
    seen = {}
    for E in range(1, 100):
        label = f"tree:E=0.{E:02d}"
        other = seen.setdefault(pair(plot_style.method_style(label)), label)
        if other != label:
            a, b = other, label
            break
    assert pair(plot_style.method_style(a)) == pair(plot_style.method_style(b))
    two = plot_style.figure_styles([a, b])
    assert two[a]["color"] != two[b]["color"]
    # a small figure gets one color per label
    few = plot_style.figure_styles(bench.LAYER_METHODS)
    assert len({s["color"] for s in few.values()}) == len(bench.LAYER_METHODS)


# ------------------------------------------------------------------------------------- the figures

@pytest.fixture
def saved_figures(monkeypatch):
    """The figures the scripts save (Figure.savefig still writes the file)."""
    figures = []
    original = matplotlib.figure.Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return figures


def check_legend_outside(fig, expected_labels):
    """One figure legend (no legend inside a panel) with these labels, its box clear of every
    panel's box on the figure's renderer; returns the legend."""
    if not hasattr(fig.canvas, "get_renderer"):  # a figure closed with pyplot keeps a bare canvas
        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == expected_labels
    box = legend.get_window_extent(renderer)
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent(renderer)), ax.get_title()
    return legend


def line_styles(fig):
    out = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                out.setdefault(line.get_label(), set()).add(
                    (matplotlib.colors.to_hex(line.get_color()), line.get_marker(), line.get_linestyle()))
    return out


def synthetic_rows(labels, D=64):
    rows = []
    for i, label in enumerate(labels):
        for mode in bench.MODES:
            for causal in (False, True):
                for T in (128, 256, 512, 1024):
                    rows.append(dict(method=label, mode=mode, causal=causal, T=T, D=D, seconds=1e-4 * (i + 1) * T))
    return rows


def expected_line(style):
    """What ``line_styles`` reads from a line drawn with ``style``."""
    return {(matplotlib.colors.to_hex(style["color"]), style["marker"], style["linestyle"])}


def test_benchmark_plot_puts_the_legend_outside_and_uses_the_styles(tmp_path, saved_figures):
    labels = attention.registered() + ["sdpa", "authors:p=1", "authors:p=2", "fastmax1", "fastmax2",
                                       "tree:E=0.3,sampler=alignment", "tree:E=0.8,sampler=alignment"]
    path = str(tmp_path / "bench.png")
    fig = bench.plot(synthetic_rows(labels), labels, path, 64)
    assert saved_figures == [fig]
    check_legend_outside(fig, labels)
    styles = plot_style.figure_styles([label for label in labels if label != "sdpa"])
    drawn = line_styles(fig)
    assert drawn.pop("sdpa") == {("#000000", "s", "--")}
    assert drawn == {label: expected_line(style) for label, style in styles.items()}
    for a, b in PAIRS:
        assert styles[a]["color"] != styles[b]["color"]
    # the saved image holds the legend: wider than the figure itself
    width = matplotlib.image.imread(path).shape[1]
    assert width > fig.get_figwidth() * 110 * 1.05


def test_plot_only_redraws_the_png_from_the_json(tmp_path, saved_figures):
    labels = ["sdpa", "fastmax1", "softmax", "tree"]
    out = str(tmp_path / "run")
    with open(out + ".json", "w") as f:
        json.dump({"settings": {"plot_D": 64}, "methods": [{"label": label} for label in labels],
                   "rows": synthetic_rows(labels) + synthetic_rows(["fastmax1"], D=32)}, f)
    assert bench.main(["--plot_only", "--out", out]) is None
    assert sorted(os.listdir(tmp_path)) == ["run.json", "run.png"]  # no timing, no other output
    check_legend_outside(saved_figures[-1], labels)
    layer_rows = [dict(method=m, mode=mode, T=T, tokens_per_s=1e5 / (i + 1)) for i, m in enumerate(bench.LAYER_METHODS)
                  for mode in bench.MODES for T in (128, 256)]
    with open(out + "_layer.json", "w") as f:
        json.dump({"settings": {}, "rows": layer_rows}, f)
    bench.main(["--plot_only", "--out", out + "_layer"])
    check_legend_outside(saved_figures[-1], list(bench.LAYER_METHODS))


def write_log(path, evals):
    os.makedirs(path)
    with open(os.path.join(path, "log.jsonl"), "w") as f:
        for it, (tr, va) in evals.items():
            f.write(json.dumps({"iter": it, "eval": {"train_loss": tr, "val_loss": va}}) + "\n")


def test_loss_curves_and_per_position_use_the_method_styles(tmp_path, saved_figures):
    labels = ["softmax", "fastmax1", "fastmax2", "dense"]
    dirs = []
    for i, label in enumerate(labels):
        dirs.append(str(tmp_path / label))
        write_log(dirs[-1], {10: (3.0 + i, 3.1 + i), 20: (2.5 + i, 2.7 + i), 30: (2.0 + i, 2.4 + i)})
    loss_curves.main(dirs + [f"--labels={','.join(labels)}", f"--out={tmp_path / 'curves'}"])
    fig = saved_figures[-1]
    check_legend_outside(fig, [f"{label} (lowest {2.4 + i:.4f})" for i, label in enumerate(labels)])
    styles = plot_style.figure_styles(labels)
    assert line_styles(fig) == {**{label: expected_line(styles[label]) for label in labels},
                                **{f"{label} (lowest {2.4 + i:.4f})": expected_line(styles[label])
                                   for i, label in enumerate(labels)}}

    L = 16
    paths = []
    for i, label in enumerate(labels[:3]):
        paths.append(tmp_path / f"{label}.json")
        paths[-1].write_text(json.dumps({"per_position": {"context_length": list(range(1, L)), "count": [2] * (L - 1),
                                                          "mean_nll": [float(c + i) for c in range(1, L)]}}))
    per_position_table.main([*map(str, paths), "--labels=" + ",".join(labels[:3]), f"--out={tmp_path / 'pp'}"])
    fig = saved_figures[-1]
    check_legend_outside(fig, labels[:3])
    styles = plot_style.figure_styles(labels[:3])
    assert line_styles(fig) == {label: expected_line(styles[label]) for label in labels[:3]}


def test_authors_fastmax_timing_legend_is_outside(tmp_path, saved_figures):
    methods = list(authors_fastmax.TIME_METHODS)
    rows = [dict(method=m, p=p, mode=mode, causal=causal, T=T, seconds=1e-3 * (i + 1) * T)
            for i, m in enumerate(methods) for p in (1, 2) for mode in authors_fastmax.MODES
            for causal in (False, True) for T in (256, 512)]
    authors_fastmax.plot([], rows, str(tmp_path / "cmp.png"))
    fig = saved_figures[-1]
    check_legend_outside(fig, methods)
    styles = plot_style.figure_styles(methods)
    assert line_styles(fig) == {m: expected_line(styles[m]) for m in methods}
