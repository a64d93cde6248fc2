"""Shared pieces of Fastmax's Triton kernels: products in the kernels' precision, the launch record.

Precision (issue 56, item 3). The kernels take q, k, v (and the gradients) in their own dtype,
float32, bfloat16 or float16, with no float32 copies; every accumulator and state is float32.
``mm`` multiplies two tiles with float32 accumulation: float32 operands as exact "ieee" products
(the exactness tests), 16-bit operands on the tensor cores (``mma`` / ``wgmma``). A float32 tile
computed inside a kernel (attention weights, a state) that meets a 16-bit tile in a product is
first rounded to the 16-bit dtype with ``to_operand``, as FlashAttention does with its P.

Float32 operands follow PyTorch's float32 matmul precision (``dot_mode``): exact "ieee" products
by default ("highest"; the exactness tests), TF32 tensor cores under "high" / "medium". The
"ieee" lowering needs many more registers on a GPU (the offline report shows spills): a float32
run for speed sets ``torch.set_float32_matmul_precision("high")``, as the GPU benchmark does.

The interpreter (``TRITON_INTERPRET=1``, the CPU tests) gets both products and casts wrong for
bfloat16 (Triton 3.9: a bf16 x bf16 ``tl.dot`` multiplies the raw 16-bit storage, and a cast to
bf16 truncates instead of rounding to nearest even; it also ignores "tf32" and multiplies float32
exactly). The kernels' constexpr ``DOT`` is then "emulate" (``EMULATE``, true under the
interpreter): ``mm`` multiplies 16-bit operands as float32 (exact: every bf16 / fp16 value is a
float32) and ``to_operand`` rounds to nearest even by hand, so the interpreter computes what the
tensor cores compute up to the order of the float32 sums.
"""
import os
from collections import deque, namedtuple

import torch
import triton
import triton.language as tl

EMULATE = os.environ.get("TRITON_INTERPRET") == "1"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# The most recent launches, newest last (``Launch``): what the parallelism test reads (issue 56, C2)
# and what ``scripts/bench/kernel_report.py`` compiles offline for sm_90 (C3), the signature being
# the one the launch would compile. ``record_only`` turns launching off so that a test can read
# the grids of a long sequence without running the kernels.
LAUNCHES = deque(maxlen=256)
_RECORD_ONLY = [False]


class Launch(namedtuple("Launch", "name grid meta kernel signature")):
    """One launch: kernel name, grid (tuple of ints), keyword arguments (constexprs, num_warps,
    num_stages), the ``triton.jit`` function, and its signature as ``triton.compile`` takes it
    (argument name -> "*bf16" | "*fp32" | "*i1" | ... | "i32" | "fp32" | "constexpr")."""


_POINTER_TYPES = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.bool: "*i1",
                  torch.int8: "*i8", torch.int32: "*i32", torch.int64: "*i64", torch.float64: "*fp64"}


def _signature(kernel, args, meta):
    names = kernel.arg_names
    signature = {}
    for name, value in zip(names, list(args) + [None] * (len(names) - len(args))):
        if name in meta:
            signature[name] = "constexpr"
        elif isinstance(value, torch.Tensor):
            signature[name] = _POINTER_TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int):
            signature[name] = "i32"
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"launch: argument {name} of {kernel.__name__} has an unsupported type {type(value)}")
    return signature


class record_only:
    """Context manager: launches inside are recorded in ``LAUNCHES`` but not run (outputs stay
    uninitialised). For tests of the grids at sizes the interpreter would take minutes on, and for
    the offline compilation of exactly what a call launches."""

    def __enter__(self):
        LAUNCHES.clear()
        _RECORD_ONLY[0] = True
        return LAUNCHES

    def __exit__(self, *exc):
        _RECORD_ONLY[0] = False
        return False


def launch(kernel, grid, *args, **meta):
    """``kernel[grid](*args, **meta)``, recorded in ``LAUNCHES`` (and not run inside ``record_only``).
    ``meta``: the constexprs by name, plus ``num_warps`` / ``num_stages``."""
    grid = tuple(int(g) for g in grid)
    constexprs = {k: v for k, v in meta.items() if k not in ("num_warps", "num_stages")}
    LAUNCHES.append(Launch(kernel.__name__, grid, dict(meta), kernel, _signature(kernel, args, constexprs)))
    if _RECORD_ONLY[0]:
        return None
    return kernel[grid](*args, **meta)


def check_dtype(*tensors):
    """Refuse tensors that are not all of one dtype in ``DTYPES``.

    Raises:
        ValueError: names the dtypes found and those allowed.
    """
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) != 1 or not dtypes <= set(DTYPES):
        raise ValueError(f"fastmax Triton kernels need q, k, v of one dtype among "
                         f"{', '.join(str(d) for d in DTYPES)}; got {sorted(str(d) for d in dtypes)}")
    return dtypes.pop()


def dot_mode():
    """The kernels' constexpr ``DOT``: how their products run. "emulate" under the interpreter
    (16-bit operands multiplied as float32, see the module docstring); on a GPU, for float32
    operands, "ieee" (exact float32 products on the FMA units) when PyTorch's float32 matmul
    precision is "highest" (its default, ``torch.set_float32_matmul_precision``) and "tf32"
    (tensor cores, 10-bit mantissas) when it is "high" or "medium", as ``torch.matmul`` does.
    16-bit operands always run on the tensor cores."""
    if EMULATE:
        return "emulate"
    return "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"


@triton.jit
def mm(a, b, DOT: tl.constexpr):
    """a @ b (M x K, K x N tiles of one dtype) -> M x N float32 (``dot_mode``): "emulate" (the
    interpreter) multiplies both operands as float32, exact for 16-bit values (``to_operand``
    leaves rounded bfloat16 tiles in float32); float32 operands as exact "ieee" products or on
    the tensor cores as "tf32"; 16-bit operands on the tensor cores."""
    if DOT == "emulate":
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif a.dtype == tl.float32:
        return tl.dot(a, b, input_precision=DOT)
    else:
        return tl.dot(a, b, out_dtype=tl.float32)


@triton.jit
def to_operand(x, like, DOT: tl.constexpr):
    """The float32 tile x as an operand of a product with tiles of ``like``'s dtype: unchanged for
    float32, else rounded to nearest even in that dtype ("emulate": bfloat16 rounded by hand on
    the float32 bits and kept as float32, since the interpreter's cast truncates)."""
    if like.dtype == tl.float32:
        return x
    elif DOT == "emulate":
        if like.dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            return bits.to(tl.float32, bitcast=True)
        else:
            return x.to(like.dtype).to(tl.float32)
    else:
        return x.to(like.dtype)
