"""XSS payloads, and an agent whose scripted model puts them everywhere a reviewer looks.

Each payload calls `alert(N)` if it ever runs; the browser test counts dialogs. They cover
script tags, event handlers, `javascript:` URLs, SVG and MathML, template syntax, htmx
attributes (`hx-get`, `hx-on`), attribute and element breakouts and encodings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from approvals import Agent, Tool
from approvals.engines.native.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from approvals.engines.native.models import AgentInfo, FunctionModel

PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "<svg onload=alert(3)>",
    "<svg><script>alert(4)</script></svg>",
    '"><script>alert(5)</script>',
    "'><img src=x onerror=alert(6)>",
    "<body onload=alert(7)>",
    '<iframe src="javascript:alert(8)"></iframe>',
    '<iframe srcdoc="<script>parent.alert(9)</script>"></iframe>',
    "<details open ontoggle=alert(10)>",
    "<input autofocus onfocus=alert(11)>",
    "<video><source onerror=alert(12)></video>",
    "<audio src=x onerror=alert(13)>",
    "<marquee onstart=alert(14)>",
    '<object data="javascript:alert(15)"></object>',
    '<embed src="javascript:alert(16)">',
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(17)>",
    '<div hx-get="/" hx-trigger="load" hx-on::after-request="alert(18)">x</div>',
    '<div hx-on:htmx:load="alert(19)">x</div>',
    '<img hx-on::load="alert(20)" src="/static/style.css">',
    "{{7*7}}<img src=x onerror=alert(21)>",
    "${alert(22)}<img src=x onerror=alert(22)>",
    "</textarea><script>alert(23)</script>",
    "</title><script>alert(24)</script>",
    "</pre><img src=x onerror=alert(25)>",
    '" onmouseover="alert(26)" autofocus onfocus="alert(26)" x="',
    "' onfocus='alert(27)' autofocus='",
    "<style>*{}</style><img src=x onerror=alert(28)>",
    '<meta http-equiv="refresh" content="0;url=javascript:alert(29)">',
    '<img src="x" onerror="&#97;lert(30)">',
    '<img src=x onerror=eval(atob("YWxlcnQoMzEp"))>',
    "<svg><animate onbegin=alert(32) attributeName=x dur=1s>",
    '<svg><a xlink:href="javascript:alert(33)"><text x="20" y="20">x</text></a></svg>',
    "<script src=data:text/javascript,alert(34)></script>",
    "<img srcset=x onerror=alert(35)>",
    "<scr<script>ipt>alert(36)</script>",
    "<SCRIPT>alert(37)</SCRIPT>",
    "<img src=x:alert(38) onerror=eval(src)>",
    "<svg/onload=alert(39)>",
    '<a href="javascript:alert(40)" id="xss40">click</a>',
    '<noscript><p title="</noscript><img src=x onerror=alert(41)>">',
    "<select autofocus onfocus=alert(42)></select>",
    "<template><img src=x onerror=alert(43)></template><img src=x onerror=alert(43)>",
    "javascript:alert(44)",
]
"""Each one calls alert(N), N its number, if it runs."""


def echo(text: str) -> str:
    """Say it back: its result shows the payloads as a tool's output."""
    return text


def gate(text: str) -> str:
    """A call a person decides: approved, denied or answered in the test."""
    return text


def _script(messages: Sequence[ModelRequest | ModelResponse], info: AgentInfo) -> ModelResponse:
    joined = "\n".join(PAYLOADS)
    if any(isinstance(p, ToolReturnPart) and p.tool_name == "gate" for m in messages for p in m.parts):
        return ModelResponse(parts=[TextPart(content="Finished:\n" + joined)])
    return ModelResponse(
        parts=[
            TextPart(content=joined),
            ToolCallPart(tool_name="echo", args={"text": joined}, tool_call_id="echo"),
            ToolCallPart(tool_name="<img src=x onerror=alert(99)>", args={"x": joined}, tool_call_id="odd"),
            *(
                ToolCallPart(tool_name="gate", args={"text": f"{n}: {joined}"}, tool_call_id=f"gate{n}")
                for n in range(3)
            ),
        ]
    )


xss_agent: Agent[Any] = Agent(
    FunctionModel(_script, model_name="xss-scripted"),
    name="xss",
    tools=[Tool(echo), Tool(gate, requires_approval=True)],
)
