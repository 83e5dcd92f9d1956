"""A Chat tool call's streamed arguments as Anthropic `input_json_delta`s that stay one JSON object.

A Chat upstream streams a tool call's `arguments` as text pieces, and what a model writes there
is not always JSON (single quotes, a raw line break in a string, prose after the object). The
Messages API promises that a `tool_use` block's deltas join into its `input` object, and the
official SDKs parse them as they come (`messages.stream()` raises at the first byte that cannot
continue a JSON value). `ArgumentsGuard` passes the pieces through unchanged while they are a
prefix of a JSON object; from the first character that cannot continue one it keeps the rest,
and at the block's end `close()` gives the text that completes the object, the rest kept as a
`"raw_arguments"` string: what a non-streamed answer's unparseable arguments become
(`common.parse_arguments`). Arguments that are only cut short (`max_tokens`) are left as they are,
as the Messages API itself leaves them.

One pass over each piece, strings skipped by a regular expression: arguments are the model's
output, a few kB, and never on a plain text answer's path.
"""

from __future__ import annotations

import logging
import re

import orjson

logger = logging.getLogger(__name__)

_PLAIN = re.compile(r'[^"\\\x00-\x1f]*')  # characters that stand for themselves in a string
_SPACE = " \t\r\n"
_ESCAPES = '"\\/bfnrtu'
_HEX = "0123456789abcdefABCDEF"
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}

# What the next character may be, outside a string, a number or a literal.
_VALUE = 0  # a value (the top level: only an object)
_VALUE_OR_END = 1  # after "["
_KEY_OR_END = 2  # after "{"
_KEY = 3  # after "," in an object
_COLON = 4  # after a key
_COMMA_OR_END = 5  # after a value in an object or an array
_DONE = 6  # after the top-level object: only white space

# Inside a token.
_NONE, _STRING, _NUMBER, _LITERAL = 0, 1, 2, 3
# A number's parts (JSON's grammar): which may end it, and what completes one that may not.
_SIGN, _ZERO, _INT, _DOT, _FRAC, _E, _E_SIGN, _EXP = range(8)
_NUMBER_ENDS = frozenset((_ZERO, _INT, _FRAC, _EXP))


class ArgumentsGuard:
    """One tool call's arguments: `feed` each piece (returns what to send), `close` at the end."""

    __slots__ = (
        "_digits",
        "_escape",
        "_escape_at",
        "_expect",
        "_hex",
        "_is_key",
        "_low_due",
        "_number",
        "_raw",
        "_read",
        "_sent",
        "_stack",
        "_tail",
        "_token",
        "_unsent",
    )

    def __init__(self) -> None:
        self._stack: list[str] = []  # "{" and "[" still open
        self._expect = _VALUE
        self._token = _NONE
        self._is_key = False  # the string being read is an object's key
        self._escape = False  # just after a backslash in a string
        self._digits = 0  # hex digits still due in a string's \u escape
        self._hex = ""  # the \u escape's digits so far
        self._low_due = False  # a high surrogate's \u escape was read: its low one must follow
        # An escape is sent only once it is whole and valid (a surrogate with its pair): the SDKs
        # refuse a lone surrogate, and a piece may end anywhere in one.
        self._escape_at: int | None = None  # where the escape being read starts (in the whole text)
        self._read = 0  # characters read, in all pieces
        self._sent = 0  # characters sent (or held back in `_raw`)
        self._unsent = ""  # the text from `_sent` to `_read`: the escape being read
        self._number = _INT
        self._tail = ""  # a literal's characters still due
        self._raw: list[str] | None = None  # the pieces from the first character that cannot go on

    def feed(self, piece: str) -> str:
        """The part of `piece` to send: all of it while the arguments are still JSON."""
        if self._raw is not None:
            self._raw.append(piece)
            return ""
        if self._expect == _VALUE and not self._stack:
            # Nothing sent yet: white space before the object is not sent (arguments of white
            # space alone would be no JSON at all; the block's `input` is then the empty object).
            piece = piece.lstrip(_SPACE)
        start = self._read
        stop = self._scan(piece)
        self._read += len(piece)
        text = self._unsent + piece  # from `_sent` on
        if stop < len(piece):  # held back from the first character that cannot go on (its escape's start)
            cut = self._escape_at if self._escape_at is not None else start + stop
            self._escape, self._digits, self._hex, self._low_due = False, 0, "", False
            self._raw = [text[cut - self._sent :]]
        else:
            cut = self._escape_at if self._escape_at is not None else self._read
            self._unsent = text[cut - self._sent :]
        out = text[: cut - self._sent]
        self._sent = cut
        return out

    def close(self) -> str:
        """The text that completes the object sent so far with the rest as `raw_arguments`; empty
        when nothing was held back (the arguments were JSON, complete or cut short)."""
        if self._raw is None:
            return ""
        raw = orjson.dumps("".join(self._raw)).decode()
        self._raw = None
        out: list[str] = []
        if self._token == _STRING:  # (an escape is sent whole or not at all)
            out.append('"')
            self._string_ended()
        elif self._token == _NUMBER:
            if self._number not in _NUMBER_ENDS:
                out.append("0")
            self._value_ended()
        elif self._token == _LITERAL:
            out.append(self._tail)
            self._value_ended()
        in_object = bool(self._stack) and self._stack[-1] == "{"
        if self._expect == _DONE:
            logger.warning("chat->messages: dropped what followed a tool call's complete arguments")
            return "".join(out)
        if not self._stack:
            out.append('{"raw_arguments": ' + raw + "}")
            return "".join(out)
        if self._expect == _COLON:
            out.append(": " + raw)
        elif self._expect in (_KEY_OR_END, _KEY):
            out.append('"raw_arguments": ' + raw)
        elif self._expect == _COMMA_OR_END:
            out.append((', "raw_arguments": ' if in_object else ", ") + raw)
        else:  # a value: after a key's colon, or in an array
            out.append(raw)
        out.extend("}" if opened == "{" else "]" for opened in reversed(self._stack))
        return "".join(out)

    # -- reading ------------------------------------------------------------------------------

    def _string_ended(self) -> None:
        self._token = _NONE
        if self._is_key:
            self._expect = _COLON
        else:
            self._value_ended()

    def _value_ended(self) -> None:
        self._token = _NONE
        self._expect = _COMMA_OR_END if self._stack else _DONE

    def _scan(self, text: str) -> int:
        """Reads `text` on from the state so far; the index of the first character that cannot
        continue a JSON object (len(text) when all can)."""
        i, n = 0, len(text)
        while i < n:
            token = self._token
            if token == _STRING:
                c = text[i]
                if self._digits:
                    if c not in _HEX or not self._hex_digit(c):
                        return i
                elif self._escape:
                    if c not in _ESCAPES or (self._low_due and c != "u"):
                        return i
                    self._escape = False
                    if c == "u":
                        self._digits = 4
                    else:
                        self._escape_at = None
                elif self._low_due:
                    if c != "\\":
                        return i  # a high surrogate alone
                    self._escape = True
                else:
                    i = _PLAIN.match(text, i).end()  # type: ignore[union-attr]  # (always matches)
                    if i == n:
                        return n
                    c = text[i]
                    if c == '"':
                        self._string_ended()
                    elif c == "\\":
                        self._escape = True
                        self._escape_at = self._read + i
                    else:
                        return i  # a control character: JSON strings escape them
                i += 1
                continue
            c = text[i]
            if token == _NUMBER:
                state = self._number_step(c)
                if state is None:
                    if self._number not in _NUMBER_ENDS:
                        return i
                    self._value_ended()  # the number ended here: read `c` as what follows it
                    continue
                self._number = state
                i += 1
                continue
            if token == _LITERAL:
                if c != self._tail[0]:
                    return i
                self._tail = self._tail[1:]
                if not self._tail:
                    self._value_ended()
                i += 1
                continue
            if c in _SPACE:
                i += 1
                continue
            if not self._structural(c):
                return i
            i += 1
        return n

    def _hex_digit(self, c: str) -> bool:
        """One digit of a \\u escape; at the fourth, whether the escape may stand (surrogates in
        pairs, high then low)."""
        self._hex += c
        self._digits -= 1
        if self._digits:
            return True
        code, self._hex = int(self._hex, 16), ""
        low = 0xDC00 <= code <= 0xDFFF
        if self._low_due != low:
            return False  # a low surrogate alone, or a high one followed by something else
        self._low_due = 0xD800 <= code <= 0xDBFF
        if not self._low_due:
            self._escape_at = None  # whole: it can be sent
        return True

    def _structural(self, c: str) -> bool:
        """Outside any token: whether `c` can come next (and the state moved past it)."""
        expect = self._expect
        stack = self._stack
        if expect in (_VALUE, _VALUE_OR_END):
            if not stack:  # the top level: a tool's input is an object
                if c != "{":
                    return False
            elif c == "]" and expect == _VALUE_OR_END:
                stack.pop()
                self._value_ended()
                return True
            return self._value_start(c)
        if expect in (_KEY_OR_END, _KEY):
            if c == '"':
                self._token, self._is_key = _STRING, True
                return True
            if c == "}" and expect == _KEY_OR_END:
                stack.pop()
                self._value_ended()
                return True
            return False
        if expect == _COLON:
            if c != ":":
                return False
            self._expect = _VALUE
            return True
        if expect == _COMMA_OR_END:
            top = stack[-1]
            if c == ",":
                self._expect = _KEY if top == "{" else _VALUE
                return True
            if (c == "}" and top == "{") or (c == "]" and top == "["):
                stack.pop()
                self._value_ended()
                return True
        return False  # _DONE: nothing but white space after the object

    def _value_start(self, c: str) -> bool:
        if c == "{":
            self._stack.append("{")
            self._expect = _KEY_OR_END
        elif c == "[":
            self._stack.append("[")
            self._expect = _VALUE_OR_END
        elif c == '"':
            self._token, self._is_key = _STRING, False
        elif c == "-" or "0" <= c <= "9":
            self._token = _NUMBER
            self._number = _SIGN if c == "-" else _ZERO if c == "0" else _INT
        elif c in _LITERALS:
            self._token, self._tail = _LITERAL, _LITERALS[c]
        else:
            return False
        return True

    def _number_step(self, c: str) -> int | None:
        """The number's part after `c`, None when `c` cannot continue it."""
        state = self._number
        digit = "0" <= c <= "9"
        if state == _SIGN:
            return _ZERO if c == "0" else _INT if digit else None
        if state in (_ZERO, _INT):
            if digit:
                return _INT if state == _INT else None  # no leading zeros
            return _DOT if c == "." else _E if c in "eE" else None
        if state in (_DOT, _FRAC):
            if digit:
                return _FRAC
            return _E if state == _FRAC and c in "eE" else None
        if state == _E:
            return _EXP if digit else _E_SIGN if c in "+-" else None
        return _EXP if digit else None  # _E_SIGN, _EXP
