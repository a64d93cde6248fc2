"""The decode cache of past keys and values (``Attention.decode = "kv_cache"``): what a method that
attends to every earlier token keeps between the steps of generation.

``KVCache`` holds the keys (B, H, L, D), the values (B, H, L, Dv) and which of them are real
tokens (B, L) in buffers allocated ahead: ``append`` writes one token into the spare room and,
when the room is used up, moves the cache into buffers ``GROWTH`` times as long, so that T
appends copy O(T) elements in all (not O(T^2) as a concatenation per token would). Keys and values
stay in the dtype and on the device they come in.
"""
import torch

GROWTH = 2  # capacity factor when the cache is full
MIN_CAPACITY = 16  # tokens of room a new cache has at least


class KVCache:
    """Keys, values and real-token flags of the L tokens seen so far, in preallocated buffers.

    Args:
        k (torch.Tensor): (B, H, T, D) keys of the prompt; v (B, H, T, Dv) values.
        attention_mask (torch.Tensor | None): (B, T) bool, True = real token; None = all real.
        capacity (int | None): tokens of room to allocate (at least T and ``MIN_CAPACITY``);
            None: ``GROWTH`` x T.

    Attributes:
        length (int): L, the tokens held. ``keys()``, ``values()`` (views of the first L
        positions) and ``real()`` ((B, L) bool, or None while every token is real).
    """

    def __init__(self, k, v, attention_mask=None, capacity=None):
        B, H, T, D = k.shape
        room = max(T, MIN_CAPACITY, GROWTH * T if capacity is None else capacity)
        self.k = k.new_empty(B, H, room, D)
        self.v = v.new_empty(B, H, room, v.shape[-1])
        self.k[:, :, :T] = k
        self.v[:, :, :T] = v
        self.mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            self.mask = torch.ones(B, room, dtype=torch.bool, device=k.device)
            self.mask[:, :T] = attention_mask
        self.length = T

    @property
    def capacity(self):
        """Tokens the buffers hold before the next growth."""
        return self.k.shape[2]

    def append(self, k_t, v_t):
        """Add one real token: k_t (B, H, 1, D), v_t (B, H, 1, Dv). Grows the buffers by ``GROWTH``
        when they are full."""
        if self.length == self.capacity:
            self._grow(GROWTH * self.capacity)
        self.k[:, :, self.length] = k_t[:, :, 0]
        self.v[:, :, self.length] = v_t[:, :, 0]
        self.length += 1

    def _grow(self, room):
        L = self.length
        B, H, _, D = self.k.shape
        k, v = self.k.new_empty(B, H, room, D), self.v.new_empty(B, H, room, self.v.shape[3])
        k[:, :, :L], v[:, :, :L] = self.k[:, :, :L], self.v[:, :, :L]
        self.k, self.v = k, v
        if self.mask is not None:
            mask = torch.ones(self.mask.shape[0], room, dtype=torch.bool, device=self.mask.device)
            mask[:, :L] = self.mask[:, :L]
            self.mask = mask

    def keys(self, start=0):
        """(B, H, L - start, D): the keys of tokens start..L-1 (a view)."""
        return self.k[:, :, start:self.length]

    def values(self, start=0):
        """(B, H, L - start, Dv): the values of tokens start..L-1 (a view)."""
        return self.v[:, :, start:self.length]

    def real(self, start=0):
        """(B, L - start) bool, True = real token, for tokens start..L-1; None when all are real."""
        return None if self.mask is None else self.mask[:, start:self.length]
