"""How an error message quotes a user's value: `repr`, cut to QUOTE_LIMIT characters, and built only
as far as that, so a huge value (a long list, a deep one, a megabyte string) never makes the message
huge or slow. Every message that shows a user's value quotes it with `quote`."""
QUOTE_LIMIT = 200
_CUT = "...(cut)"
_OVER = object()


def quote(value, limit: int = QUOTE_LIMIT) -> str:
    """repr(value), or its first `limit` characters followed by '...(cut)'."""
    out, length = [], 0
    for piece in _pieces(value, limit, depth=0):
        if piece is _OVER:
            return "".join(out)[:limit] + _CUT
        out.append(piece)
        length += len(piece)
        if length > limit:
            return "".join(out)[:limit] + _CUT
    return "".join(out)


def _pieces(value, limit, depth):
    """repr(value) in pieces, lazily: only the pieces the caller reads are ever built."""
    if isinstance(value, (list, tuple, dict, set, frozenset)) and depth > 20:
        yield "..."
        return
    if isinstance(value, dict):
        yield "{"
        for i, (key, item) in enumerate(value.items()):
            yield ", " if i else ""
            yield from _pieces(key, limit, depth + 1)
            yield ": "
            yield from _pieces(item, limit, depth + 1)
        yield "}"
    elif isinstance(value, (list, tuple, set, frozenset)):
        brackets = "()" if isinstance(value, tuple) else "[]" if isinstance(value, list) else "{}"
        yield brackets[0]
        for i, item in enumerate(value):
            yield ", " if i else ""
            yield from _pieces(item, limit, depth + 1)
        yield ",)" if isinstance(value, tuple) and len(value) == 1 else brackets[1]
    elif isinstance(value, str):
        head = value[:limit + 1]
        yield repr(head)
        if len(value) > len(head):
            yield _OVER  # the quote is cut inside this string
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * limit:
        yield f"<an integer of {value.bit_length()} bits>"
    else:
        yield repr(value)
