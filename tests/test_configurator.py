import pytest

import configurator
from configurator import ConfigError

DEFAULTS = dict(max_iters=100, learning_rate=1e-3, compile=False, out_dir="out", attention="softmax",
                attention_params={}, block_size=256)


def test_overrides_and_types():
    cfg = configurator.parse(DEFAULTS, ["--max_iters=5", "--learning_rate=1", "--compile=True", "--out_dir=x/y",
                                        "--attention=tree", "--attention.E=0.5", "--attention.sampler=edh"])
    assert cfg["max_iters"] == 5 and cfg["learning_rate"] == 1.0 and isinstance(cfg["learning_rate"], float)
    assert cfg["compile"] is True and cfg["out_dir"] == "x/y"
    assert cfg["attention"] == "tree" and cfg["attention_params"] == {"E": 0.5, "sampler": "edh"}
    assert DEFAULTS["attention_params"] == {}  # defaults untouched


def test_config_file_then_override(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("max_iters = 7\nattention_params = dict(E=0.3)\n_helper = 1\n")
    cfg = configurator.parse(DEFAULTS, [str(path), "--max_iters=9", "--attention.b=0.9"])
    assert cfg["max_iters"] == 9 and cfg["attention_params"] == {"E": 0.3, "b": 0.9}


@pytest.mark.parametrize("arg, message", [
    ("--max_iter=5", "did you mean max_iters"),
    ("--max_iters=abc", "expects int"),
    ("--max_iters=1.5", "expects int"),
    ("--compile=1", "expects a bool"),
    ("--max_iters", "expected --key=value"),
])
def test_bad_overrides(arg, message):
    with pytest.raises(ConfigError, match=message):
        configurator.parse(DEFAULTS, [arg])


def test_unknown_key_in_file(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("blocksize = 7\n")
    with pytest.raises(ConfigError, match="unknown config key 'blocksize' in .*did you mean block_size"):
        configurator.parse(DEFAULTS, [str(path)])


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read config file"):
        configurator.parse(DEFAULTS, ["configs/does_not_exist.py"])


def test_attention_params_checked():
    with pytest.raises(ValueError, match="registered"):
        configurator.check_attention_params("nope", {})
    with pytest.raises(ValueError, match="no parameter 'E'"):
        configurator.check_attention_params("softmax", {"E": 0.5})


def test_shipped_configs_parse():
    import glob
    import os

    import train
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    names = glob.glob(os.path.join(root, "configs", "*.py"))
    assert names
    for name in names:
        cfg = configurator.parse(train.DEFAULTS, [name])
        assert cfg["n_embd"] % cfg["n_head"] == 0
