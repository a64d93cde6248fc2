"""``pytest --import=FILE`` is safe suite-wide: the tests that go over every registered attention
pass with one registered from outside the repository, which has no config file, no family
module under attention/ and no FLOP formula. Run in a subprocess with ``--import`` of the
cosFormer file of docs/scorecard.md (as a user saves it): the contract test for that attention
(bfloat16 autocast, causality at T = 23 and 300, ...), the layout rule of the families, the
attention config files, the benchmark's FLOP formulas and the plot styles (the same in another
process). The whole suite with ``--import`` would take as long as the default run again."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the registry-wide tests other than the contract's (all of test_plot_style.py: its styles follow the registry)
REGISTRY_WIDE = [
    "tests/attention/test_family_imports.py",
    "tests/test_train.py::test_attention_config_files_build",
    "tests/scripts/test_bench_attention.py::test_every_registered_attention_has_a_flop_formula",
    "tests/scripts/test_plot_style.py",
]
# contract tests that must have run for the imported attention, at least once each
CONTRACT = ["test_under_bfloat16_autocast", "test_causal_support_is_what_the_class_declares",
            "test_causal_support_holds_on_long_sequences_with_the_defaults", "test_output_shape_and_dtype",
            "test_padded_keys_change_no_real_output", "test_gradients_are_finite_or_refused"]


def docs_example():
    """The Python block of docs/scorecard.md (the user's attention)."""
    with open(os.path.join(ROOT, "docs", "scorecard.md")) as f:
        return f.read().split("```python\n", 1)[1].split("```", 1)[0]


def test_the_registry_wide_tests_pass_with_an_imported_attention(tmp_path):
    source = docs_example()
    assert '@attention.register("cosformer")' in source
    (tmp_path / "cosformer.py").write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"--import={tmp_path / 'cosformer.py'}", "tests/attention/test_contract.py", *REGISTRY_WIDE,
         "-k", "cosformer or not test_contract"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    passed = [line.split(" PASSED")[0] for line in proc.stdout.splitlines() if " PASSED" in line]
    for test in CONTRACT:
        assert any(f"::{test}[cosformer" in line for line in passed), test
    for node in REGISTRY_WIDE:
        assert any(line.startswith(node) for line in passed), node
    assert not [line for line in proc.stdout.splitlines() if " SKIPPED" in line or " XFAIL" in line]
