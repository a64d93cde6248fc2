"""The tests find the IMDB and CIFAR-10 sources as the code does: $IMDB_DIR / $CIFAR10_DIR (the
variables data/lra/text.py and data/lra/image.py read) first, then the subsets in ../shared; a skip
names the variable that would enable the test (tests/conftest.py)."""
import os

import pytest

from data.lra import image, text


def test_the_tests_read_the_variables_the_code_reads(data_dirs):
    assert set(data_dirs.DATA_DIRS) == {text.ENV, image.ENV} == {"IMDB_DIR", "CIFAR10_DIR"}


@pytest.mark.parametrize("env", ["IMDB_DIR", "CIFAR10_DIR"])
def test_the_variable_comes_first_then_the_fallback(env, data_dirs, tmp_path, monkeypatch):
    chosen = tmp_path / "chosen"
    chosen.mkdir()
    monkeypatch.setenv(env, str(chosen))
    assert data_dirs.find(env) == data_dirs.or_skip(env) == str(chosen)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(env, "chosen")  # a relative value, as the code would read it from here
    assert data_dirs.find(env) == str(chosen)
    monkeypatch.setenv(env, str(tmp_path / "missing"))  # set but wrong: given to the code, which fails; no skip
    assert data_dirs.find(env) == str(tmp_path / "missing")
    fallback = tmp_path / "fallback"
    monkeypatch.setitem(data_dirs.DATA_DIRS, env, (str(fallback), *data_dirs.DATA_DIRS[env][1:]))
    monkeypatch.delenv(env)
    assert data_dirs.find(env) is None
    with pytest.raises(pytest.skip.Exception, match=f"set {env}="):
        data_dirs.or_skip(env)
    fallback.mkdir()
    assert data_dirs.find(env) == str(fallback)


def test_the_fixtures_honour_the_variables(imdb_dir, cifar10_dir, monkeypatch):
    """The session's sources: what the variables say when set (e.g. by .ci/run)."""
    for env, path in (("IMDB_DIR", imdb_dir), ("CIFAR10_DIR", cifar10_dir)):
        if os.environ.get(env):
            assert path == os.path.abspath(os.environ[env])
    assert text.find_source(imdb_dir) is not None and image.find_source(cifar10_dir) is not None
