"""How Argo Workflows v4.1.2 judges a resource step's ``successCondition`` and
``failureCondition``, offline, so tests can hold our condition strings against it.

Read (not copied) from the upstream sources:
- argo-workflows v4.1.2 workflow/executor/resource.go: ``WaitResource`` parses each
  condition with ``labels.Parse`` (k8s.io/apimachinery v0.35.4), polls the object with a
  GET, and ``matchConditions`` looks every requirement's key up as a gjson path in the
  object's JSON (``gjsonLabels``): any failure requirement that matches fails the step
  (checked first); the step succeeds once every success requirement matches.
- apimachinery v0.35.4 pkg/labels/selector.go: the lexer ends an identifier at whitespace
  or one of ``= ! ( ) , > <``; every key must be a label key (``validateLabelKey``:
  a qualified name) and every value a label value (``validateLabelValue``); ``>``/``<``
  take an integer; ``Requirement.Matches``.

The gjson side here handles what a valid label key can express: dot-separated object keys
and array indexes (``status.conditions.1.type``); a label key cannot hold gjson's query
characters (``#``, ``(``, ``=``, ``@``...), which is the point.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_SPECIAL = set("=!(),><")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OPERATORS = ("==", "=", "!=", ">", "<", "in", "notin")


class SelectorError(ValueError):
    """``labels.Parse`` would refuse the condition (Argo: "failed to parse")."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # one of _OPERATORS, "exists" or "!"
    values: tuple[str, ...] = ()


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in _SPECIAL:
            two = text[i : i + 2]
            if two in ("==", "!="):
                out.append(two)
                i += 2
            else:
                out.append(ch)
                i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in _SPECIAL:
                j += 1
            out.append(text[i:j])
            i = j
    return out


def _check_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise SelectorError(f"key {key!r}: prefix is not a DNS-1123 subdomain")
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise SelectorError(f"key {key!r} is not a valid label key")


def _check_value(key: str, value: str) -> None:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise SelectorError(f"{key}: value {value!r} is not a valid label value")


def parse(selector: str) -> list[Requirement]:
    """The requirements of a condition, or SelectorError where labels.Parse fails."""
    toks = _tokens(selector)
    reqs: list[Requirement] = []
    pos = 0

    def take() -> str:
        nonlocal pos
        if pos >= len(toks):
            raise SelectorError(f"{selector!r}: unexpected end")
        pos += 1
        return toks[pos - 1]

    while pos < len(toks):
        key = take()
        if key == "!":
            key = take()
            _check_key(key)
            reqs.append(Requirement(key, "!"))
        else:
            if key in _SPECIAL or key in ("==", "!="):
                raise SelectorError(f"{selector!r}: found {key!r}, expected an identifier")
            _check_key(key)
            if pos >= len(toks) or toks[pos] == ",":
                reqs.append(Requirement(key, "exists"))
            else:
                reqs.append(_operation(key, take, selector))
        if pos < len(toks) and take() != ",":
            raise SelectorError(f"{selector!r}: expected ',' between requirements")
    return reqs


def _operation(key: str, take: Any, selector: str) -> Requirement:
    op = take()
    if op not in _OPERATORS:
        raise SelectorError(f"{selector!r}: {op!r} is not an operator")
    if op in ("in", "notin"):
        if take() != "(":
            raise SelectorError(f"{selector!r}: expected '(' after {op}")
        values: list[str] = []
        while (tok := take()) != ")":
            if tok != ",":
                values.append(tok)
    else:
        values = [take()]
    for v in values:
        if v in _SPECIAL:
            raise SelectorError(f"{selector!r}: found {v!r}, expected a value")
        _check_value(key, v)
        if op in (">", "<") and not re.fullmatch(r"-?[0-9]+", v):
            raise SelectorError(f"{selector!r}: {op} needs an integer, got {v!r}")
    return Requirement(key, op, tuple(values))


def gjson_get(obj: Any, path: str) -> tuple[str, bool]:
    """gjson's ``GetBytes(json, path).String()`` and ``.Exists()`` for a plain path."""
    node = obj
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return "", False
    if isinstance(node, str):
        return node, True
    if isinstance(node, bool):
        return ("true" if node else "false"), True
    if node is None:
        return "", True
    if isinstance(node, int | float):
        return json.dumps(node), True
    return json.dumps(node, separators=(",", ":")), True


def matches(req: Requirement, obj: Any) -> bool:
    value, exists = gjson_get(obj, req.key)
    if req.op == "exists":
        return exists
    if req.op == "!":
        return not exists
    if req.op in ("=", "==", "in"):
        return exists and value in req.values
    if req.op in ("!=", "notin"):
        return not exists or value not in req.values
    if not exists or not re.fullmatch(r"-?[0-9]+", value):
        return False
    left, right = int(value), int(req.values[0])
    return left > right if req.op == ">" else left < right


def judge(obj: Any, success: str, failure: str) -> str:
    """What Argo's executor concludes from one GET of ``obj``: "failed", "succeeded" or
    "waiting" (matchConditions: failure first, then all success requirements)."""
    if any(matches(r, obj) for r in parse(failure)):
        return "failed"
    if all(matches(r, obj) for r in parse(success)):
        return "succeeded"
    return "waiting"
