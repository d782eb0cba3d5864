"""Byte lists as pickles that Megatron-Bridge's restricted unpickler takes, with their size known up front.

Bridge's ``jpgs`` / ``videos`` handlers load a part with a restricted unpickler that allows only plain
builtins (``list``, ``bytes``, ...). The pickles written here use no globals at all: protocol 4 opcodes
``PROTO 4``, ``EMPTY_LIST``, ``MARK``, ``BINBYTES`` (``BINBYTES8`` past 4 GiB), ``APPENDS``, ``STOP``, nothing
else (no frames, no memo). So the stream is a pure function of the byte strings, and its length a pure
function of their lengths: the shard writer places and journals a part before reading its media.

:func:`pickled_list_size` / :func:`pickled_list` write a ``list[bytes]`` (``jpgs``), and
:func:`pickled_nested_size` / :func:`pickled_nested` a ``list[list[bytes]]`` (``videos``).
:func:`load_plain` reads such a pickle back, refusing any global (stricter than Bridge's allow-list).
"""

from __future__ import annotations

import io
import pickle
import struct
from collections.abc import Sequence
from typing import Any

__all__ = [
    "load_plain",
    "pickled_list",
    "pickled_list_size",
    "pickled_nested",
    "pickled_nested_size",
]

_HEAD = b"\x80\x04"  # PROTO 4
_LIST = b"]("  # EMPTY_LIST, MARK
_END_LIST = b"e"  # APPENDS
_STOP = b"."
_SMALL = 0xFFFFFFFF  # BINBYTES carries a 4-byte length


def _item_size(size: int) -> int:
    return (5 if size <= _SMALL else 9) + size


def _item(data: bytes) -> bytes:
    if len(data) <= _SMALL:
        return b"B" + struct.pack("<I", len(data)) + data
    return b"\x8e" + struct.pack("<Q", len(data)) + data


def _list_body_size(sizes: Sequence[int]) -> int:
    return len(_LIST) + sum(_item_size(s) for s in sizes) + len(_END_LIST)


def _list_body(items: Sequence[bytes]) -> bytes:
    return _LIST + b"".join(_item(bytes(d)) for d in items) + _END_LIST


def pickled_list_size(sizes: Sequence[int]) -> int:
    """Length of :func:`pickled_list` of byte strings of these ``sizes``."""
    return len(_HEAD) + _list_body_size(sizes) + len(_STOP)


def pickled_list(items: Sequence[bytes]) -> bytes:
    """``items`` as a protocol-4 pickle of a ``list[bytes]`` (no globals)."""
    return _HEAD + _list_body(items) + _STOP


def pickled_nested_size(sizes: Sequence[Sequence[int]]) -> int:
    """Length of :func:`pickled_nested` of lists of byte strings of these ``sizes``."""
    return len(_HEAD) + len(_LIST) + sum(_list_body_size(s) for s in sizes) + len(_END_LIST) + len(_STOP)


def pickled_nested(lists: Sequence[Sequence[bytes]]) -> bytes:
    """``lists`` as a protocol-4 pickle of a ``list[list[bytes]]`` (no globals)."""
    return _HEAD + _LIST + b"".join(_list_body(items) for items in lists) + _END_LIST + _STOP


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} refused: only plain lists and bytes are read")


def load_plain(data: bytes) -> Any:
    """Unpickle ``data`` refusing every global (any class, function or reducer is an UnpicklingError)."""
    return _NoGlobals(io.BytesIO(data)).load()
