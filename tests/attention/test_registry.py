import functools
import os

import pytest
import torch

import attention
from attention.registry import allowed_keys, check_choice, check_int
from attention.testing import random_qkv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


qkv = functools.partial(random_qkv, B=2, H=3, T=7, D=8)


@pytest.fixture
def probe_attentions():
    """Two throw-away registered classes: one declaring both context names, one declaring none.
    Removed from the registry afterwards so other tests never see them."""
    names = ("_probe_context", "_probe_plain")

    @attention.register(names[0])
    class WithContext(attention.Attention):
        causal = "exact"

        def __init__(self, scale=1.0, layer_idx=None, block_size=None):
            super().__init__()
            self.scale, self.layer_idx, self.block_size = scale, layer_idx, block_size

    @attention.register(names[1])
    class Plain(attention.Attention):
        causal = "exact"

        def __init__(self, scale=1.0):
            super().__init__()
            self.scale = scale

    yield names
    for name in names:
        attention._REGISTRY.pop(name, None)


def test_context_passed_only_to_declaring_constructors(probe_attentions):
    with_ctx, plain = probe_attentions
    ctx = {"layer_idx": 3, "block_size": 64}
    m = attention.build(with_ctx, ctx, scale=2.0)
    assert (m.scale, m.layer_idx, m.block_size) == (2.0, 3, 64)
    m = attention.build(with_ctx)  # no context: the constructor's defaults
    assert (m.layer_idx, m.block_size) == (None, None)
    assert attention.build(plain, ctx, scale=0.5).scale == 0.5  # context ignored, no TypeError
    # built-in mechanisms take the context without declaring it
    assert isinstance(attention.build("softmax", ctx), attention.Attention)


def test_context_names_are_not_user_params(probe_attentions):
    with_ctx, _ = probe_attentions
    assert attention.MODEL_CONTEXT == ("layer_idx", "block_size", "n_head", "head_dim")
    assert attention.accepted_params(with_ctx) == {"scale": 1.0}
    for key in attention.MODEL_CONTEXT:
        with pytest.raises(ValueError, match=f"'{key}'.*model supplies"):
            attention.build(with_ctx, **{key: 1})


def test_bad_context_rejected():
    with pytest.raises(ValueError, match="unknown model context key.*'n_layer'"):
        attention.build("softmax", {"n_layer": 2})
    with pytest.raises(ValueError, match="context must be a dict"):
        attention.build("softmax", [("layer_idx", 0)])


def test_accepted_params_of_softmax():
    for name in ("softmax", "softmax_reference"):
        assert attention.accepted_params(name) == {"exclude_self": False, "window": 0}


def test_base_class_has_no_exclude_self_attribute():
    # decision 3: a constructor parameter of the methods that support it, never a class default
    assert not hasattr(attention.Attention, "exclude_self")


def test_causal_support_has_no_default_and_is_checked_at_registration():
    """A method cannot be taken for exactly causal by omission (issue 44): the base class
    declares no ``causal``, and ``register`` refuses a class without one or with another value,
    naming the class and the allowed values, and registers nothing."""
    assert not hasattr(attention.Attention, "causal")

    class Forgot(attention.Attention):
        pass

    class Misspelt(attention.Attention):
        causal = "exactly"

    for cls, declared in ((Forgot, "declares none"), (Misspelt, "declares causal = 'exactly'")):
        with pytest.raises(ValueError, match=rf"attention '_probe_bad' \(.*\.{cls.__name__}\) {declared}: .*causal = "
                                             r"one of 'exact', 'leaky', 'unsupported'"):
            attention.register("_probe_bad")(cls)
        assert "_probe_bad" not in attention.registered()
    for name in attention.registered():
        assert attention.causal_support(name) in attention.CAUSAL_KINDS


def test_a_changed_default_names_its_date_and_the_old_setting():
    """``defaults_date`` and ``defaults_before`` come together (register refuses one alone), and
    ``made_before_defaults`` tells a run of the old default from a run of today's by its start date
    (unknown dates count as old; a method without a change has no old runs)."""
    class HalfDeclared(attention.Attention):
        causal = "exact"
        defaults_date = "2026-01-01T00:00:00+00:00"

    with pytest.raises(ValueError, match=r"attention '_probe_half' \(.*HalfDeclared\) declares one of defaults_date "
                                         r"and defaults_before"):
        attention.register("_probe_half")(HalfDeclared)
    assert "_probe_half" not in attention.registered()
    for name in attention.registered():
        cls = attention.attention_class(name)
        assert (cls.defaults_date is None) == (cls.defaults_before is None), name

    fastmax = attention.attention_class("fastmax")
    assert fastmax.defaults_before == 'normalization="max_norm"'
    assert fastmax.made_before_defaults("2026-11-24T04:40:24+00:00")
    assert fastmax.made_before_defaults(None)
    assert not fastmax.made_before_defaults("2026-11-27T08:09:01+00:00")
    assert not attention.attention_class("softmax").made_before_defaults(None)


def test_attention_class_is_the_registered_class():
    from attention.softmax import Softmax
    assert attention.attention_class("softmax") is Softmax
    with pytest.raises(ValueError, match="unknown attention 'softmx' .did you mean softmax"):
        attention.attention_class("softmx")


def test_python_m_attention_lists_the_registry():
    from attention.__main__ import rows

    table = rows()
    assert [row[0] for row in table] == attention.registered()
    assert {row[0]: row[1] for row in table} == {n: attention.causal_support(n) for n in attention.registered()}
    assert dict((row[0], row[4]) for row in table)["softmax"] == "softmax_reference"


def test_allowed_keys_is_none_when_everything_is_allowed():
    assert allowed_keys(5, causal=False) is None
    assert allowed_keys(5, causal=False, window=5).all()
    assert not allowed_keys(5, causal=False, window=4)[0, 4]


def test_parameter_checkers():
    check_int("n", 3, 1, "a count")
    check_choice("kind", "b", ("a", "b"))
    for bad in (0, 2.0, True, "3"):
        with pytest.raises(ValueError, match=rf"n must be an integer >= 1 \(a count\); got n={bad!r}"):
            check_int("n", bad, 1, "a count")
    with pytest.raises(ValueError, match="kind 'c' unknown; allowed: 'a', 'b'"):
        check_choice("kind", "c", ("a", "b"))


def test_unknown_name_lists_registered():
    with pytest.raises(ValueError) as e:
        attention.build("softmx")
    assert "softmax_reference" in str(e.value) and "registered" in str(e.value)


def test_unknown_parameter_lists_accepted():
    with pytest.raises(ValueError, match=r"unknown parameter.*accepted parameters: exclude_self, window"):
        attention.build("softmax", E=0.5)


def test_bad_shapes_and_mask_raise():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"\(B, H, T, D\)"):
        attention.build("softmax")(q[0], k[0], v[0], causal=True)
    with pytest.raises(ValueError, match=r"attention_mask must be a bool tensor of shape \(B, T\) = \(2, 7\)"):
        attention.build("softmax")(q, k, v, causal=True, attention_mask=torch.ones(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match="attention_mask"):
        attention.check_qkv(q, k, v, attention_mask=torch.ones(2, 7))


def test_check_params_is_the_one_validation():
    import configurator

    attention.check_params("softmax", {"window": 4})
    for params, message in [({"window": "4"}, r"parameter 'window' expects int \(default"),
                            ({"exclude_self": 1}, "parameter 'exclude_self' expects bool"),
                            ({"layer_idx": 0}, "model supplies"), ({"E": 0.5}, "unknown parameter")]:
        with pytest.raises(ValueError, match=message):
            attention.check_params("softmax", params)
        if "expects" not in message:  # build runs the same check, less the types (constructors may parse strings)
            with pytest.raises(ValueError, match=message):
                attention.build("softmax", **params)
        with pytest.raises(configurator.ConfigError, match=message):  # the command line's adapter too
            configurator.check_attention_params("softmax", params)
    with pytest.raises(ValueError, match="did you mean softmax"):
        attention.check_params("softmx", {})
