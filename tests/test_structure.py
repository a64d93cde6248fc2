"""The repository's structure rules (docs/architecture.md): the import graph of our modules has no
cycle (imports inside functions count: a module that needs another only when called still depends on
it), and every config key of train.py has its default declared in one module only (the model's
keys in ``model.ModelConfig``, the loop's in ``training.COMMON_DEFAULTS``, a task's in its module,
those of a data set that several tasks train on in its data module (``CONFIG_DEFAULTS``); the eval scripts take a key that means the same from there and say why they redeclare the others).
The rule that no attention family imports another is ``tests/attention/test_family_imports.py``."""
import ast
import pathlib

import eval_mlm
import eval_ppl
import sample
import tasks
import train

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("attention", "data", "scripts", "tasks")


def our_modules():
    """Dotted name -> path of every module of the repository (tests and the virtual environment
    excluded); a package is named by its folder (``attention``) and its ``__init__.py``."""
    modules = {path.stem: path for path in ROOT.glob("*.py")}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imported_modules(path, name, modules):
    """Our modules that the module ``name`` at ``path`` imports: every import statement, those inside
    functions too (a function's import runs only when it is called, so it cannot fail at import time,
    but two modules that need each other are one tangle all the same), relative imports resolved;
    ``import a.b`` counts as ``a.b`` (and its package ``a``, which Python imports first)."""
    is_package = path.name == "__init__.py"
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = set()

    def add(dotted):
        parts = dotted.split(".")
        for i in range(1, len(parts) + 1):
            candidate = ".".join(parts[:i])
            if candidate in modules and candidate != name:
                found.add(candidate)

    def visit(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom):
                base = package[:len(package) - child.level + 1] if child.level else []
                base = ".".join(base + (child.module.split(".") if child.module else []))
                add(base)
                for alias in child.names:
                    add(f"{base}.{alias.name}")
            visit(child)

    visit(ast.parse(path.read_text(), filename=str(path)))
    return found


def find_cycle(graph):
    """One cycle of ``graph`` (node -> set of nodes) as a list of nodes, or None."""
    state, stack = {}, []

    def walk(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None


def test_imports_inside_functions_count(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("import b\n\n\ndef f():\n    from c import x\n    import d.e\n")
    modules = {name: tmp_path / f"{name}.py" for name in ("a", "b", "c", "d", "d.e")}
    assert imported_modules(path, "a", modules) == {"b", "c", "d", "d.e"}


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_import_graph_has_no_cycle():
    modules = our_modules()
    assert {"train", "model", "checkpoint", "attention", "attention.registry", "tasks.lm"} <= set(modules)
    graph = {name: imported_modules(path, name, modules) for name, path in modules.items()}
    # a package importing its own submodules (attention/__init__.py registers every family) is how
    # packages work; the cycle rule is about modules reaching back up into whoever imports them
    for name in graph:
        graph[name] = {dep for dep in graph[name] if not dep.startswith(name + ".")}
        if modules[name].name != "__init__.py":  # a submodule reaches its package's __init__ first
            graph[name] = {dep for dep in graph[name] if not name.startswith(dep + ".")}
    assert "model" in graph["train"] or "model" in graph["training"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def literal_keys(path, variable):
    """The keyword names of ``variable = dict(...)`` at the top level of the Python file ``path``
    (``**`` spreads are not declarations and are skipped)."""
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == variable for t in node.targets)
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "dict"):
            return [kw.arg for kw in node.value.keywords if kw.arg is not None]
    return []


def model_config_keys(path):
    """Fields of ``ModelConfig`` in ``path`` declared as config keys (``field = _key(...)``)."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelConfig")
    return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.value, ast.Call)
            and getattr(n.value.func, "id", None) == "_key"]


def test_every_config_key_of_train_is_declared_once():
    declared = {}
    sources = [(ROOT / "training.py", literal_keys(ROOT / "training.py", "COMMON_DEFAULTS")),
               (ROOT / "model.py", model_config_keys(ROOT / "model.py"))]
    sources += [(ROOT / "tasks" / f"{tasks.REGISTRY[name].split('.')[-1]}.py", "DEFAULTS") for name in tasks.available()]
    # keys that several tasks read because they train on the same data live in the data module
    sources += [(path, "CONFIG_DEFAULTS") for path in (ROOT / "data").rglob("*.py")]
    for path, keys in sources:
        for key in literal_keys(path, keys) if isinstance(keys, str) else keys:
            declared.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert set(declared) == set(train.DEFAULTS), set(declared) ^ set(train.DEFAULTS)
    assert declared["dataset_config"] == ["data/wikitext2/prepare.py"] and declared["n_layer"] == ["model.py"]
    twice = {key: where for key, where in declared.items() if len(where) > 1}
    assert not twice, f"config keys declared in more than one module: {twice}"


def test_the_eval_scripts_redeclare_a_key_of_train_only_with_a_reason():
    for script in (eval_ppl, eval_mlm, sample):
        path = pathlib.Path(script.__file__)
        own = set(literal_keys(path, "DEFAULTS")) & set(train.DEFAULTS)
        assert own == set(script.OWN_KEYS), (path.name, own ^ set(script.OWN_KEYS))
        assert all(reason for reason in script.OWN_KEYS.values())
        shared = set(script.DEFAULTS) & set(train.DEFAULTS) - own
        assert shared and all(script.DEFAULTS[key] == train.DEFAULTS[key] for key in shared), path.name


# Fallbacks that read what was saved before a key existed (issue 58 item 4), each with since when
# the key is saved: (file, key, fallback value) -> why.
SAVED_BEFORE_THE_KEY = {
    ("checkpoint.py", "task", "lm"): "ckpt['task'] is saved since bbbf0fb (2026-11-22); earlier checkpoints were all lm",
}
FALLBACK_SCOPE = ("*.py", "tasks/**/*.py", "data/**/*.py")  # train.py, the eval scripts and what they run


def config_fallbacks(source, keys):
    """(line, key, fallback) of every ``<receiver>.get("<key>", <literal>)`` in the Python
    ``source`` whose key is one of ``keys`` and whose receiver holds a configuration or a
    checkpoint: a name ending in cfg, config, args, ckpt or saved, or ``<x>.get("config", ...)`` /
    ``<x>["config"]``. A fallback that is not a literal (``DEFAULTS[key]``) reads the declaration."""
    def holds_config(node):
        if isinstance(node, ast.Name):
            return node.id.endswith(("cfg", "config", "args", "ckpt", "saved"))
        if isinstance(node, ast.Subscript):
            return getattr(node.slice, "value", None) == "config"
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and bool(node.args) and getattr(node.args[0], "value", None) == "config")

    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys
                and holds_config(node.func.value)):
            try:
                fallback = ast.literal_eval(node.args[1])
            except ValueError:
                continue
            found.append((node.lineno, node.args[0].value, fallback))
    return found


def test_config_fallbacks_finds_literal_fallbacks_on_declared_keys_only():
    keys = {"mlm_bias_init", "dataset", "task", "seed"}
    assert config_fallbacks('cfg.get("mlm_bias_init", "zero")', keys) == [(1, "mlm_bias_init", "zero")]
    assert config_fallbacks('run_config.get("dataset", "lm")', keys) == [(1, "dataset", "lm")]
    assert config_fallbacks('ckpt.get("config", {}).get("task", "lm")', keys) == [(1, "task", "lm")]
    assert config_fallbacks('cfg.get("mlm_bias_init", DEFAULTS["mlm_bias_init"])', keys) == []  # the declaration
    assert config_fallbacks('manifest.get("seed", "unknown")', keys) == []  # a data manifest's field
    assert config_fallbacks('cfg.get("not_a_key", 0)', keys) == []


def test_no_inline_fallback_restates_or_contradicts_a_declared_default():
    """A key's default is read from its one declaration: ``cfg.get("<declared key>", <literal>)``
    states it a second time (or contradicts it). Only a read of what was saved before the key
    existed keeps one (``SAVED_BEFORE_THE_KEY``); scripts/, which read results of every age, are
    not in ``FALLBACK_SCOPE``."""
    keys = set(train.DEFAULTS)
    for script in (eval_ppl, eval_mlm, sample):
        keys |= set(script.DEFAULTS)
    found = {}
    for pattern in FALLBACK_SCOPE:
        for path in sorted(ROOT.glob(pattern)):
            for line, key, fallback in config_fallbacks(path.read_text(), keys):
                found[(str(path.relative_to(ROOT)), key, fallback)] = line
    wrong = {f"{where}:{line} .get({key!r}, {fallback!r})":
             "restates the declared default" if fallback == train.DEFAULTS.get(key) else "contradicts the declaration"
             for (where, key, fallback), line in found.items() if (where, key, fallback) not in SAVED_BEFORE_THE_KEY}
    assert not wrong, f"read cfg[key] instead, or add the fallback to SAVED_BEFORE_THE_KEY with since when: {wrong}"
    assert set(found) == set(SAVED_BEFORE_THE_KEY), "an allowed fallback is gone: remove it from SAVED_BEFORE_THE_KEY"


PUBLISHED_MODULE_LINES = 550  # "about 500" (issue 58 item 1): a module that grows past it is split by area


def test_no_module_of_the_rendering_package_is_much_over_500_lines():
    """scripts/analysis/published/ is read by the table one wants to change: a reader names the
    module from the table's area, and no module grows back into the one file it was split from."""
    sizes = {path.name: len(path.read_text().splitlines())
             for path in sorted((ROOT / "scripts" / "analysis" / "published").glob("*.py"))}
    assert {"verdicts.py", "loading.py", "formatting.py", "papers.py"} <= set(sizes)
    over = {name: n for name, n in sizes.items() if n > PUBLISHED_MODULE_LINES}
    assert not over, f"split these by area (at most about 500 lines a module): {over}"
