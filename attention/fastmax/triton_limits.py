"""What Fastmax's Triton kernels accept (``kernels/``), in a module that does not import triton.

One copy of the limits and of their refusal messages: the module (``attention/fastmax/__init__.py``)
refuses a configuration before any kernel is imported (triton is an optional dependency), and the
kernels' entry points (``kernels/__init__.py``) check the same limits on every call.
"""

KERNELS = ("auto", "chunk", "parallel")  # kernels.kernel_for: the backend's own choice, or one forced
HEAD_DIMS = (16, 32, 64, 128)  # q/k and v head dims: power-of-two tiles, one register tile at 128
CHUNK_SIZES = (16, 32, 64, 128)  # positions per chunk of the chunk kernels (their register budget ends at 128)


def check(head_dim, value_dim, chunk_size, dropout_on_terms):
    """Refuse what the kernels cannot run, one line each.

    Args:
        head_dim (int): D of q and k; value_dim (int): Dv of v.
        chunk_size (int): positions per chunk.
        dropout_on_terms (bool): dropout on the factorized terms (separate numerator keys).

    Raises:
        ValueError: a head dim outside HEAD_DIMS, a chunk size outside CHUNK_SIZES, or dropout on
            the factorized terms (the kernels have only the authors' output noise).
    """
    if head_dim not in HEAD_DIMS or value_dim not in HEAD_DIMS:
        raise ValueError(f"the fastmax Triton kernels support head dims {', '.join(map(str, HEAD_DIMS))}; got q/k "
                         f"head dim {head_dim} and v head dim {value_dim} (use implementation='pytorch')")
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"the fastmax Triton kernels need chunk_size in {', '.join(map(str, CHUNK_SIZES))} "
                         f"(or None for the module's default); got {chunk_size}")
    if dropout_on_terms:
        raise ValueError("the fastmax Triton kernels have no dropout on the factorized terms; use "
                         "dropout_variant='output_noise' or implementation='pytorch'")
