"""Read a function's docstring into a tool description and per-parameter descriptions.

Parsing is delegated to `docstring_parser`; this module only picks the style (Google,
NumPy or Sphinx, detected from the text unless given) and decides what the model reads:
the main text plus any Returns section, without the parameter sections. A docstring made
only of sections reads as pydantic-ai's does: parameter descriptions, and the Returns
section in pydantic-ai's `<returns>` form.
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
    r"^[ \t]*(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|"
    r"Keyword Args|Keyword Arguments|Examples?|Attributes|Note|Notes):[ \t]*\n[ \t]+\S",
    re.M,
)
"""A Google section header followed by an indented line; without the indent it is plain text."""
_PLACEHOLDER_SUMMARY = "-\n\n"
"""Put before a docstring that starts with a section, which `docstring_parser` cannot parse."""


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
    starts_with_section = style == "google" and _GOOGLE_SECTION.match(text) is not None
    try:
        parsed = docstring_parser.parse(_PLACEHOLDER_SUMMARY + text if starts_with_section else text, _STYLES[style])
    except docstring_parser.ParseError:
        return ParsedDocstring(description=text)

    summary = None if starts_with_section else parsed.short_description
    main = "\n\n".join(part for part in (summary, parsed.long_description) if part)
    return ParsedDocstring(description=_with_returns(main, parsed.returns), parameters=_parameters(parsed))


def _with_returns(main: str, returns: docstring_parser.DocstringReturns | None) -> str:
    """The main text and the Returns section; alone, the section reads as pydantic-ai writes it."""
    if returns is None or not returns.description:
        return main
    if not main:
        kind = f"<type>{returns.type_name}</type>\n" if returns.type_name else ""
        return f"<returns>\n{kind}<description>{returns.description}</description>\n</returns>"
    kind = f"{returns.type_name}: " if returns.type_name else ""
    return f"{main}\n\nReturns:\n{kind}{returns.description}"


def _parameters(parsed: docstring_parser.Docstring) -> dict[str, str]:
    """Descriptions by parameter name; `*args` may be documented as `*args`, and the first one wins."""
    parameters: dict[str, str] = {}
    for param in parsed.params:
        if param.description:
            parameters.setdefault(param.arg_name.lstrip("*"), param.description.strip())
    return parameters
