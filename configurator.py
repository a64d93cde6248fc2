"""Config handling for train.py and eval_ppl.py, nanoGPT style but checked.

A script declares its defaults as a dict (and a dict of one-line meanings). The command line is

    python train.py [configs/file.py ...] [--key=value ...] [--attention.<param>=value ...]
    python train.py --help

Config files are plain Python that assign known keys. ``--key=value`` values are parsed with
``ast.literal_eval`` (bare words stay strings) and must match the type of the default
(an int is accepted for a float). ``--attention.E=0.5`` sets ``attention_params["E"]``.
``--help`` / ``-h`` prints every key with its default and meaning and exits with status 0.
``run_cli(main)`` turns a ConfigError into ``error: <message>`` on stderr and exit status 2.

``--import=FILE`` (or ``--import FILE``; repeatable; train.py, eval_ppl.py and the attention
benchmark) imports a user's Python file before the keys are read, so that an attention or a task
it registers (``attention.register``, ``tasks.register``) can be named without an edit of the
repository (``import_files``).
"""
import ast
import difflib
import importlib.util
import os
import sys
import textwrap

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


HELP_FLAGS = ("--help", "-h")
HELP_COLUMNS = 100  # --help wraps every meaning to this width


def format_help(defaults, help=None, prog=None):
    """The ``--help`` text: usage, then per key its name, default and meaning, the meaning wrapped
    to ``HELP_COLUMNS`` columns in a column of its own (continuation lines indented to it).

    Args:
        defaults: dict of every valid key and its default value (printed in this order).
        help: dict key -> one-line meaning; keys without an entry print no meaning.
        prog: program name for the usage line (default: the running script's file name).
    """
    help = help or {}
    prog = prog or os.path.basename(sys.argv[0] or "script.py")
    lines = [f"usage: python {prog} [config_file.py ...] [--key=value ...]"
             + (" [--attention.<param>=value ...]" if "attention_params" in defaults else ""),
             "",
             "Config files are Python files assigning the keys below; later arguments win.",
             "Values are Python literals (bare words are strings) of the default's type.",
             "",
             "keys (default, meaning):"]
    shown = {k: repr(v) for k, v in defaults.items()}
    width = min(24, max(len(k) for k in defaults)) if defaults else 0
    dwidth = min(16, max(len(s) for s in shown.values())) if defaults else 0
    column = 2 + 2 + width + 1 + dwidth + 2  # where every meaning starts
    for key, text in shown.items():
        head = f"  --{key:<{width}} {text:<{dwidth}}  "
        body = textwrap.wrap(help.get(key, ""), width=HELP_COLUMNS - column, break_long_words=False,
                             break_on_hyphens=False)
        if len(head) > column and body:  # a long name or default: its meaning starts on the next line
            lines.append(head.rstrip())
            head = ""
        lines.append((head.ljust(column) + (body[0] if body else "")).rstrip())
        lines.extend(" " * column + line for line in body[1:])
    return "\n".join(lines)


def parse(defaults, argv, help=None):
    """Apply config files and ``--key=value`` overrides in ``argv`` to a copy of ``defaults``.

    Args:
        defaults: dict of every valid key and its default value; ``attention_params`` (a dict)
            must be present for ``--attention.<param>`` overrides.
        argv: command-line arguments (without the program name).
        help: optional dict key -> one-line meaning, printed by ``--help`` / ``-h``.

    Returns:
        A new dict with the same keys (``parse_explicit`` also says which keys were set).

    Raises:
        SystemExit(0): ``--help`` or ``-h`` in ``argv`` (after printing every key, its default
            and meaning to stdout).
        ConfigError: unknown key (names the closest valid keys), wrong type, malformed argument,
            a missing config file, or one that does not run (a syntax error or an exception: the
            file, the line and what Python says).
    """
    return parse_explicit(defaults, argv, help)[0]


def parse_explicit(defaults, argv, help=None):
    """``parse``, and which keys the config files and the command line set.

    Returns:
        (config, explicit): ``config`` as ``parse`` returns it; ``explicit`` a dict key -> True
        for every key assigned in a config file or by ``--key=value``, and, for keys whose
        default is a dict (``attention_params``, ``lra_options``), key -> the set of entries
        assigned (``--attention.E=0.5`` gives ``{"attention_params": {"E"}}``). A resumed run
        uses it to tell a setting the user asked for from a default.

    Raises:
        SystemExit(0), ConfigError: as ``parse``.
    """
    if any(arg in HELP_FLAGS for arg in argv):
        try:
            print(format_help(defaults, help), flush=True)
        except BrokenPipeError:  # `--help | head`: the reader left; not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(0)
    config = {k: (dict(v) if isinstance(v, dict) else v) for k, v in defaults.items()}
    explicit = {}
    for arg in argv:
        if not arg.startswith("--"):
            _apply_file(config, defaults, arg, explicit)
            continue
        if "=" not in arg:
            raise ConfigError(f"malformed argument '{arg}'; expected --key=value")
        key, text = arg[2:].split("=", 1)
        value = _parse_value(text)
        if key.startswith(ATTENTION_PREFIX):
            if "attention_params" not in config:
                raise _unknown(key, defaults)
            config["attention_params"][key[len(ATTENTION_PREFIX):]] = value
            _mark(explicit, "attention_params", {key[len(ATTENTION_PREFIX):]: value}, defaults)
        elif key not in defaults:
            raise _unknown(key, defaults)
        else:
            if isinstance(defaults[key], str) and not isinstance(value, str):
                value = text  # a string key keeps the text as typed: --wandb_run_name=2024
            config[key] = _check_type(key, value, defaults[key])
            _mark(explicit, key, config[key], defaults)
    return config, explicit


def _mark(explicit, key, value, defaults):
    if isinstance(defaults[key], dict) and isinstance(value, dict):
        entries = explicit.get(key)
        explicit[key] = (entries if isinstance(entries, set) else set()) | set(value)
    else:
        explicit[key] = True


def _apply_file(config, defaults, path, explicit):
    if "=" in path and not os.path.exists(path):  # `max_iters=10` or `-max_iters=10`: a key without its dashes
        key = path.lstrip("-").split("=", 1)[0]
        if key in defaults or key.startswith(ATTENTION_PREFIX):
            raise ConfigError(f"'{path}' is not a config file; did you mean --{path.lstrip('-')}?")
        raise _unknown(key, defaults, where=f" in '{path}' (neither a config file nor a setting; settings are "
                                            f"written --key=value)")
    try:
        with open(path) as f:
            source = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read config file '{path}': {e.strerror}") from e
    namespace = {}
    try:
        exec(compile(source, path, "exec"), namespace)  # config files are trusted plain Python
    except SyntaxError as e:
        raise ConfigError(f"config file {path}, {syntax_error(e, path)}") from None
    except Exception as e:  # a NameError, an import that fails, ...: what Python says, and where
        raise ConfigError(f"config file {path}, line {_line_in(e, path)}: {type(e).__name__}: {e}") from None
    for key, value in namespace.items():
        if key.startswith("_") or key == "__builtins__":
            continue
        if key not in defaults:
            raise _unknown(key, defaults, where=f" in {path}")
        if key == "attention_params":
            config[key].update(value)
        else:
            config[key] = _check_type(key, value, defaults[key])
        _mark(explicit, key, value, defaults)


def check_attention_params(name, params, context=None):
    """``attention.check_params`` (the registry's one check of a name and its parameters) with
    its ValueError turned into a ConfigError, so a command line reports it as ``error:``. With a
    model ``context`` (``attention.MODEL_CONTEXT`` keys), the attention is also built once on the
    meta device (no memory, no data), so that its constructor checks the values (fastmax's p,
    tree attention's E) before anything is prepared or trained.

    Raises:
        ConfigError (a ValueError): unknown name (lists registered ones), a model-context name,
            unknown parameter (lists accepted ones), a value whose type differs from the
            parameter's default, or (with ``context``) a value the constructor rejects (its
            message, which says what is allowed).
    """
    import attention
    import torch

    try:
        attention.check_params(name, params)
        if context is not None:
            with torch.device("meta"):
                attention.build(name, context=context, **params)
    except ValueError as e:
        raise ConfigError(str(e) if f"'{name}'" in str(e) else f"attention '{name}': {e}") from None


def check_device(device):
    """Refuse a device this machine does not have (ConfigError: what was asked, what is allowed,
    what this PyTorch build and machine offer), before any data is prepared.

    Allowed: "cpu", "cuda", "cuda:N" (N below the number of visible GPUs), "mps"."""
    import re

    import torch

    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", device):
        raise ConfigError(f"unknown device {device!r}; allowed: cpu, cuda, cuda:N (N = GPU index), mps")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            why = "this PyTorch build has no CUDA" if torch.version.cuda is None else "no CUDA GPU is visible"
            raise ConfigError(f"device={device} but {why} (torch {torch.__version__}); use --device=cpu")
        index, count = int(device.partition(":")[2] or 0), torch.cuda.device_count()
        if index >= count:
            raise ConfigError(f"device={device} but this machine has {count} CUDA GPU(s): cuda:0..cuda:{count - 1}")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError(f"device=mps but Apple's MPS backend is not available here (torch {torch.__version__}); "
                          f"use --device=cpu")


def import_files(argv):
    """Import the Python files that ``argv`` names with ``--import=FILE`` or ``--import FILE``, in
    order, each as the module named by its file name (``cosformer.py`` -> ``cosformer``), and
    return ``argv`` without them. A file registers what it defines when it is imported
    (``attention.register``, ``tasks.register``); importing the same file again does nothing.

    Returns:
        (argv, paths): the other arguments, in order, and the absolute paths imported.

    Raises:
        ConfigError: ``--import`` without a file; a file that does not exist or is not a ``.py``
            file; a file whose name is a module already imported from elsewhere (rename it); a
            file (or a module it imports) with a syntax error (the file, line and Python's message).
        Whatever else the file raises while it runs (its own traceback: the error is in that code).
    """
    rest, paths = [], []
    args = iter(argv)
    for arg in args:
        if arg == "--import":
            path = next(args, None)
            if path is None or path.startswith("--"):
                raise ConfigError("--import needs a Python file: --import=path/to/my_attention.py")
        elif arg.startswith("--import="):
            path = arg[len("--import="):]
        else:
            rest.append(arg)
            continue
        paths.append(_import_file(path))
    return rest, paths


def _import_file(path):
    full = os.path.abspath(os.path.expanduser(path))
    if not path.endswith(".py") or not os.path.isfile(full):
        raise ConfigError(f"--import={path}: not a Python file (expected an existing path/to/file.py)")
    name = os.path.splitext(os.path.basename(full))[0]
    loaded = sys.modules.get(name)
    if loaded is not None:
        if os.path.abspath(getattr(loaded, "__file__", "") or "") == full:
            return full
        raise ConfigError(f"--import={path}: a module named {name!r} is already imported from "
                          f"{getattr(loaded, '__file__', None) or 'the standard library'}; rename the file")
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it, as Python's own import does (pickling, self-imports)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:  # the file cannot run at all: one line, as for a config file
        del sys.modules[name]
        raise ConfigError(f"--import={path}: {syntax_error(e, full)}") from None
    except BaseException:
        del sys.modules[name]
        raise
    return full


def syntax_error(error, path):
    """What Python says of a SyntaxError in one line: ``line N: <message>: <the line>``, with the
    file named when it is not ``path`` (a module the file imports)."""
    where = "" if os.path.abspath(error.filename or path) == os.path.abspath(path) else f"{error.filename}, "
    text = (error.text or "").strip()
    text = f": {text[:80]}" + ("..." if len(text) > 80 else "") if text else ""
    return f"{where}line {error.lineno}: {error.msg}{text}"


def _line_in(error, path):
    """The line of ``path`` that was running when ``error`` was raised (its traceback's last frame
    in that file), or "?"."""
    line, tb = "?", error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def run_cli(main, argv=None):
    """Run ``main(argv)`` (default ``sys.argv[1:]``) as a command-line program.

    A ConfigError (unknown key, bad value, bad combination of settings) prints
    ``error: <message>`` on stderr and exits with status 2, without a traceback; every other
    exception propagates unchanged. Returns what ``main`` returns.
    """
    try:
        return main(sys.argv[1:] if argv is None else argv)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
