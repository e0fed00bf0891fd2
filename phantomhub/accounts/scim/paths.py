"""PATCH paths (RFC 7644 section 3.5.2): `attr`, `attr.sub`, `urn:...:attr`, and value filters
such as `members[value eq "2819c223-..."]` or `emails[type eq "work"].value`.

django-scim2's `AttrPath` recognises the attributes of a path but leaves the filter's values to
the caller; a filter here is parsed by the same scim2-filter-parser and evaluated against the
entries of a multi-valued attribute (members, emails), which is all PhantomHub's attributes need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from scim2_filter_parser import ast
from scim2_filter_parser.lexer import SCIMLexer
from scim2_filter_parser.parser import SCIMParser, SCIMParserError

from phantomhub.accounts.scim.errors import bad

_PATH = re.compile(
    r"^(?:(?P<urn>urn:[^\[\]]+):)?(?P<attr>[A-Za-z][\w$-]*)(?:\[(?P<filter>.+)\])?(?:\.(?P<sub>[A-Za-z][\w$-]*))?$",
    re.DOTALL,
)
MAX_FILTER = 1000  # characters of one filter: a real one is an attribute, an operator and an id


@dataclass(frozen=True)
class Path:
    """A parsed PATCH path: attribute and sub-attribute in lower case, the schema URN if given,
    and the value filter's tree if it has one."""

    text: str
    urn: str | None
    attr: str
    sub: str | None
    filter: Any = None


def filter_parse(text: str, where: str) -> Any:
    """scim2-filter-parser's tree of a filter (400 invalidFilter naming `where` when it is none)."""
    if len(text) > MAX_FILTER:
        raise bad(f"{where}: a filter of at most {MAX_FILTER} characters", "invalidFilter")
    try:
        return SCIMParser().parse(SCIMLexer().tokenize(text))
    except (SCIMParserError, ValueError) as exc:
        raise bad(f"{where}: not a SCIM filter ({exc})", "invalidFilter") from None


def path_parse(text: Any) -> Path:
    if not isinstance(text, str) or not text.strip():
        raise bad("path: must be a non-empty string", "invalidPath")
    match = _PATH.match(text.strip())
    if match is None:
        raise bad(f"path: {text!r} is not an attribute path", "invalidPath")
    tree = filter_parse(match["filter"], "path") if match["filter"] else None
    sub = match["sub"].lower() if match["sub"] else None
    return Path(text, match["urn"], match["attr"].lower(), sub, tree)


def _entry_value(entry: dict[str, Any], name: str) -> Any:
    for key, value in entry.items():
        if key.lower() == name.lower():
            return value
    return None


def matches(node: Any, entry: dict[str, Any]) -> bool:
    """Whether one entry of a multi-valued attribute (`{"value": ..., "type": ...}`) passes a
    value filter: eq, ne, co, sw, ew, pr, joined by and/or/not; string comparisons ignore case."""
    if isinstance(node, ast.Filter):
        result = matches(node.expr, entry)
        return not result if node.negated else result
    if isinstance(node, ast.LogExpr):
        first, second = matches(node.expr1, entry), matches(node.expr2, entry)
        return (first and second) if node.op.lower() == "and" else (first or second)
    if isinstance(node, ast.AttrExpr) and isinstance(node.attr_path.attr_name, str):
        actual = _entry_value(entry, node.attr_path.attr_name)
        op = node.value.lower()
        if op == "pr":
            return actual not in (None, "", [])
        expected = str(node.comp_value.value).lower()
        actual_text = str(actual).lower() if actual is not None else None
        if op in ("eq", "ne"):
            if isinstance(actual, bool):
                actual_text = "true" if actual else "false"
            return (actual_text == expected) == (op == "eq")
        if actual_text is None:
            return False
        if op == "co":
            return expected in actual_text
        if op == "sw":
            return actual_text.startswith(expected)
        if op == "ew":
            return actual_text.endswith(expected)
        raise bad(f"path: the operator {op!r} is not supported in a value filter", "invalidFilter")
    raise bad("path: a value filter compares the entries' own attributes (value, type, primary, display)", "invalidFilter")
