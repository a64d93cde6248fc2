"""Point the project at the offline copies in ../shared when the environment does not say otherwise;
the fixtures ``imdb_dir`` and ``cifar10_dir`` give the LRA sources ($IMDB_DIR / $CIFAR10_DIR first)."""
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")

os.environ.setdefault("TIKTOKEN_CACHE_DIR", os.path.join(SHARED, "tiktoken"))
os.environ.setdefault("WIKITEXT2_DIR", os.path.join(SHARED, "data", "wikitext-2"))
os.environ.setdefault("GPT2_TINY_HF_DIR", os.path.join(SHARED, "data", "gpt2-tiny-hf"))
os.environ.setdefault("BERT_VOCAB_FILE", os.path.join(SHARED, "data", "bert-vocab", "vocab.txt"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_flush_denormal(True)
# Under pytest-xdist (the README's test command: -n auto) the workers share the cores: each takes its
# share of torch's threads, so that two workers on two cores do not oversubscribe them.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, torch.get_num_threads() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_addoption(parser):
    parser.addoption("--import", dest="user_imports", action="append", default=[], metavar="FILE",
                     help="a Python file registering an attention or a task (configurator.import_files), imported "
                          "before collection, so that e.g. tests/attention/test_contract.py checks it too")


def pytest_configure(config):
    import configurator

    configurator.import_files([f"--import={path}" for path in config.getoption("user_imports")])


# LRA sources the code reads from an environment variable (data/lra/text.py, data/lra/image.py: ENV),
# for which the tests fall back to the small subsets in ../shared: variable -> (fallback, what it is).
DATA_DIRS = {
    "IMDB_DIR": (os.path.join(SHARED, "data", "imdb", "subset_aclImdb"), "IMDB subset",
                 "an aclImdb directory or tarball, e.g. ../shared/data/imdb/subset_aclImdb"),
    "CIFAR10_DIR": (os.path.join(SHARED, "data", "cifar10-subset"), "CIFAR-10 subset",
                    "a folder of the CIFAR-10 python batches or of cifar10_subset.npz, e.g. ../shared/data/cifar10-subset"),
}


def find_data_dir(env):
    """The source the tests read for ``env`` ("IMDB_DIR", "CIFAR10_DIR"): the variable when it is set
    (as the code reads it; a wrong one fails in the code, it is not skipped), else the fallback in
    ../shared when it exists, else None; an absolute path (tests may change the working directory)."""
    fallback = DATA_DIRS[env][0]
    if os.environ.get(env):
        return os.path.abspath(os.environ[env])
    return fallback if os.path.exists(fallback) else None


def data_dir_or_skip(env):
    """``find_data_dir(env)``, or a skip whose reason names the variable that would enable the test."""
    path = find_data_dir(env)
    if path is None:
        fallback, what, hint = DATA_DIRS[env]
        pytest.skip(f"{what} not found ({env} unset, no {fallback}); set {env}=<{hint}> to run")
    return path


@pytest.fixture(scope="session")
def data_dirs():
    """The functions above, for the tests of the resolution itself."""
    import types

    return types.SimpleNamespace(DATA_DIRS=DATA_DIRS, find=find_data_dir, or_skip=data_dir_or_skip)


# Session scope: resolved before a test's own fixtures run (tests/data/test_lra_loaders.py unsets the
# variables for the code it calls and passes these paths explicitly).
@pytest.fixture(scope="session")
def imdb_dir():
    """$IMDB_DIR, else ../shared/data/imdb/subset_aclImdb; skips (naming IMDB_DIR) when neither exists."""
    return data_dir_or_skip("IMDB_DIR")


@pytest.fixture(scope="session")
def cifar10_dir():
    """$CIFAR10_DIR, else ../shared/data/cifar10-subset; skips (naming CIFAR10_DIR) when neither exists."""
    return data_dir_or_skip("CIFAR10_DIR")


@pytest.fixture(scope="session")
def wikitext2_dir():
    path = os.environ["WIKITEXT2_DIR"]
    if not os.path.exists(os.path.join(path, "wiki.test.tokens")):
        pytest.skip(f"WikiText-2 copy not found at {path}")
    return path
