"""How an error message quotes a user's value: `repr` (or JSON, as a config would spell it), cut to
QUOTE_LIMIT characters and built only as far as that, so a huge value (a long list, a deep one, a
megabyte string) never makes the message huge or slow. Every message that shows a user's value
quotes it with `quote`."""
import json
QUOTE_LIMIT = 200
_CUT = "...(cut)"
_OVER = object()


def quote(value, limit: int = QUOTE_LIMIT, as_json: bool = False) -> str:
    """repr(value) (json.dumps(value) with `as_json`), or its first `limit` characters then '...(cut)'."""
    out, length = [], 0
    for piece in _pieces(value, limit, 0, repr if not as_json else _json):
        if piece is _OVER:
            return "".join(out)[:limit] + _CUT
        out.append(piece)
        length += len(piece)
        if length > limit:
            return "".join(out)[:limit] + _CUT
    return "".join(out)


def _pieces(value, limit, depth, scalar):
    """repr(value) in pieces, lazily: only the pieces the caller reads are ever built."""
    if isinstance(value, (list, tuple, dict, set, frozenset)) and depth > 20:
        yield "..."
        return
    if isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _pieces(key, limit, depth + 1, scalar)
            yield ": "
            yield from _pieces(item, limit, depth + 1, scalar)
        yield "}"
    elif isinstance(value, (list, tuple, set, frozenset)):
        brackets = "()" if isinstance(value, tuple) and scalar is repr else "[]" if scalar is not repr or isinstance(
            value, list) else "{}"
        yield brackets[0]
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _pieces(item, limit, depth + 1, scalar)
        yield ",)" if brackets == "()" and len(value) == 1 else brackets[1]
    elif isinstance(value, str):
        head = value[:limit + 1]
        yield scalar(head)
        if len(value) > len(head):
            yield _OVER  # the quote is cut inside this string
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        yield f"<an integer of {value.bit_length()} bits>"
    else:
        yield scalar(value)


def _json(value) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):  # a date, a set member...: as Python writes it
        return repr(value)
