"""JSON for the plugin without importing the `json` package, which pulls in `re`, `enum` and more:
about 5 ms of every exec (`python3 -X importtime`).

CPython's own accelerator module `_json` (built into Debian's python3) parses and encodes; it is
what `json` itself uses for the work. Whatever the fast path does not accept (invalid input, a
value it cannot encode, a Python without `_json`) goes through `json`, so every result and every
error message is json's own; tests/cni_client/test_jsonfast.py compares the two.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"  # JSON's whitespace, what json.loads skips around the value


class _DecoderOptions:
    """The attributes `_json.make_scanner` reads from a json.JSONDecoder: its defaults."""

    def __init__(self) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = {"NaN": float("nan"), "Infinity": float("inf"),
                               "-Infinity": float("-inf")}.__getitem__


def _no_default(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_scan: Callable[[str, int], tuple[Any, int]] | None = None
_encoders: dict[bool, Callable[[Any], str]] = {}
try:
    import _json

    _scan = _json.make_scanner(_DecoderOptions())  # type: ignore[arg-type]
    for _ascii in (True, False):
        _encoders[_ascii] = (_json.encode_basestring_ascii if _ascii
                             else _json.encode_basestring)
except (ImportError, AttributeError, TypeError):  # another Python build: json does it all
    _scan = None
    _encoders = {}


_MISSING = object()


def _scanned(text: str) -> Any:
    """The value of `text` by the fast path, or _MISSING when json must decide."""
    if _scan is None:
        return _MISSING
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except Exception:  # no value, a syntax error, too deep: json says which
        return _MISSING
    return value if not text[end:].strip(_WHITESPACE) else _MISSING


def loads(text: str) -> Any:
    """json.loads(text) for a str."""
    value = _scanned(text)
    if value is not _MISSING:
        return value
    import json

    return json.loads(text)


def loads_bytes(data: bytes) -> Any:
    """json.loads(data) for bytes (json also reads UTF-16/32 and a UTF-8 BOM: left to it)."""
    try:
        value = _scanned(data.decode("utf-8"))
    except UnicodeDecodeError:
        value = _MISSING
    if value is not _MISSING:
        return value
    import json

    return json.loads(data)


def dumps(value: Any, ensure_ascii: bool = True) -> str:
    """json.dumps(value, ensure_ascii=ensure_ascii), with json's default separators."""
    encode_string = _encoders.get(ensure_ascii)
    if encode_string is not None:
        try:
            encoder = _json.make_encoder(
                {}, _no_default, encode_string, None, ": ", ", ", False, False, True)
            return "".join(encoder(value, 0))
        except Exception:  # a value json cannot encode either, or an unexpected signature
            pass
    import json

    return json.dumps(value, ensure_ascii=ensure_ascii)
