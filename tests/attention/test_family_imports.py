"""The layout rule of attention/ (attention/__init__.py): no module of one attention family
imports another family, and the shared modules import no family, so that a family can be read,
changed or removed on its own. A family is the top-level module or folder under attention/ of a
registered class (``softmax``, ``fastmax``, ...; a class registered from a file outside the
package, ``--import``, has none); the other modules (``registry``, ``blockwise``, ``kernelized``,
``feature_maps``, ``testing``) are shared; the package's ``__init__.py``, which imports every
family so that they register, is neither."""
import ast
import pathlib

import attention
from attention.testing import in_repository

PACKAGE = pathlib.Path(attention.__file__).parent


def imported_parts(source, module):
    """The top-level parts of ``attention`` (``"linear"`` for ``attention.linear.check_int``) that
    the Python ``source`` of the dotted ``module`` (a package's as ``attention.dense.__init__``)
    imports, at any depth, relative imports resolved."""
    parts = set()
    package = module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            base += node.module.split(".") if node.module else []
            names = [base + [alias.name] for alias in node.names]
        else:
            continue
        parts.update(name[1] for name in names if len(name) > 1 and name[0] == "attention")
    return parts


def test_imported_parts_reads_every_import_form():
    assert imported_parts("from attention.linear import check_int", "attention.performer") == {"linear"}
    assert imported_parts("import attention.fastmax.chunked", "attention.tree.cpu") == {"fastmax"}
    assert imported_parts("def f():\n    from attention import softmax\n", "attention.dense.compute") == {"softmax"}
    assert imported_parts("from . import reference", "attention.dense.compute") == {"dense"}
    assert imported_parts("from .. import linear", "attention.dense.compute") == {"linear"}
    assert imported_parts("from . import linear", "attention.performer") == {"linear"}
    assert imported_parts("from .compute import regime_cost", "attention.dense.__init__") == {"dense"}
    assert imported_parts("import torch\nfrom attention.registry import Attention", "attention.linear") == {"registry"}


def test_no_family_imports_another_family():
    # the repository's registered classes (an attention registered from outside, --import, has no family here)
    families = {attention.attention_class(name).__module__.split(".")[1] for name in attention.registered()
                if in_repository(name)}
    assert {"softmax", "linear", "performer", "fastmax", "tree", "dense"} <= families
    modules = [path for path in PACKAGE.rglob("*.py") if path != PACKAGE / "__init__.py"]
    assert len(modules) > len(families)
    wrong = []
    for path in modules:
        relative = path.relative_to(PACKAGE).with_suffix("")
        module = ".".join(("attention", *relative.parts))
        own = relative.parts[0]
        for part in sorted(imported_parts(path.read_text(), module) & families - {own}):
            kind = "family" if own in families else "shared module"
            wrong.append(f"{path.relative_to(PACKAGE.parent)} ({kind} {own}) imports the family {part}")
    assert not wrong, "\n".join(wrong)
