"""The shell scripts of ``scripts/`` run as the docs write them (``scripts/sweeps/<name>.sh``), so each
must be executable and start with a shebang."""
import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shell_scripts():
    return sorted(glob.glob(os.path.join(ROOT, "scripts", "**", "*.sh"), recursive=True))


def test_scripts_exist():
    assert shell_scripts(), "no shell scripts found under scripts/"


def test_every_shell_script_is_executable_with_a_shebang():
    problems = []
    for path in shell_scripts():
        rel = os.path.relpath(path, ROOT)
        if not os.access(path, os.X_OK):
            problems.append(f"{rel}: not executable (git update-index --chmod=+x {rel})")
        with open(path) as f:
            if not f.readline().startswith("#!"):
                problems.append(f"{rel}: first line is not a shebang")
    assert not problems, "\n".join(problems)
