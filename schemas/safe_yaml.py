"""YAML written by someone else, read with limits: no anchors or aliases, a node budget, a depth cap and a
size cap, so a hostile file (a "billion laughs" of nested aliases, a 100 MB list, a 10,000-deep nesting) is
refused in milliseconds with a reason instead of growing the process by gigabytes. A key given twice in one
mapping is refused too (PyYAML keeps the last one silently: a second ``url:`` would quietly win).

Why refuse aliases outright rather than count the expanded nodes: PyYAML resolves an alias to the SAME
object, so loading is cheap and the blow-up happens later, wherever the value is walked (``repr`` of an
error's input, ``model_dump``, a fingerprint's JSON). A recipe has no use for them; refusing them at the
first ``*name`` is the one check that cannot be outgrown. :func:`bounded_repr` is the other half: an error
message quotes user input through a walk that stops after ``limit`` characters, never ``repr(value)[:n]``.
"""

from __future__ import annotations

from typing import Any, Final

import yaml
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent
from yaml.nodes import MappingNode

MAX_BYTES: Final = 1024 * 1024  # a recipe is a few KB; the shipped catalog's largest is under 2 KB
MAX_NODES: Final = 20_000  # scalars + collections
MAX_DEPTH: Final = 32


class YamlLimitError(yaml.YAMLError):
    """The document breaks one of the limits (alias, node budget, depth, size, a duplicate key): the
    message says which."""


class _LimitedLoader(yaml.SafeLoader):
    """SafeLoader that counts nodes and depth while composing and refuses anchors and aliases."""

    max_nodes = MAX_NODES
    max_depth = MAX_DEPTH
    unique_keys = True

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        where = f"line {event.start_mark.line + 1}" if event.start_mark else "?"
        if isinstance(event, AliasEvent):
            raise YamlLimitError(
                f"{where}: YAML anchors and aliases (*{_short(event.anchor)}) are not allowed here: "
                "write the value out"
            )
        if isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None:
            raise YamlLimitError(
                f"{where}: YAML anchors and aliases (&{_short(event.anchor)}) are not allowed here: "
                "write the value out"
            )
        self._nodes += 1
        if self._nodes > self.max_nodes:
            raise YamlLimitError(f"{where}: more than {self.max_nodes} YAML nodes")
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise YamlLimitError(f"{where}: nested deeper than {self.max_depth} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping whose keys are all different; a key given twice is refused, naming it and both lines."""
        if self.unique_keys and isinstance(node, MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: SafeLoader's own error says so
                if first is not None:
                    raise YamlLimitError(
                        f"line {line}: duplicate key {_short(str(key))!r} (first at line {first}): keep one"
                    )
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _short(text: str | None, limit: int = 40) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit] + "..."


def load_limited(text: str | bytes, *, max_bytes: int = MAX_BYTES, unique_keys: bool = True) -> Any:
    """One YAML document decoded with the limits above; raises :class:`YamlLimitError` (a ``yaml.YAMLError``)
    naming the limit, or ``yaml.YAMLError`` for invalid YAML. ``unique_keys=False`` lets a repeated key
    keep its last value (PyYAML's rule) for a document vlmforge only reads a field or two of."""
    size = len(text.encode("utf-8") if isinstance(text, str) else text)
    if size > max_bytes:
        raise YamlLimitError(f"{size} bytes is over the {max_bytes}-byte limit for this file")
    loader = _LimitedLoader(text)
    loader.unique_keys = unique_keys
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def bounded_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut at ``limit`` characters, built by a walk that stops there: quoting an error's input
    costs O(limit) whatever the value holds (shared sub-lists, a huge string, a deep nesting)."""
    out: list[str] = []
    budget = [limit + 1]

    def emit(s: str) -> bool:
        if budget[0] <= 0:
            return False
        out.append(s[: budget[0]])
        budget[0] -= len(s)
        return budget[0] > 0

    def walk(v: Any, depth: int) -> bool:
        if depth > MAX_DEPTH:
            return emit("...")
        if isinstance(v, dict):
            if not emit("{"):
                return False
            for i, (k, item) in enumerate(v.items()):
                if (i and not emit(", ")) or not walk(k, depth + 1) or not emit(": "):
                    return False
                if not walk(item, depth + 1):
                    return False
            return emit("}")
        if isinstance(v, list | tuple):
            if not emit("["):
                return False
            for i, item in enumerate(v):
                if (i and not emit(", ")) or not walk(item, depth + 1):
                    return False
            return emit("]")
        if isinstance(v, str | bytes) and len(v) > limit:
            v = v[: limit + 1]
        return emit(repr(v))

    walk(value, 0)
    text = "".join(out)
    return text if len(text) <= limit else text[: limit - 3] + "..."
