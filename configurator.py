"""Config handling for train.py and eval_ppl.py, nanoGPT style but checked.

A script declares its defaults as a dict. The command line is

    python train.py [configs/file.py ...] [--key=value ...] [--attention.<param>=value ...]

Config files are plain Python that assign known keys. ``--key=value`` values are parsed with
``ast.literal_eval`` (bare words stay strings) and must match the type of the default
(an int is accepted for a float). ``--attention.E=0.5`` sets ``attention_params["E"]``.
"""
import ast
import difflib

ATTENTION_PREFIX = "attention."


class ConfigError(ValueError):
    """A bad config file or command-line override; the message says what is allowed."""


def _unknown(key, known, where=""):
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; valid keys: {', '.join(sorted(known))}"
    return ConfigError(f"unknown config key '{key}'{where}{hint}")


def _parse_value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word such as --attention=tree


def _check_type(key, value, default):
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}' expects a bool (True/False), got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, type(default)) or (isinstance(value, bool) and not isinstance(default, bool)):
        raise ConfigError(f"config key '{key}' expects {type(default).__name__} (default {default!r}), "
                          f"got {type(value).__name__} {value!r}")
    return value


def parse(defaults, argv):
    """Apply config files and ``--key=value`` overrides in ``argv`` to a copy of ``defaults``.

    Args:
        defaults: dict of every valid key and its default value; ``attention_params`` (a dict)
            must be present for ``--attention.<param>`` overrides.
        argv: command-line arguments (without the program name).

    Returns:
        A new dict with the same keys.

    Raises:
        ConfigError: unknown key (names the closest valid keys), wrong type, malformed argument,
            or a missing config file.
    """
    config = {k: (dict(v) if isinstance(v, dict) else v) for k, v in defaults.items()}
    for arg in argv:
        if not arg.startswith("--"):
            _apply_file(config, defaults, arg)
            continue
        if "=" not in arg:
            raise ConfigError(f"malformed argument '{arg}'; expected --key=value")
        key, text = arg[2:].split("=", 1)
        value = _parse_value(text)
        if key.startswith(ATTENTION_PREFIX):
            if "attention_params" not in config:
                raise _unknown(key, defaults)
            config["attention_params"][key[len(ATTENTION_PREFIX):]] = value
        elif key not in defaults:
            raise _unknown(key, defaults)
        else:
            config[key] = _check_type(key, value, defaults[key])
    return config


def _apply_file(config, defaults, path):
    try:
        with open(path) as f:
            source = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror}") from e
    namespace = {}
    exec(compile(source, path, "exec"), namespace)  # config files are trusted plain Python
    for key, value in namespace.items():
        if key.startswith("_") or key == "__builtins__":
            continue
        if key not in defaults:
            raise _unknown(key, defaults, where=f" in {path}")
        if key == "attention_params":
            config[key].update(value)
        else:
            config[key] = _check_type(key, value, defaults[key])


def check_attention_params(name, params):
    """Check an attention name and its parameters against the registry before building.

    Raises:
        ValueError: unknown name (lists registered ones), unknown parameter (lists accepted ones),
            or a value whose type differs from the parameter's default.
    """
    import inspect

    import attention

    accepted = attention.accepted_params(name)
    for key, value in params.items():
        if key not in accepted:
            raise ConfigError(f"attention '{name}' has no parameter '{key}'; accepted: {', '.join(accepted) or 'none'}")
        default = accepted[key]
        if default is not None and default is not inspect.Parameter.empty:
            _check_type(f"attention.{key}", value, default)
