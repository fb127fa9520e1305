"""Our own agent framework, the `native` engine: `Agent`, tools and toolsets, models, messages.

`approvals` re-exports its public names (`from approvals import Agent, tool`). Runs of an
`Agent` are resumable: the worker continues them from the history stored in our message
format (`messages`), through `engine.NativeEngine`.
"""
