"""Hypothesis strategies for the documents a JSON Schema allows (``from_schema``), for the few
keywords the shipped schemas (``src/board_outbox/schemas/``) use.

hypothesis-jsonschema would be the library for this, but its last release (0.23.1) fails on
the Hypothesis this suite runs (``'many' object has no attribute 'more'``). This is a small
stand-in: each keyword proposes candidates, and every value is then filtered through the
schema's own validator (``jsonschema``), so whatever it yields is valid by construction; it
only has to propose valid values often enough. A keyword it does not know raises: a schema that
starts using one must teach it here, never be sampled as if it were not there.

Values stay within what BSON holds (integers within int64, field names without NUL or a leading
``$``): a document the store could not hold is no document.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jsonschema
from hypothesis import strategies as st

__all__ = ["from_schema"]

INT64 = (-(2**63), 2**63 - 1)
# keywords that say nothing about the value, or that the final validation filter covers whole
_ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description", "default", "examples"}
_FILTERED = {"not", "if", "then", "exclusiveMinimum", "propertyNames"}
_KNOWN = _ANNOTATIONS | _FILTERED | {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "minimum", "maximum", "const", "enum", "oneOf",
    "anyOf", "allOf", "$ref"}
ANY_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-(2**31), 2**31 - 1),
                      st.text(max_size=20))
FIELD_NAME = st.text(min_size=1, max_size=12).filter(
    lambda k: "\x00" not in k and not k.startswith("$"))


def from_schema(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """Values ``schema`` (a whole schema, its ``$defs`` reachable by ``$ref``) accepts."""
    root = jsonschema.Draft202012Validator(schema)
    root.check_schema(schema)
    return _Gen(root).of(schema)


class _Gen:
    def __init__(self, root: jsonschema.Draft202012Validator) -> None:
        self.root = root
        self.schema = root.schema

    def valid(self, sub: Mapping[str, Any]) -> Callable[[Any], bool]:
        check = self.root.evolve(schema=sub)  # refs resolve against the root document
        return lambda value: bool(check.is_valid(value))

    def resolve(self, ref: str) -> Mapping[str, Any]:
        assert ref.startswith("#/$defs/"), f"only local $defs references are generated ({ref})"
        return self.schema["$defs"][ref.removeprefix("#/$defs/")]  # type: ignore[no-any-return]

    def of(self, sub: Mapping[str, Any] | bool) -> st.SearchStrategy[Any]:
        if sub is True or sub is False:
            return ANY_VALUE if sub else st.nothing()
        unknown = set(sub) - _KNOWN
        if unknown:
            raise NotImplementedError(f"no strategy for the keywords {sorted(unknown)}")
        return self.candidates(sub).filter(self.valid(sub))

    def candidates(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        if "$ref" in sub:
            return self.of(self.resolve(sub["$ref"]))
        if "const" in sub:
            return st.just(sub["const"])
        if "enum" in sub:
            return st.sampled_from(sub["enum"])
        for key in ("oneOf", "anyOf"):
            if key in sub:
                return st.one_of([self.of({**_plain(sub, key), **branch}) for branch in sub[key]])
        if "allOf" in sub:
            first, *_ = sub["allOf"]
            return self.of({**_plain(sub, "allOf"), **first})
        kinds = sub.get("type")
        if kinds is None:
            return ANY_VALUE
        if isinstance(kinds, list):
            return st.one_of([self.candidates({**sub, "type": k}) for k in kinds])
        return getattr(self, f"_{kinds}")(sub)  # type: ignore[no-any-return]

    def _null(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        return st.none()

    def _boolean(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        return st.booleans()

    def _integer(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        lo, hi = max(sub.get("minimum", INT64[0]), INT64[0]), min(sub.get("maximum", INT64[1]), INT64[1])
        edges = [v for v in (lo, hi, 0, 1, -1) if lo <= v <= hi]
        return st.one_of(st.integers(lo, hi), st.sampled_from(edges))

    def _number(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        lo = sub.get("minimum", sub.get("exclusiveMinimum"))
        hi = sub.get("maximum")
        floats = st.floats(lo, hi, allow_nan=False, allow_infinity=False)
        ints = st.integers(int(lo) if lo is not None else -(2**31),
                           int(hi) if hi is not None else 2**31)
        return st.one_of(floats, ints)

    def _string(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        lo, hi = sub.get("minLength", 0), min(sub.get("maxLength", 40), 40)
        if "pattern" in sub:  # a search, as the validator's: it may carry more around the match
            return st.from_regex(sub["pattern"])
        return st.text(min_size=lo, max_size=max(lo, hi))

    def _array(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        lo = sub.get("minItems", 0)
        hi = min(sub.get("maxItems", 4), 4)
        return st.lists(self.of(sub.get("items", True)), min_size=lo, max_size=max(lo, hi))

    def _object(self, sub: Mapping[str, Any]) -> st.SearchStrategy[Any]:
        props: Mapping[str, Any] = sub.get("properties", {})
        required = set(sub.get("required", ()))
        fixed = st.fixed_dictionaries(
            {k: self.of(props[k]) if k in props else ANY_VALUE for k in sorted(required)},
            optional={k: self.of(v) for k, v in props.items() if k not in required})
        extra = sub.get("additionalProperties", True)
        if extra is False:
            return fixed
        names = FIELD_NAME.filter(lambda k: k not in props)
        more = st.dictionaries(names, self.of(extra if isinstance(extra, dict) and
                                              set(extra) - _ANNOTATIONS else True), max_size=2)
        return st.builds(lambda a, b: {**b, **a}, fixed, more)


def _plain(sub: Mapping[str, Any], drop: str) -> dict[str, Any]:
    """``sub`` without ``drop`` and its annotations: what a branch adds to."""
    return {k: v for k, v in sub.items() if k != drop and k not in _ANNOTATIONS}
