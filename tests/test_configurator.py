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


def test_parse_explicit_says_what_was_set(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("max_iters = 7\nattention_params = dict(E=0.3)\n")
    cfg, explicit = configurator.parse_explicit(DEFAULTS, [str(path), "--out_dir=o", "--attention.b=0.9",
                                                           "--block_size=256"])
    # block_size equals its default but was given: it counts as set
    assert explicit == {"max_iters": True, "attention_params": {"E", "b"}, "out_dir": True, "block_size": True}
    assert cfg == configurator.parse(DEFAULTS, [str(path), "--out_dir=o", "--attention.b=0.9", "--block_size=256"])
    assert configurator.parse_explicit(DEFAULTS, [])[1] == {}


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
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['E'\]; accepted parameters: exclude_self, window"):
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


HELP = dict(max_iters="number of optimizer steps", learning_rate="peak learning rate")


def test_help_prints_every_key_default_and_meaning(capsys):
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as exc:
            configurator.parse(DEFAULTS, ["--max_iters=3", flag], help=HELP)
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith("usage:")
        for key, default in DEFAULTS.items():
            line = next(line for line in out.splitlines() if line.strip().startswith(f"--{key} "))
            assert repr(default) in line
            if key in HELP:
                assert line.endswith(HELP[key])


def test_help_wins_over_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exc:
        configurator.parse(DEFAULTS, ["--nope=1", "--help"])
    assert exc.value.code == 0 and "--max_iters" in capsys.readouterr().out


def test_string_key_keeps_the_text_as_typed():
    assert configurator.parse(DEFAULTS, ["--out_dir=2024"])["out_dir"] == "2024"


def test_unknown_attention_is_a_config_error():
    with pytest.raises(ConfigError, match="nope"):
        configurator.check_attention_params("nope", {})


def test_run_cli_config_error_exits_2_without_traceback(capsys):
    def main(argv):
        configurator.parse(DEFAULTS, argv)
        return "ran"

    assert configurator.run_cli(main, ["--max_iters=4"]) == "ran"
    with pytest.raises(SystemExit) as exc:
        configurator.run_cli(main, ["--max_iter=4"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown config key 'max_iter'") and "Traceback" not in err


def test_run_cli_lets_other_errors_through():
    def main(argv):
        raise KeyError("a bug, not a config error")

    with pytest.raises(KeyError):
        configurator.run_cli(main, [])
