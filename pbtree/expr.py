"""The subscription expression language: parse text or tuples, rewrite sugar, format back.

Semantics are DESIGN.md §1. ``normalize`` gives the canonical list of core predicates the
index stores; ``format_predicates`` prints any predicate list so that it parses back equal.
"""

from __future__ import annotations

import datetime
import math
import numbers
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal
from typing import Any

import numpy as np

from pbtree import config
from pbtree.errors import ExpressionError, shown
from pbtree.values import DECIMAL_BEYOND, datetime64_seconds, epoch_seconds
from storage.keys import (
    BOOL,
    MAX_CONST_BYTES,
    MAX_EXACT_INT,
    NUMBER,
    STRING,
    ValueRejected,
    inexact,
)
from storage.keys import const_payload as _const_payload

__all__ = [
    "KEYWORDS",
    "OPS_CORE",
    "OPS_INTERVAL",
    "OPS_STORED",
    "OP_SPELLINGS",
    "OPS_SOURCE",
    "Disjunction",
    "Formula",
    "Predicate",
    "canonical",
    "conjunctions",
    "disjunction",
    "dnf",
    "format_predicates",
    "format_value",
    "normalize",
    "parse",
    "parse_formula",
    "parse_tuple",
    "prefix_successor",
    "rewrite",
    "source_op",
    "value_sort_key",
]

Predicate = tuple[str, str, Any]
#: a parsed expression (``parse_formula``): a Predicate, ("and" | "or", [Formula]) or
#: ("not", Formula)
Formula = Any

#: Core operators, in canonical order: what ``rewrite`` produces and the index stores.
OPS_CORE: tuple[str, ...] = ("=", "in", "<", "<=", ">", ">=", "!=")
#: Every operator ``parse`` produces (core plus sugar).
OPS_SOURCE: tuple[str, ...] = OPS_CORE + ("not in", "between", "prefix")
#: The interval operators ``rewrite`` keeps as one predicate each (so that against an
#: array each holds for one element): ``between`` with value ``(lo, hi)``, and ``prefix``
#: of a string that has a successor (one without is ``>=``).
OPS_INTERVAL: tuple[str, ...] = ("between", "prefix")
#: Every operator of a normalised subscription, in canonical order.
OPS_STORED: tuple[str, ...] = OPS_CORE + OPS_INTERVAL

_OP_RANK = {op: i for i, op in enumerate(OPS_STORED)}
_EQ, _IN, _LT, _LE, _GT, _GE, _NE, _BT, _PX = range(len(OPS_STORED))
_SCALAR_CORE = frozenset(("=", "<", "<=", ">", ">=", "!="))
#: Every spelling of a scalar operator -> (canonical op, rank).
_SCALAR_SPELLINGS = {op: (op, _OP_RANK[op]) for op in _SCALAR_CORE} | {
    "==": ("=", _EQ),
    "<>": ("!=", _NE),
}
#: every exact spelling of an operator -> its canonical form in OPS_SOURCE
OP_SPELLINGS = {op: op for op in OPS_SOURCE} | {"==": "=", "<>": "!="}
#: the words a bare attribute name cannot be (in any letter case): back-quote them
KEYWORDS = frozenset(("and", "or", "not", "in", "between", "prefix", "true", "false", "inf"))


# ---------------------------------------------------------------------------------------
# values


def _canon(value: object) -> object:
    """Canonical form of a constant, or ValueRejected (NaN, huge int, unsupported type)."""
    t = type(value)
    if t is str or t is bool:
        return value
    if t is int:
        if -MAX_EXACT_INT <= value <= MAX_EXACT_INT:  # type: ignore[operator]
            return value
        raise inexact(value)
    if t is float:
        if value != value:
            raise ValueRejected("NaN is not comparable and cannot be matched")
        if value.is_integer() and -MAX_EXACT_INT <= value <= MAX_EXACT_INT:  # type: ignore[attr-defined]
            return int(value)  # type: ignore[call-overload]
        return value
    # subclasses and foreign numbers (numpy scalars, Fractions, Decimals): integers exact,
    # the others the double nearest to them, as a literal in an expression is
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return _canon(int(value))
    if isinstance(value, Decimal):  # no numbers.Real, though Parquet's decimals are these
        if value.is_finite() and value.adjusted() < DECIMAL_BEYOND and \
                value == value.to_integral_value():
            return _canon(int(value))
        near = math.nan if value.is_nan() else float(value)  # a signalling NaN too
        if math.isinf(near) and value.is_finite():
            raise ValueRejected(f"number {shown(value)} is out of range")
        return _canon(near)
    if isinstance(value, numbers.Real):
        try:
            near = float(value)
        except OverflowError:  # a Fraction beyond the doubles
            near = math.inf if value > 0 else -math.inf
        if math.isinf(near) and value != near:  # refused, as a literal beyond them is
            raise ValueRejected(f"number {shown(value)} is out of range")
        return _canon(near)
    if isinstance(value, np.datetime64):  # as in an event: seconds since the epoch
        seconds = datetime64_seconds(value)
        if seconds is None:
            raise ValueRejected("NaT is no point in time")
        return _canon(seconds)
    if isinstance(value, datetime.date):  # as in an event: seconds since the epoch
        try:
            return _canon(epoch_seconds(value))
        except ValueError:  # a time that is none (pandas' NaT), absent in an event
            raise ValueRejected(f"{shown(value)} is no point in time") from None
    raise ValueRejected(f"value of type {type(value).__name__} is not a number, string or bool")


def _constant(value: object) -> object:
    """Canonical, index-storable constant, or ValueRejected saying why not."""
    t = type(value)
    if t is int:
        if -MAX_EXACT_INT <= value <= MAX_EXACT_INT:  # type: ignore[operator]
            return value
    elif t is str and len(value) <= MAX_CONST_BYTES and value.isascii():  # type: ignore[arg-type]
        return value
    value = _canon(value)
    if type(value) is str:
        _const_payload(value)
    return value


def canonical(value: object) -> object:
    """Canonical constant: integral numbers within ±2^53 become int (1.0 -> 1, -0.0 -> 0).

    Bools stay bool, strings str, other floats float, a datetime or date its seconds since
    the Unix epoch (``pbtree.values.epoch_seconds``); NaN, ints beyond ±2^53 and other types
    raise ExpressionError.
    """
    try:
        return _canon(value)
    except ValueRejected as exc:
        raise ExpressionError(str(exc)) from None


_FAMILY_OF_TYPE = {bool: BOOL, str: STRING}


def _family(value: object) -> int:
    return _FAMILY_OF_TYPE.get(type(value), NUMBER)


def value_sort_key(value: object) -> tuple[int, object]:
    """(family, value): orders constants of mixed families; 1 and True stay distinct."""
    return (_family(value), value)


_FAMILY_WORD = {NUMBER: "number", STRING: "string", BOOL: "bool"}


def _describe(value: object) -> str:
    return f"{_FAMILY_WORD[_family(value)]} {_short(format_value(value))}"


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ---------------------------------------------------------------------------------------
# prefix successor


def prefix_successor(prefix: str) -> str | None:
    """Smallest string above every string starting with ``prefix``; None if there is none."""
    chars = prefix.rstrip("\U0010ffff")
    if not chars:
        return None
    last = ord(chars[-1]) + 1
    if last == 0xD800:
        last = 0xE000
    return chars[:-1] + chr(last)


def _prefix_bound(attr: str, prefix: str) -> str | None:
    """prefix_successor, or ExpressionError if it does not fit in an index key."""
    succ = prefix_successor(prefix)
    if succ is not None and len(succ) * 4 > MAX_CONST_BYTES:
        size = len(succ.encode("utf-8"))
        if size > MAX_CONST_BYTES:
            raise ExpressionError(
                f"prefix {_short(format_value(prefix))} on {format_attr(attr)} is too long: "
                f"its upper bound takes {size} UTF-8 bytes, over the {MAX_CONST_BYTES}-byte "
                "limit of an index key; shorten the prefix"
            )
    return succ


# ---------------------------------------------------------------------------------------
# tokenizer

_NUM, _STR, _NAME, _QUOTED, _OP, _PUNCT, _BAD, _END = range(8)
_NUM_SRC = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_STR_SRC = r"'[^'\\]*(?:\\.[^'\\]*)*'" + r'|"[^"\\]*(?:\\.[^"\\]*)*"'
_TOKEN_RE = re.compile(
    rf"""\s*(?:
      (?P<num>{_NUM_SRC})
    | (?P<str>{_STR_SRC})
    | (?P<name>[^\W\d][\w.]*)
    | (?P<quoted>`[^`]*(?:``[^`]*)*`)
    | (?P<op><=|>=|==|!=|<>|<|>|=)
    | (?P<punct>[(),])
    | (?P<bad>\S)
    )""",
    re.S | re.X,
)
_KIND = {
    "num": _NUM,
    "str": _STR,
    "name": _NAME,
    "quoted": _QUOTED,
    "op": _OP,
    "punct": _PUNCT,
    "bad": _BAD,
}
_ESCAPE_RE = re.compile(
    r"\\(?:([\\'\"ntr0])|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.?))", re.S
)
_SIMPLE_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_SURROGATE_RE = re.compile("[\ud800-\udfff]")

Token = tuple[int, Any, int, int]  # kind, value, start, end


def _unescape(body: str, start: int) -> str:
    """Decode the escapes of a string literal body that starts at offset ``start``."""

    def repl(m: re.Match[str]) -> str:
        simple, x2, u4, u8, bad = m.groups()
        if simple is not None:
            return _SIMPLE_ESCAPES[simple]
        if bad is not None:
            what = f"'\\{bad}'" if bad else "'\\' at the end of the string"
            raise ExpressionError(
                f"at position {start + m.start()}: invalid escape {what} in string; use "
                "\\\\ \\' \\\" \\n \\t \\r \\0 \\xHH \\uXXXX or \\UXXXXXXXX"
            )
        code = int(x2 or u4 or u8, 16)
        if code > 0x10FFFF:
            raise ExpressionError(
                f"at position {start + m.start()}: escape '{m.group()}' is beyond U+10FFFF"
            )
        return chr(code)

    text = _ESCAPE_RE.sub(repl, body)
    if _SURROGATE_RE.search(text):  # join \uD83D\uDE00-style pairs; lone halves are rejected later
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    return text


class _Unreadable:
    """A number literal with no value the index can hold: an integer of more digits than
    any within ±2^53 (read no further, which also keeps int() off its digit limit), or a
    decimal beyond the double range. The parser refuses it where it stands, as any value
    (``_TextParser.check``): the first bad predicate is the one named, with the message the
    tuple form gives for that integer (a '-' before it negates it)."""

    __slots__ = ("text", "integer")

    def __init__(self, text: str, integer: bool) -> None:
        self.text, self.integer = text, integer

    def __neg__(self) -> _Unreadable:
        if not self.integer:
            return self
        return _Unreadable(self.text[1:] if self.text[0] == "-" else "-" + self.text, True)

    def __repr__(self) -> str:  # an integer's as repr() would write it, for ``inexact``
        return self.text

    def rejected(self) -> ValueRejected:
        if self.integer:
            return inexact(self)  # type: ignore[arg-type]
        return ValueRejected(f"number {_short(self.text)} is out of range")


def _number(text: str) -> int | float | _Unreadable:
    if "." in text or "e" in text or "E" in text:
        value = float(text)
        if math.isinf(value):
            return _Unreadable(text, False)
        return value
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > 17:
        return _Unreadable("-" + digits if text[0] == "-" else digits, True)
    return int(text)


def _tokenize(src: str) -> list[Token]:
    tokens: list[Token] = []
    append = tokens.append
    for m in _TOKEN_RE.finditer(src):
        kind = m.lastgroup
        if kind is None:  # trailing whitespace
            break
        start, end = m.span(kind)
        text = m.group(kind)
        if kind == "name":
            append((_NAME, text, start, end))
        elif kind == "num":
            append((_NUM, _number(text), start, end))
        elif kind == "str":
            body = text[1:-1]
            if "\\" in body:
                body = _unescape(body, start + 1)
            append((_STR, body, start, end))
        elif kind == "quoted":
            append((_QUOTED, text[1:-1].replace("``", "`"), start, end))
        elif kind == "bad":
            if text in "'\"":
                raise ExpressionError(
                    f"at position {start}: unterminated string (no closing {text}; a {text} "
                    f"inside a string is written \\{text})"
                )
            if text == "`":
                raise ExpressionError(
                    f"at position {start}: unterminated back-quoted name (no closing `)"
                )
            append((_BAD, text, start, end))
        else:
            append((_KIND[kind], text, start, end))
    return tokens


# ---------------------------------------------------------------------------------------
# text parser


class _TextParser:
    """Recursive-descent parser over the token list of one expression."""

    __slots__ = ("src", "toks", "i", "last", "depth")

    def __init__(self, src: str, toks: list[Token]) -> None:
        self.src = src
        self.toks = toks
        self.i = 0
        self.last = ""  # what the parser read last, for errors
        self.depth = 0  # groups and 'not' open at the token read

    def found(self, tok: Token) -> str:
        kind, value, start, end = tok
        if kind == _END:
            return "end of expression"
        text = _short(self.src[start:end])
        if kind == _NUM:
            return f"number {text}"
        if kind == _STR:
            return f"string {text}"
        if kind == _QUOTED:
            return f"name {text}"
        if kind == _NAME and value.lower() in KEYWORDS:
            return f"keyword '{text}'"
        hidden = [f"U+{ord(c):04X}" for c in text if not c.isprintable()]
        if hidden:  # a control or invisible character: say which, as printing it would not
            return f"character {', '.join(hidden)}" if len(hidden) == len(text) else \
                f"'{text}' (holding {', '.join(hidden)})"
        return f"'{text}'"

    def fail(self, expected: str, tok: Token | None = None) -> ExpressionError:
        tok = tok or self.toks[self.i]
        return ExpressionError(
            f"at position {tok[2]}: expected {expected}, found {self.found(tok)}"
        )

    def keyword(self, tok: Token, word: str) -> bool:
        return tok[0] == _NAME and len(tok[1]) == len(word) and tok[1].lower() == word

    def parse(self) -> Formula:
        node = self.disjunction()
        tok = self.toks[self.i]
        if tok[0] != _END:
            if tok[:2] == (_PUNCT, ")"):
                raise self.fail("'and', 'or' or end of expression (this ')' closes no '(')")
            raise self.fail(f"'and', 'or' or end of expression after {self.last}")
        return node

    def disjunction(self) -> Formula:
        items = [self.conjunction()]
        while self.keyword(self.toks[self.i], "or"):
            self.i += 1
            items.append(self.conjunction())
        return items[0] if len(items) == 1 else ("or", items)

    def conjunction(self) -> Formula:
        items = [self.factor()]
        while self.keyword(self.toks[self.i], "and"):
            self.i += 1
            items.append(self.factor())
        return items[0] if len(items) == 1 else ("and", items)

    def factor(self) -> Formula:
        toks = self.toks
        kind, value, start, _ = tok = toks[self.i]
        if tok[:2] == (_PUNCT, "(") or self.keyword(tok, "not"):
            self.depth += 1
            if self.depth > config.MAX_NESTING:
                raise ExpressionError(f"at position {start}: parentheses and 'not' nest "
                                      f"deeper than {config.MAX_NESTING} levels")
            self.i += 1
            if tok[0] == _PUNCT:
                node = self.disjunction()
                if toks[self.i][:2] != (_PUNCT, ")"):
                    raise self.fail(f"'and', 'or' or ')' closing the '(' at position {start}")
                self.i += 1
                self.last = "')'"
            else:
                node = ("not", self.factor())
            self.depth -= 1
            return node
        if kind == _NAME and value.lower() not in KEYWORDS:
            attr = value
        elif kind == _QUOTED:
            if not value:
                raise ExpressionError(f"at position {start}: attribute name is empty")
            attr = value
            try:
                _check_name(attr)
            except ValueRejected as exc:
                raise ExpressionError(f"at position {start}: attribute name: {exc}") from None
        elif kind == _NAME:
            raise ExpressionError(
                f"at position {start}: expected an attribute name, found {self.found(tok)} "
                f"(back-quote it as `{value}` to use it as a name)"
            )
        else:
            raise self.fail("an attribute name, 'not' or '('")
        self.i += 1
        preds: list[Predicate] = []
        self.predicate(attr, preds)
        self.last = f"the predicate on {_fa(attr)}"
        return preds[0]

    def predicate(self, attr: str, preds: list[Predicate]) -> None:
        kind, value, _, _ = tok = self.toks[self.i]
        name = _fa(attr)
        if kind == _OP:
            op = OP_SPELLINGS[value]
            self.i += 1
            preds.append((attr, op, self.value(f"'{name} {value}'", attr)))
            return
        word = value.lower() if kind == _NAME else ""
        if word == "in":
            self.i += 1
            preds.append((attr, "in", self.value_list(f"{name} in", attr)))
        elif word == "not":
            self.i += 1
            if not self.keyword(self.toks[self.i], "in"):
                raise self.fail(f"'in' after '{name} not'")
            self.i += 1
            preds.append((attr, "not in", self.value_list(f"{name} not in", attr)))
        elif word == "between":
            self.i += 1
            lo_tok = self.toks[self.i]
            lo = self.value(f"a lower bound after '{name} between'", attr, full=True)
            if not self.keyword(self.toks[self.i], "and"):
                raise self.fail(f"'and' after '{name} between {self.src[lo_tok[2] : lo_tok[3]]}'")
            self.i += 1
            hi = self.value(f"an upper bound after '{name} between … and'", attr, full=True)
            if _family(lo) != _family(hi):
                raise ExpressionError(
                    f"at position {lo_tok[2]}: the bounds of '{name} between' must have the "
                    f"same type, found {_describe(lo)} and {_describe(hi)}"
                )
            preds.append((attr, "between", (lo, hi)))
        elif word == "prefix":
            self.i += 1
            tok = self.toks[self.i]
            if tok[0] != _STR:
                raise self.fail(f"a string after '{name} prefix'")
            prefix = self.check(tok[1], tok, attr)
            try:
                _prefix_bound(attr, prefix)  # type: ignore[arg-type]
            except ExpressionError as exc:
                raise ExpressionError(f"at position {tok[2]}: {exc}") from None
            self.i += 1
            preds.append((attr, "prefix", prefix))
        else:
            raise self.fail(
                f"an operator (< <= = != >= > in, not in, between, prefix) after attribute {name}",
                tok,
            )

    def check(self, value: object, tok: Token, attr: str) -> object:
        try:
            if type(value) is _Unreadable:
                raise value.rejected()
            return _constant(value)
        except ValueRejected as exc:
            raise ExpressionError(
                f"at position {tok[2]}: invalid value for {_fa(attr)}: {exc}"
            ) from None

    def value(self, after: str, attr: str, full: bool = False) -> object:
        tok = self.toks[self.i]
        kind, value, start, end = tok
        if kind == _NUM or kind == _STR:
            self.i += 1
            return self.check(value, tok, attr)
        if kind == _NAME:
            word = value.lower()
            if word == "true" or word == "false":
                self.i += 1
                return word == "true"
            if word == "inf":
                self.i += 1
                return math.inf
        elif kind == _BAD and value in "+-":
            nxt = self.toks[self.i + 1]
            if self.keyword(nxt, "inf"):
                self.i += 2
                return -math.inf if value == "-" else math.inf
            if nxt[0] == _NUM and self.src[nxt[2]] not in "+-":
                self.i += 2
                return self.check(-nxt[1] if value == "-" else nxt[1], tok, attr)
            raise self.fail(f"a number or inf after '{value}'", nxt)
        error = self.fail(after if full else f"a value after {after}")
        if kind == _NAME:  # a bare word: most often a string left unquoted
            error = ExpressionError(f"{error}; a string is quoted: {format_value(value)}")
        raise error

    def value_list(self, what: str, attr: str) -> tuple[object, ...]:
        if self.toks[self.i][:2] != (_PUNCT, "("):
            raise self.fail(f"'(' after '{what}'")
        self.i += 1
        if self.toks[self.i][:2] == (_PUNCT, ")"):
            raise self.fail(f"at least one value in '{what} (…)'")
        values = []
        while True:
            values.append(self.value(f"a value in '{what} (…)'", attr, full=True))
            tok = self.toks[self.i]
            self.i += 1
            if tok[:2] == (_PUNCT, ")"):
                return tuple(values)
            if tok[:2] != (_PUNCT, ","):
                raise self.fail(f"',' or ')' in '{what} (…)'", tok)
            if self.toks[self.i][:2] == (_PUNCT, ")"):
                self.i += 1
                return tuple(values)


def _parse_text(src: str) -> Formula:
    toks = _tokenize(src)
    if not toks:
        raise ExpressionError("empty subscription: the expression is empty")
    toks.append((_END, None, len(src), len(src)))
    return _TextParser(src, toks).parse()


# Fast path: one regex match per predicate of the common shapes (bare attribute; number,
# string, true or false values). Each value (and each comma-separated item of a list) must
# be one literal, checked by _literal, between spaces, commas, parentheses or the end, so it
# is one token of _TOKEN_RE (the longest match of _NUM_SRC is its first). Keywords are
# ASCII-case-insensitive (_ci), as the parser's ``.lower()`` test is (only U+212A and U+0130
# lower into ASCII, to no keyword). findall() goes from one predicate to the next, each but
# the last followed by 'and'; where none matches, ``bad`` takes the rest and the full parser
# decides.


def _ci(*words: str) -> str:
    """Regex source matching any of ``words`` in any ASCII letter case."""
    return "(?:" + "|".join("".join(f"[{c}{c.upper()}]" for c in w) for w in words) + ")"


_VALUE_RE = re.compile(rf"\s*({_NUM_SRC}|{_STR_SRC}|{_ci('true', 'false')})\s*", re.S)
_CHUNK = rf"(?:{_STR_SRC}|\S+)"
_FAST_PRED_RE = re.compile(
    rf"""\s*(?!{_ci(*sorted(KEYWORDS))}(?![\w.]))(?P<attr>[^\W\d][\w.]*)(?:
      \s*(?P<op><=|>=|==|!=|<>|<|>|=)\s*(?P<value>{_CHUNK})
    | \s+{_ci("between")}\s+(?P<lo>{_CHUNK})\s+{_ci("and")}\s+(?P<hi>{_CHUNK})
    | \s+{_ci("prefix")}\s*(?P<prefix>{_STR_SRC})
    | \s+(?P<neg>{_ci("not")}\s+)?{_ci("in")}\s*\((?P<values>[^()]+)\)
    )(?:\s+{_ci("and")}\s+(?=\S)|\s*\Z)
    | (?P<bad>.+)""",
    re.S | re.X,
)
_LITERALS: dict[str, tuple[int, object]] = {}  # a cache of _literal, for short texts


def _literal(text: str) -> tuple[int, object] | None:
    """(family, constant) of a literal, spaces around it allowed; None if text is not one.

    ValueError if the full parser would reject the value.
    """
    m = _VALUE_RE.fullmatch(text)
    if m is None:
        return None
    token = m.group(1)
    first = token[0]
    if first == "'" or first == '"':
        value = token[1:-1]
        if "\\" in value:
            value = _unescape(value, 0)
        value = _constant(value)
    elif first in "tTfF":
        value = first in "tT"
    else:
        value = _number(token)
        if type(value) is _Unreadable:
            raise value.rejected()
        value = _constant(value)
    pair = (_family(value), value)
    if len(text) <= config.LITERAL_CHARS:
        if len(_LITERALS) >= config.LITERALS_CACHED:
            _LITERALS.clear()
        _LITERALS[text] = pair
    return pair


def _core_of_text(src: str) -> dict[tuple, Predicate] | None:
    """_rewrite_into of every predicate, or None if src is not all common shapes.

    A ValueError (a rejected value) is for the full parser to report, as is None.
    """
    found = _FAST_PRED_RE.findall(src)
    if not found or found[-1][-1]:
        return None
    out: dict[tuple, Predicate] = {}
    cached = _LITERALS.get
    for attr, op, value, lo, hi, prefix, neg, values, _ in found:
        if op:
            pair = cached(value) or _literal(value)
            if pair is None:
                return None
            op, rank = _SCALAR_SPELLINGS[op]
            family, value = pair
            out[(attr, rank, family, value)] = (attr, op, value)
        elif lo:
            lo_pair = cached(lo) or _literal(lo)
            hi_pair = cached(hi) or _literal(hi)
            if lo_pair is None or hi_pair is None or lo_pair[0] != hi_pair[0]:
                return None
            out[(attr, _BT, lo_pair[0], (lo_pair[1], hi_pair[1]))] = (
                attr, "between", (lo_pair[1], hi_pair[1]))
        elif prefix:
            _rewrite_into(out, attr, "prefix", _literal(prefix)[1])  # type: ignore[index]
        else:
            texts = values.split(",")
            pairs = set(map(cached, texts))
            if None in pairs:
                pairs = set(map(_literal, texts))
                if None in pairs:
                    return None
            _add_in(out, attr, bool(neg), tuple(sorted(pairs)))  # type: ignore[type-var]
    return out


# ---------------------------------------------------------------------------------------
# tuple form


def _check_name(attr: str) -> None:
    try:
        attr.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueRejected(
            f"character {exc.start} (U+{ord(attr[exc.start]):04X}) is an unpaired surrogate"
        ) from None


def source_op(op: object) -> str | None:
    """The operator of OPS_SOURCE that a tuple's ``op`` spells: exactly as OP_SPELLINGS
    lists it, or in any letter case and spacing ('NOT  IN'); None if it spells none."""
    if not isinstance(op, str):
        return None
    canon = OP_SPELLINGS.get(op) if type(op) is str else None
    return canon or OP_SPELLINGS.get(" ".join(op.lower().split()))


def parse_tuple(index: int, item: object) -> Predicate:
    """The source-level predicate of one (attribute, op, value) tuple, as ``parse`` reads
    item ``index`` of a list: its errors name it as predicate ``index``."""
    return _parse_tuple(index, item)


def _parse_tuple(index: int, item: object) -> Predicate:
    def fail(problem: str) -> ExpressionError:
        return ExpressionError(f"predicate {index} {shown(item)}: {problem}")

    if not isinstance(item, tuple | list) or len(item) != 3:
        raise fail("expected an (attribute, operator, value) tuple; an expression of tuples "
                   "is a list of them")
    attr, op, value = item
    if not isinstance(attr, str):
        raise fail(f"attribute name must be a str, not {type(attr).__name__}")
    if not attr:
        raise fail("attribute name is empty")
    if not isinstance(op, str):
        raise fail(f"operator must be a str, not {type(op).__name__}")
    canon_op = source_op(op)
    if canon_op is None:
        raise fail(f"unknown operator {op!r}; expected one of {', '.join(OPS_SOURCE)}, ==, <>")
    if not attr.isascii():
        try:
            _check_name(attr)
        except ValueRejected as exc:  # as text says it: the name is wrong, not the value
            raise fail(f"attribute name: {exc}") from None
    try:
        if canon_op in _SCALAR_CORE:
            return (attr, canon_op, _constant(value))
        if canon_op == "in" or canon_op == "not in":
            if isinstance(value, np.ndarray) and value.ndim == 1:  # as events take them
                value = list(value)
            if not isinstance(value, list | tuple | set | frozenset):
                raise fail(f"'{canon_op}' needs a list of values, not {type(value).__name__}")
            if not value:
                raise fail(f"'{canon_op}' needs at least one value")
            return (attr, canon_op, tuple(map(_constant, value)))
        if canon_op == "between":
            if isinstance(value, np.ndarray) and value.shape == (2,):
                value = list(value)
            if not isinstance(value, list | tuple) or len(value) != 2:
                raise fail("'between' needs a (low, high) pair")
            lo, hi = _constant(value[0]), _constant(value[1])
            if _family(lo) != _family(hi):
                raise fail(
                    f"the bounds of 'between' must have the same type, found {_describe(lo)} "
                    f"and {_describe(hi)}"
                )
            return (attr, "between", (lo, hi))
        # prefix
        if not isinstance(value, str):
            raise fail(f"'prefix' needs a string, not {type(value).__name__}")
        prefix = _constant(value)
        _prefix_bound(attr, prefix)  # type: ignore[arg-type]
        return (attr, "prefix", prefix)
    except ValueRejected as exc:
        raise fail(f"invalid value for {_fa(attr)}: {exc}") from None
    except ExpressionError as exc:
        if str(exc).startswith(f"predicate {index} "):
            raise
        raise fail(str(exc)) from None


def _is_group(item: object) -> bool:
    """Whether a tuple-form item is a group, ``("or", alternative, ...)`` or ``("not",
    alternative)``, rather than an (attribute, op, value) predicate."""
    return (isinstance(item, tuple | list) and len(item) >= 2 and type(item[0]) is str
            and item[0].lower() in ("or", "not") and not isinstance(item[1], str))


def _tuple_formula(items: object, label: str = "", depth: int = 0) -> Formula:
    """The formula of a tuple-form conjunction: its items are predicates and groups; an
    item's errors name it by its position (``2.1.0``: item 0 of alternative 1 of item 2)."""
    if isinstance(items, bytes | bytearray | dict | str) or not isinstance(items, Iterable):
        raise ExpressionError(
            f"expected an expression string or a list of (attribute, op, value) tuples, "
            f"not {type(items).__name__}"
        )
    parts: list[Formula] = []
    for n, item in enumerate(items):
        index = f"{label}{n}"
        if not _is_group(item):
            parts.append(_parse_tuple(index, item))
            continue
        word, alternatives = item[0].lower(), item[1:]
        if depth >= config.MAX_NESTING:
            raise ExpressionError(f"predicate {index}: groups nest deeper than "
                                  f"{config.MAX_NESTING} levels")
        if word == "not" and len(alternatives) != 1:
            raise ExpressionError(f"predicate {index}: ('not', x) negates one item or list")
        found = [_tuple_formula(alt if isinstance(alt, list) else [alt], f"{index}.{k}.",
                                depth + 1) for k, alt in enumerate(alternatives)]
        parts.append(("not", found[0]) if word == "not" else ("or", found))
    if not parts:
        raise ExpressionError(f"empty subscription: no predicates given"
                              f"{f' in group {label[:-1]}' if label else ''}")
    return parts[0] if len(parts) == 1 else ("and", parts)


# ---------------------------------------------------------------------------------------
# disjunctive normal form

_NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<", "in": "not in",
            "not in": "in"}


def _negations(pred: Predicate) -> list[Predicate]:
    """The source predicates one of which holds where ``pred`` does not, for an event
    value of the predicate's type (under strong semantics a predicate on a value that is
    absent or of another type is false, negated or not)."""
    attr, op, value = pred
    if op == "between":
        return [(attr, "<", value[0]), (attr, ">", value[1])]
    if op == "prefix":
        succ = _prefix_bound(attr, value)
        return [(attr, "<", value)] + ([] if succ is None else [(attr, ">=", succ)])
    return [(attr, _NEGATED[op], value)]


def _count(node: Formula, negated: bool) -> int:
    """How many conjunctions ``_terms`` gives, without building them."""
    if len(node) == 3:
        return len(_negations(node)) if negated else 1
    word, body = node
    if word == "not":
        return _count(body, not negated)
    counts = [_count(item, negated) for item in body]
    return math.prod(counts) if (word == "and") != negated else sum(counts)


def _terms(node: Formula, negated: bool) -> list[list[Predicate]]:
    """The conjunctions of source predicates whose disjunction ``node`` (negated: its
    negation, pushed down to the predicates by De Morgan's laws) is."""
    if len(node) == 3:
        return [[p] for p in _negations(node)] if negated else [[node]]
    word, body = node
    if word == "not":
        return _terms(body, not negated)
    found = [_terms(item, negated) for item in body]
    if (word == "and") == negated:  # a disjunction
        return [conj for terms in found for conj in terms]
    out: list[list[Predicate]] = [[]]
    for terms in found:
        out = [left + right for left in out for right in terms]
    return out


class Disjunction(list):
    """The core conjunctions of a subscription that needs two or more, in canonical order
    (``normalize``): it matches when any holds."""


def conjunctions(preds: list) -> list[list[Predicate]]:
    """The conjunctions of a normalised subscription: a Disjunction's, or the one."""
    return preds if type(preds) is Disjunction else [preds]


def disjunction(terms: Iterable[Iterable[Predicate]]) -> list[Predicate] | Disjunction:
    """Core predicates of the disjunction of ``terms`` (conjunctions of source or core
    predicates): each conjunction rewritten, those another one implies dropped (with a
    duplicate, the later), in canonical order; one left is returned as it is."""
    keyed = {}
    for conj in terms:
        out: dict[tuple, Predicate] = {}
        for attr, op, value in conj:
            _rewrite_into(out, attr, op, value)
        keys = frozenset(out)
        if not any(kept <= keys for kept in keyed):
            for kept in [k for k in keyed if keys < k]:
                del keyed[kept]
            keyed[keys] = out
    found = sorted((tuple(sorted(out)), out) for out in keyed.values())
    lists = [list(map(out.__getitem__, keys)) for keys, out in found]
    return lists[0] if len(lists) == 1 else Disjunction(lists)


def dnf(formula: Formula, source: object, limit: int) -> list[Predicate] | Disjunction:
    """``disjunction`` of a parsed formula's conjunctions; ExpressionError naming the
    expression when it takes more than ``limit``."""
    count = _count(formula, False)
    if count > limit:
        text = source if isinstance(source, str) else shown(source)
        raise ExpressionError(
            f"expression {_short(text, 80)!r} expands to {count} conjunctions in "
            f"disjunctive normal form; the limit is {limit} (max_conjunctions)")
    return disjunction(_terms(formula, False))


# ---------------------------------------------------------------------------------------
# public API


def parse_formula(source: str | Sequence) -> Formula:
    """The parsed form of a text expression or tuple list: a source-level predicate
    ``(attr, op, value)``, ``("and" | "or", [formulas])`` or ``("not", formula)``.

    Values are validated and canonical; ops are spelled as in OPS_SOURCE.
    """
    if isinstance(source, str):
        return _parse_text(source)
    return _tuple_formula(source)


def parse(source: str | Sequence) -> list[Predicate]:
    """Source-level predicates ``(attr, op, value)`` of an expression that is a plain
    conjunction (no 'or', 'not', or parentheses around them); ExpressionError otherwise:
    ``parse_formula`` reads every expression."""
    found = [parse_formula(source)]
    preds: list[Predicate] = []
    while found:
        node = found.pop()
        if len(node) == 3:
            preds.append(node)
        elif node[0] == "and":
            found += reversed(node[1])
        else:
            raise ExpressionError("the expression holds 'or' or 'not': parse_formula reads it")
    return preds


def _distinct(values: Iterable[object]) -> tuple[tuple[int, object], ...]:
    """Sorted (family, value) pairs of the distinct values, the last of equal ones."""
    last = {}
    for v in values:
        pair = (_FAMILY_OF_TYPE.get(type(v), NUMBER), v)
        last[pair] = pair
    return tuple(sorted(last.values()))


def _add_in(out: dict[tuple, Predicate], attr: str, negated: bool, pairs: tuple) -> None:
    """_rewrite_into of 'in' (or 'not in') with the sorted distinct (family, value) pairs."""
    if negated:
        for family, v in pairs:
            out[(attr, _NE, family, v)] = (attr, "!=", v)
    elif len(pairs) == 1:
        family, v = pairs[0]
        out[(attr, _EQ, family, v)] = (attr, "=", v)
    else:
        out[(attr, _IN, pairs)] = (attr, "in", tuple(zip(*pairs, strict=True))[1])


def _rewrite_into(out: dict[tuple, Predicate], attr: str, op: str, value: Any) -> None:
    """Add the core predicates of one source predicate to ``out``, keyed by sort order."""
    if op in _SCALAR_CORE:
        out[(attr, _OP_RANK[op], _family(value), value)] = (attr, op, value)
    elif op == "in" or op == "not in":
        _add_in(out, attr, op == "not in", _distinct(value))
    elif op == "between":
        lo, hi = value
        out[(attr, _BT, _family(lo), (lo, hi))] = (attr, "between", (lo, hi))
    elif op == "prefix":
        if _prefix_bound(attr, value) is None:  # no string above all it begins: >= only
            out[(attr, _GE, STRING, value)] = (attr, ">=", value)
        else:
            out[(attr, _PX, STRING, value)] = (attr, "prefix", value)
    else:
        raise ExpressionError(f"unknown operator {op!r} in predicate on {_fa(attr)}")


def rewrite(preds: Iterable[Predicate]) -> list[Predicate]:
    """Normalised predicates (ops in OPS_STORED: core and intervals), duplicates collapsed,
    in canonical order (DESIGN §1)."""
    out: dict[tuple, Predicate] = {}
    for attr, op, value in preds:
        _rewrite_into(out, attr, op, value)
    return list(map(out.__getitem__, sorted(out)))


def _core_of_tuples(source: list | tuple) -> dict[tuple, Predicate] | None:
    """_rewrite_into of every tuple; plain predicates skip _parse_tuple, which reports errors;
    None for the full parser when there is a group or none."""
    out: dict[tuple, Predicate] = {}
    family = _FAMILY_OF_TYPE.get
    for index, item in enumerate(source):
        kind = type(item)
        if (kind is tuple or kind is list) and len(item) == 3:
            attr, op, value = item
            if type(attr) is str and type(op) is str and attr and attr.isascii():
                kind = type(value)
                spelled = _SCALAR_SPELLINGS.get(op)
                if spelled is not None:
                    if kind is float and value == value:  # NaN is the full parser's to refuse
                        value = _canon(value)  # 2.0 becomes the int 2
                        kind = type(value)
                    if (
                        (kind is int and -MAX_EXACT_INT <= value <= MAX_EXACT_INT)
                        or (kind is float and value == value)
                        or (kind is str and len(value) <= MAX_CONST_BYTES and value.isascii())
                        or kind is bool
                    ):
                        op, rank = spelled
                        out[(attr, rank, family(kind, NUMBER), value)] = (attr, op, value)
                        continue
                elif op == "in" or op == "not in":
                    if (kind is tuple or kind is list) and value:
                        try:
                            pairs = _distinct(map(_constant, value))
                        except ValueError:
                            pass
                        else:
                            _add_in(out, attr, op == "not in", pairs)
                            continue
                elif op == "between" and (kind is tuple or kind is list) and len(value) == 2:
                    try:
                        lo, hi = _constant(value[0]), _constant(value[1])
                    except ValueError:
                        pass
                    else:
                        lo_family = family(type(lo), NUMBER)
                        if lo_family == family(type(hi), NUMBER):
                            out[(attr, _BT, lo_family, (lo, hi))] = (attr, "between", (lo, hi))
                            continue
        if _is_group(item):
            return None
        attr, op, value = _parse_tuple(index, item)
        _rewrite_into(out, attr, op, value)
    return out or None


def normalize(source: str | Sequence, limit: int = config.MAX_CONJUNCTIONS
              ) -> list[Predicate] | Disjunction:
    """The canonical core predicates of a subscription: a list for a conjunction, a
    Disjunction of such lists for an expression that needs several (``dnf``, at most
    ``limit``)."""
    out = None
    t = type(source)
    if t is str:
        try:
            out = _core_of_text(source)  # type: ignore[arg-type]
        except ValueError:  # whatever it is, the full parser reports it
            pass
    elif t is list or t is tuple:
        out = _core_of_tuples(source)  # type: ignore[arg-type]
    if out is not None:
        return list(map(out.__getitem__, sorted(out)))
    return dnf(parse_formula(source), source, limit)


# ---------------------------------------------------------------------------------------
# formatting

_PLAIN_NAME_RE = re.compile(r"[^\W\d][\w.]*")
_ESCAPES_OUT = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}


def format_attr(attr: str) -> str:
    """An attribute name as the text form spells it: bare, or back-quoted if need be."""
    if _PLAIN_NAME_RE.fullmatch(attr) and attr.lower() not in KEYWORDS:
        return attr
    return "`" + attr.replace("`", "``") + "`"


_fa = format_attr


def _quote(text: str) -> str:
    if text.isprintable() and "'" not in text and "\\" not in text:
        return "'" + text + "'"
    out = []
    for ch in text:
        esc = _ESCAPES_OUT.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x100:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    return "'" + "".join(out) + "'"


def format_value(value: object) -> str:
    """A constant as the text form spells it (strings quoted and escaped, floats by repr)."""
    t = type(value)
    if t is bool:
        return "true" if value else "false"
    if t is str:
        return _quote(value)  # type: ignore[arg-type]
    if t is float:
        if math.isinf(value):  # type: ignore[arg-type]
            return "inf" if value > 0 else "-inf"  # type: ignore[operator]
        return repr(value)
    return str(value)


def format_predicates(preds: Iterable[Predicate]) -> str:
    """Canonical text of predicates (core or source ops), or of a Disjunction's conjunctions
    joined by 'or'; normalize() of it gives them back."""
    if type(preds) is Disjunction:
        return " or ".join(f"({format_predicates(conj)})" if len(conj) > 1 else
                           format_predicates(conj) for conj in preds)
    parts = []
    for attr, op, value in preds:
        name = format_attr(attr)
        if op == "in" or op == "not in":
            parts.append(f"{name} {op} ({', '.join(map(format_value, value))})")
        elif op == "between":
            parts.append(f"{name} between {format_value(value[0])} and {format_value(value[1])}")
        else:
            parts.append(f"{name} {op} {format_value(value)}")
    return " and ".join(parts)
