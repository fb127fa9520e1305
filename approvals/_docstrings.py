"""Read a function's docstring into a tool description and per-parameter descriptions.

Parsing is delegated to `docstring_parser`; this module only picks the style (Google,
NumPy or Sphinx, detected from the text unless given) and decides what the model reads:
the main text plus any Returns section, without the parameter sections.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Literal

import docstring_parser

DocstringFormat = Literal["auto", "google", "numpy", "sphinx"]

_STYLES: dict[str, docstring_parser.DocstringStyle] = {
    "google": docstring_parser.DocstringStyle.GOOGLE,
    "numpy": docstring_parser.DocstringStyle.NUMPYDOC,
    "sphinx": docstring_parser.DocstringStyle.REST,
}

_SPHINX_FIELD = re.compile(r"^\s*:(param|parameter|arg|argument|key|keyword|type|returns?|rtype|raises?)\b", re.M)
_NUMPY_SECTION = re.compile(r"^\s*(Parameters|Other Parameters|Returns|Yields|Raises|Examples)\s*\n\s*-{3,}\s*$", re.M)
_GOOGLE_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|"
    r"Keyword Args|Keyword Arguments|Examples?|Attributes|Note|Notes):\s*$",
    re.M,
)


@dataclass(frozen=True)
class ParsedDocstring:
    """What a docstring tells the model about a tool."""

    description: str
    """Main text, followed by the Returns section when there is one."""
    parameters: dict[str, str] = field(default_factory=dict)
    """Parameter name to its description."""


def detect_format(text: str) -> Literal["google", "numpy", "sphinx"]:
    """Guess the docstring style from its section markers; plain text counts as Google."""
    if _SPHINX_FIELD.search(text):
        return "sphinx"
    if _NUMPY_SECTION.search(text):
        return "numpy"
    return "google"


def parse_docstring(doc: str | None, fmt: DocstringFormat = "auto") -> ParsedDocstring:
    """Split a docstring into the tool description and the parameter descriptions."""
    if not doc or not doc.strip():
        return ParsedDocstring(description="")
    text = inspect.cleandoc(doc)
    style = detect_format(text) if fmt == "auto" else fmt
    if style == "google" and not _GOOGLE_SECTION.search(text):
        return ParsedDocstring(description=text)  # no sections: nothing to split off
    try:
        parsed = docstring_parser.parse(text, style=_STYLES[style])
    except docstring_parser.ParseError:
        return ParsedDocstring(description=text)

    main = [part for part in (parsed.short_description, parsed.long_description) if part]
    description = "\n\n".join(main)
    returns = parsed.returns
    if returns is not None and returns.description:
        kind = f"{returns.type_name}: " if returns.type_name else ""
        description = f"{description}\n\nReturns:\n{kind}{returns.description}".strip()
    parameters = {param.arg_name: param.description.strip() for param in parsed.params if param.description}
    return ParsedDocstring(description=description, parameters=parameters)
