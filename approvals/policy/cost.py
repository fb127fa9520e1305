"""How much work a condition may take, estimated from its text before it is ever evaluated.

CEL always terminates, but not always soon: five comprehensions nested over 60-element lists
are 60⁵ (778 million) steps, and a list built by `map` inside a comprehension feeds the next
one. The Rust bindings give no parse tree, so this module parses CEL itself, for this estimate
only (the Rust compiler stays the judge of what is valid CEL), and adds up an upper bound of
the steps an evaluation may take:

- a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) costs its range's size
  times its body's cost: nesting multiplies;
- a list or map literal's size is its number of elements; a value from the call (`args`,
  `context`, ...) counts as `CALL_DATA_SIZE` elements or characters, whatever it really holds;
- `+` copies what it joins (strings and lists grow), `map` makes a list of its range's size
  whose elements are its body's values, and comparing or searching costs the sizes compared;
- `matches` compiles its pattern at each evaluation: a Unicode class (`\\w`, `\\d`, `\\s`, `.`)
  costs hundreds of steps, and a counted repetition (`{100}`) multiplies what it repeats.

One step is 30 to 160 ns of evaluation. `MAX_COST` is refused when a rule is saved;
a condition at most `INLINE_COST` that loops over nothing from the call is evaluated in the
process that asks (microseconds); any other runs in a separate process with a time budget
(`conditions`), since its real cost depends on the call's data.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ("CALL_DATA_SIZE", "INLINE_COST", "MAX_COST", "Cost", "estimate")

CALL_DATA_SIZE = 100
"""What a value from the call counts as, in elements or characters, for the estimate."""
MAX_COST = 1_000_000
"""The most steps a condition may be estimated to take: at most about 0.15 s of evaluation."""
INLINE_COST = 10_000
"""A condition estimated at no more (about 1.5 ms at most) that loops over nothing from the call runs where asked."""
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


@dataclass(frozen=True)
class Cost:
    """A condition's estimated cost: an upper bound of its steps, and what makes it so."""

    steps: float
    loops_over_call: bool
    """Whether a comprehension ranges over a value from the call (its real cost depends on the call)."""
    nesting: tuple[float, ...] = ()
    """The range sizes of the costliest chain of nested comprehensions, outermost first."""

    @property
    def inline(self) -> bool:
        """Cheap whatever the call holds: evaluated where it is asked, with no time budget needed."""
        return self.steps <= INLINE_COST and not self.loops_over_call

    def why(self) -> str:
        """What makes the cost, in words: the nested comprehensions, else the values built."""
        if not self.nesting:
            return "strings, lists or patterns built at each evaluation"
        sizes = [_count(size) for size in self.nesting]
        if len(sizes) == 1:
            return f"a comprehension over {sizes[0]} elements"
        each = f"{sizes[0]} elements each" if len(set(sizes)) == 1 else f"{', '.join(sizes)} elements"
        return f"comprehensions nested {len(sizes)} deep over {each}"

    def refusal(self) -> str | None:
        """Why a rule with this condition cannot be saved; None when it may."""
        if self.steps <= MAX_COST:
            return None
        return (
            f"the condition may take too long: up to ~{_count(self.steps)} steps ({self.why()}); "
            f"the limit is {_count(MAX_COST)}"
        )


def _count(value: float) -> str:
    if value >= 1e15:
        return f"{value:.1e}"
    return f"{round(value):,}"


class _Unparsed(Exception):
    """Text this estimate's parser does not follow (the Rust compiler may still take it)."""


def estimate(text: str) -> Cost | None:
    """The cost of a condition, or None when this parser cannot follow it (it is then run with a time budget)."""
    try:
        tree = _Parser(text).parse()
        shape = _Estimator().cost(tree, {})
    except (_Unparsed, RecursionError):
        return None
    return Cost(shape.steps, shape.loops, shape.nesting)


# --- the parse tree ---------------------------------------------------------------------------


@dataclass
class _Node:
    kind: str
    """lit, str, ident, member, call, list, map, unary, chain, cond"""
    value: object = None
    children: list[_Node] = field(default_factory=list)
    ops: list[tuple[str, object]] = field(default_factory=list)
    """A member chain's steps (`.f`, `.f(args)`, `[i]`), or a binary chain's operators."""


_TOKEN = re.compile(
    r"""
    (?P<space>\s+|//[^\n]*)
  | (?P<string>(?:[rR][bB]?|[bB][rR]?)?
        (?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<number>0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||\.\?|\[\?|[-+*/%<>!?:.,()\[\]{}])
    """,
    re.VERBOSE | re.DOTALL,
)
_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"||"}),
    frozenset({"&&"}),
    frozenset({"==", "!=", "<", "<=", ">", ">=", "in"}),
    frozenset({"+", "-"}),
    frozenset({"*", "/", "%"}),
)


def _decode(token: str) -> str:
    """A string literal's value (near enough: escapes other than the common ones are kept as written)."""
    prefix = re.match(r"[rRbB]*", token)
    raw = "r" in (prefix.group(0).lower() if prefix else "")
    body = token[len(prefix.group(0)) if prefix else 0 :]
    quote = 3 if body[:3] in ("'''", '"""') else 1
    body = body[quote:-quote]
    if raw:
        return body
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body, flags=re.DOTALL)


class _Parser:
    """Recursive descent over CEL's grammar; binary operators and member steps are read in loops, not recursion."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        position = 0
        while position < len(text):
            found = _TOKEN.match(text, position)
            if found is None:
                raise _Unparsed(f"unexpected {text[position]!r}")
            position = found.end()
            kind = found.lastgroup or ""
            if kind != "space":
                value = found.group(0)
                self.tokens.append(("op" if kind == "ident" and value == "in" else kind, value))
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.at >= len(self.tokens):
            raise _Unparsed("unexpected end")
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise _Unparsed(f"expected {expected!r}, found {token[1]!r}")
        self.at += 1
        return token

    def parse(self) -> _Node:
        node = self.expr()
        if self.at != len(self.tokens):
            raise _Unparsed(f"unexpected {self.tokens[self.at][1]!r}")
        return node

    def expr(self) -> _Node:
        condition = self.binary(0)
        if self.peek() != "?":
            return condition
        self.take("?")
        then = self.binary(0)
        self.take(":")
        return _Node("cond", children=[condition, then, self.expr()])

    def binary(self, level: int) -> _Node:
        if level == len(_LEVELS):
            return self.unary()
        first = self.binary(level + 1)
        node = _Node("chain", children=[first])
        while self.at < len(self.tokens) and self.tokens[self.at][0] == "op" and self.peek() in _LEVELS[level]:
            node.ops.append((self.take()[1], None))
            node.children.append(self.binary(level + 1))
        return node if node.ops else first

    def unary(self) -> _Node:
        count = 0
        while self.peek() in ("!", "-"):
            self.take()
            count += 1
        node = self.member()
        return _Node("unary", count, [node]) if count else node

    def member(self) -> _Node:
        node = _Node("member", children=[self.primary()])
        while self.peek() in (".", ".?", "[", "[?"):
            step = self.take()[1]
            if step in ("[", "[?"):
                index = self.expr()
                self.take("]")
                node.ops.append(("index", index))
                continue
            name = self.take()
            if name[0] != "ident":
                raise _Unparsed(f"expected a name after '.', found {name[1]!r}")
            if self.peek() == "(":
                node.ops.append(("call", (name[1], self.arguments(")"))))
            elif self.peek() == "{":
                node.ops.append(("message", self.entries()))
            else:
                node.ops.append(("select", name[1]))
        return node if node.ops else node.children[0]

    def arguments(self, closing: str) -> list[_Node]:
        self.take()
        found: list[_Node] = []
        while self.peek() != closing:
            found.append(self.expr())
            if self.peek() != ",":
                break
            self.take(",")
        self.take(closing)
        return found

    def entries(self) -> list[_Node]:
        """A map's or message's entries, keys and values in turn."""
        self.take("{")
        found: list[_Node] = []
        while self.peek() != "}":
            found.append(self.expr())
            self.take(":")
            found.append(self.expr())
            if self.peek() != ",":
                break
            self.take(",")
        self.take("}")
        return found

    def primary(self) -> _Node:
        kind, value = self.tokens[self.at] if self.at < len(self.tokens) else ("", "")
        if kind == "string":
            self.take()
            return _Node("str", _decode(value))
        if kind == "number":
            self.take()
            return _Node("lit", value)
        if value == ".":  # a name from the root: `.args`
            self.take()
            kind, value = self.tokens[self.at] if self.at < len(self.tokens) else ("", "")
        if kind == "ident":
            self.take()
            if self.peek() == "(":
                return _Node("call", value, self.arguments(")"))
            if self.peek() == "{":
                return _Node("map", children=self.entries())
            return _Node("ident", value)
        if value == "(":
            self.take()
            node = self.expr()
            self.take(")")
            return node
        if value == "[":
            return _Node("list", children=self.arguments("]"))
        if value == "{":
            return _Node("map", children=self.entries())
        raise _Unparsed(f"unexpected {value!r}" if value else "unexpected end")


# --- the estimate -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Shape:
    """What evaluating a node costs, and how big its value may get."""

    steps: float
    size: float = 1
    """Elements of a list or map, characters of a string; 1 for a scalar."""
    inner: float = 1
    """The largest size of anything inside it (a list's elements, their elements...)."""
    loops: bool = False
    """Whether a comprehension inside ranges over a value from the call."""
    nesting: tuple[float, ...] = ()
    from_call: bool = False
    """Whether the value comes from the call (its real size is the call's)."""


_CALL_VALUE = _Shape(1, CALL_DATA_SIZE, 1, from_call=True)
"""A value from the call, or any part of it: `CALL_DATA_SIZE` elements or characters (copied as references)."""
_CALL_SHAPES = {"args": _CALL_VALUE, "context": _CALL_VALUE, "now": _Shape(1)} | dict.fromkeys(
    ("tool", "agent", "engine", "session", "requester"), _CALL_VALUE
)
_SCALAR_FUNCTIONS = frozenset(
    {"size", "int", "uint", "double", "bool", "timestamp", "duration", "type", "has", "contains", "startsWith"}
    | {"endsWith", "matches", "hasValue", "of", "none"}
)


def _part(shape: _Shape) -> tuple[float, float]:
    """The size and inner size of an element or field of `shape`: the call's data is as big in every part."""
    return (CALL_DATA_SIZE, 1) if shape.from_call else (shape.inner, shape.inner)


def _worst(shapes: list[_Shape]) -> tuple[bool, tuple[float, ...]]:
    """Whether any loops over the call, and the nesting of the costliest."""
    nesting = max(shapes, key=lambda shape: shape.steps).nesting if shapes else ()
    return any(shape.loops for shape in shapes), nesting


class _Estimator:
    def cost(self, node: _Node, bound: dict[str, _Shape]) -> _Shape:
        kind = node.kind
        if kind == "lit":
            return _Shape(1)
        if kind == "str":
            return _Shape(1, max(1, len(str(node.value))))
        if kind == "ident":
            name = str(node.value)
            if name in bound:
                return bound[name]
            return _CALL_SHAPES.get(name, _Shape(1))
        if kind in ("list", "map"):
            items = [self.cost(child, bound) for child in node.children]
            count = len(items) if kind == "list" else len(items) // 2
            loops, nesting = _worst(items)
            inner = max([1.0, *(max(item.size, item.inner) for item in items)])
            return _Shape(sum(item.steps for item in items) + count + 1, max(1, count), inner, loops, nesting)
        if kind == "unary":
            inner_shape = self.cost(node.children[0], bound)
            return _Shape(inner_shape.steps + float(str(node.value)), 1, 1, inner_shape.loops, inner_shape.nesting)
        if kind == "cond":
            parts = [self.cost(child, bound) for child in node.children]
            loops, nesting = _worst(parts)
            branches = parts[1:]
            return _Shape(
                parts[0].steps + max(b.steps for b in branches) + 1,
                max(b.size for b in branches),
                max(b.inner for b in branches),
                loops,
                nesting,
                any(b.from_call for b in branches),
            )
        if kind == "chain":
            return self.chain(node, bound)
        if kind == "call":
            return self.function(str(node.value), None, node.children, bound)
        return self.member(node, bound)

    def chain(self, node: _Node, bound: dict[str, _Shape]) -> _Shape:
        left = self.cost(node.children[0], bound)
        for (op, _), child in zip(node.ops, node.children[1:], strict=True):
            right = self.cost(child, bound)
            steps = left.steps + right.steps + 1
            loops, nesting = _worst([left, right])
            if op == "+":  # numbers, or strings and lists joined: a copy of both (a list's elements deeply)
                copied = sum(side.size if side.from_call else side.size * side.inner for side in (left, right))
                left = _Shape(
                    steps + copied,
                    left.size + right.size,
                    max(left.inner, right.inner),
                    loops,
                    nesting,
                    left.from_call or right.from_call,
                )
            elif op == "in":
                left = _Shape(steps + right.size * max(1, min(left.size, right.inner)), 1, 1, loops, nesting)
            elif op in ("==", "!=", "<", "<=", ">", ">="):
                compared = min(left.size * left.inner, right.size * right.inner)  # it stops at the shorter
                left = _Shape(steps + compared, 1, 1, loops, nesting)
            else:
                left = _Shape(steps, 1, 1, loops, nesting)
        return left

    def member(self, node: _Node, bound: dict[str, _Shape]) -> _Shape:
        shape = self.cost(node.children[0], bound)
        for step, detail in node.ops:
            if step == "select":
                shape = _Shape(shape.steps + 1, *_part(shape), shape.loops, shape.nesting, shape.from_call)
            elif step == "index":
                assert isinstance(detail, _Node)
                index = self.cost(detail, bound)
                loops, nesting = _worst([shape, index])
                shape = _Shape(shape.steps + index.steps + 1, *_part(shape), loops, nesting, shape.from_call)
            elif step == "message":
                assert isinstance(detail, list)
                entries = [self.cost(child, bound) for child in detail]
                loops, nesting = _worst([shape, *entries])
                shape = _Shape(shape.steps + sum(e.steps for e in entries) + 1, 1, 1, loops, nesting)
            else:
                assert isinstance(detail, tuple)
                name: str = detail[0]
                arguments: list[_Node] = detail[1]
                if name in _MACROS and arguments and all(a.kind == "ident" for a in arguments[:-1]):
                    shape = self.comprehension(name, shape, arguments, bound)
                else:
                    shape = self.function(name, shape, arguments, bound)
        return shape

    def comprehension(self, name: str, target: _Shape, arguments: list[_Node], bound: dict[str, _Shape]) -> _Shape:
        """`range.all(x, body)`, `range.map(x, filter, body)`, ...: the range's size times the body's cost."""
        names = [str(argument.value) for argument in arguments[:-1]]
        element = _Shape(1, *_part(target), from_call=target.from_call)
        inner_bound = {**bound, **dict.fromkeys(names[:1], element)}
        if len(names) > 1 and name != "map":  # two-variable forms: the index or key, then the value
            inner_bound[names[1]] = element
        bodies = [self.cost(argument, inner_bound) for argument in arguments[len(names[:1]) :]]
        body_steps = sum(body.steps for body in bodies) + 2
        loops = target.loops or target.from_call or any(body.loops for body in bodies)
        inner_nesting = max(bodies, key=lambda body: body.steps).nesting if bodies else ()
        nesting = (target.size, *inner_nesting)
        if target.steps > target.size * body_steps:
            nesting = target.nesting
        steps = target.steps + target.size * body_steps
        if name in ("map", "filter"):  # the list is built one element at a time, each time copied whole
            value = bodies[-1] if name == "map" else element
            copies = target.size * target.size / 2 * (1 if value.from_call else max(1, value.size * value.inner))
            inner = max(value.size, value.inner)
            return _Shape(steps + copies, target.size, inner, loops, nesting, value.from_call)
        return _Shape(steps, 1, 1, loops, nesting)

    def function(self, name: str, target: _Shape | None, arguments: list[_Node], bound: dict[str, _Shape]) -> _Shape:
        parts = [self.cost(argument, bound) for argument in arguments]
        every = [*([target] if target is not None else []), *parts]
        loops, nesting = _worst(every)
        steps = sum(part.steps for part in every) + 1
        sizes = sum(part.size for part in every)
        if name == "matches":
            pattern = arguments[-1] if arguments else None
            literal = pattern is not None and pattern.kind == "str"
            pattern_cost = _pattern_cost(str(pattern.value)) if literal and pattern is not None else _UNKNOWN_PATTERN
            return _Shape(steps + sizes + pattern_cost, 1, 1, loops, nesting)
        if name in _SCALAR_FUNCTIONS:
            return _Shape(steps + sizes, 1, 1, loops, nesting)
        if name in ("string", "bytes", "dyn"):
            one = every[0] if every else _Shape(1)
            return _Shape(steps + sizes, one.size + 20, one.inner, loops, nesting, one.from_call)
        inner = max([1.0, *(max(part.size, part.inner) for part in every)])
        return _Shape(steps + 2 * sizes, max(1, sizes), inner, loops, nesting, any(p.from_call for p in every))


# --- regular expressions ----------------------------------------------------------------------

_UNKNOWN_PATTERN = CALL_DATA_SIZE * 5_000
"""A pattern that is not a literal (from the call): as many Unicode classes as it may have characters."""
_CLASS_COST = {"w": 5000, "W": 5000, "p": 5000, "P": 5000, "d": 800, "D": 800, "s": 500, "S": 500, "b": 150, "B": 150}
"""Steps to compile a Unicode class (`\\w` is ~270 µs in the Rust regex crate; a plain character ~0.1 µs)."""
_REPEAT = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _pattern_cost(pattern: str) -> float:
    """Steps to compile `pattern`: its atoms' costs, a counted repetition multiplying what it repeats."""
    frames: list[list[float]] = [[]]
    at = 0
    while at < len(pattern):
        char = pattern[at]
        atom: float | None = None
        if char == "\\" and at + 1 < len(pattern):
            letter = pattern[at + 1]
            atom = _CLASS_COST.get(letter, 2)
            at += 2
            if letter in "pP" and at < len(pattern) and pattern[at] == "{":
                at = pattern.find("}", at) + 1 or len(pattern)
            frames[-1].append(atom)
            continue
        if char == "[":
            end = at + 1
            atom = 2
            while end < len(pattern) and (pattern[end] != "]" or end == at + 1):
                if pattern[end] == "\\" and end + 1 < len(pattern):
                    atom += _CLASS_COST.get(pattern[end + 1], 2)
                    end += 1
                end += 1
            frames[-1].append(atom)
            at = end + 1
            continue
        if char == "(":
            frames.append([])
            if pattern.startswith("(?", at):
                flags = re.match(r"\(\?([a-zA-Z-]*)", pattern[at:])
                if flags is not None and "i" in flags.group(1):
                    frames[-1].append(500)
        elif char == ")" and len(frames) > 1:
            group = sum(frames.pop())
            frames[-1].append(group)
        elif char == "{":
            repeat = _REPEAT.match(pattern, at)
            if repeat is not None and frames[-1]:
                times = max(int(repeat.group(1)), int(repeat.group(2) or 0))
                frames[-1][-1] *= max(1, times)
                at = repeat.end()
                continue
            frames[-1].append(2)
        elif char == ".":
            frames[-1].append(500)
        elif char not in "*+?|^$":
            frames[-1].append(2)
        at += 1
    while len(frames) > 1:
        group = sum(frames.pop())
        frames[-1].append(group)
    total = 50 + sum(frames[0])
    return total if math.isfinite(total) else float("inf")
