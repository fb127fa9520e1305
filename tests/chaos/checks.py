"""The promises, held up against what the database stored and what the tools' execution log recorded.

- no run lost or stuck: every run the driver started exists and completed, and holds no lease;
- no call executed twice: a non-idempotent call ran at most once, a `succeeded` call exactly
  once (an idempotent one at least once: a crash may retry it), a denied call never, an
  answered one only if it was `outcome_unknown` first, and each stored result is the nonce
  of an execution the log recorded;
- no gap: a run's message sequence numbers are 0..n-1 with n its message count, and each
  step is stored whole (every tool call of a model response gets exactly one result before
  the next response, and the run has all the script's steps);
- the audit chain verifies.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from approvals.engines.native.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    ToolDeniedPart,
    ToolReturnPart,
    UserPromptPart,
)
from approvals.store import Store
from approvals.store.models import AuditEventRow, MessageRow, RunRow, ToolCallRow

from .agent import APPROVAL_TOOLS, IDEMPOTENT_TOOLS, SCRIPT, Execution, read_executions

FINAL_CALL_STATUSES = frozenset({"succeeded", "denied", "answered"})


@dataclass
class Findings:
    """Broken promises (empty when all held) and counts worth reporting."""

    problems: list[str] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)


async def check_promises(store: Store, run_ids: Sequence[str], log_path: Path) -> Findings:
    """Check every promise over the whole database and the execution log."""
    found = Findings()
    async with store.db.read() as session:
        runs = {run.id: run for run in (await session.scalars(select(RunRow))).all()}
        seqs: dict[str, list[int]] = defaultdict(list)
        for run_id, seq in await session.execute(
            select(MessageRow.run_id, MessageRow.seq).order_by(MessageRow.run_id, MessageRow.seq)
        ):
            seqs[run_id].append(seq)
        calls = list((await session.scalars(select(ToolCallRow))).all())
        actions = Counter((await session.scalars(select(AuditEventRow.action))).all())
        unknown = set(
            (
                await session.scalars(
                    select(AuditEventRow.subject_id).where(AuditEventRow.action == "call.outcome_unknown")
                )
            ).all()
        )
    executions: dict[tuple[str, str], list[Execution]] = {}
    for execution in read_executions(log_path):
        executions.setdefault((execution.run_id, execution.tool_call_id), []).append(execution)

    problem = found.problems.append
    for run_id in run_ids:
        if run_id not in runs:
            problem(f"run {run_id}: lost (the driver started it; the database has no such run)")
    for run_id, run in runs.items():
        if run.status != "completed":
            problem(f"run {run_id}: {run.status}, not completed (error: {run.error})")
        if run.lease_owner is not None or run.lease_expires_at is not None:
            problem(f"run {run_id}: still leased to {run.lease_owner} until {run.lease_expires_at}")
        if seqs[run_id] != list(range(run.message_count)):
            problem(f"run {run_id}: message seqs {seqs[run_id]}, expected 0..{run.message_count - 1}")

    calls_by_key = {(call.run_id, call.tool_call_id): call for call in calls}
    asked: set[tuple[str, str]] = set()
    for call in calls:
        if call.status not in FINAL_CALL_STATUSES:
            problem(f"run {call.run_id}: call {call.tool_call_id} ({call.tool_name}) left {call.status}")
    for run_id in runs:
        history = await store.runs.load_history(run_id)
        found.problems.extend(f"run {run_id}: {p}" for p in history_problems(history))
        for message in history:
            if isinstance(message, ModelResponse):
                for part in message.tool_calls:
                    asked.add((run_id, part.tool_call_id))
                    if part.tool_name in APPROVAL_TOOLS and (run_id, part.tool_call_id) not in calls_by_key:
                        problem(f"run {run_id}: call {part.tool_call_id} ({part.tool_name}) has no stored call row")
            elif isinstance(message, ModelRequest):
                for result in message.parts:
                    if isinstance(result, ToolReturnPart) and result.source == "tool":
                        found.problems.extend(
                            result_problems(
                                run_id, result, executions.get((run_id, result.tool_call_id), []), calls_by_key
                            )
                        )

    for (run_id, tool_call_id), ran in executions.items():
        tool = ran[0].tool
        found.stats["executions"] += len(ran)
        if len(ran) > 1:
            found.stats[f"calls run more than once ({'idempotent ' if tool in IDEMPOTENT_TOOLS else ''}{tool})"] += 1
        if tool not in IDEMPOTENT_TOOLS and len(ran) > 1:
            pids = ", ".join(str(e.pid) for e in ran)
            problem(f"run {run_id}: call {tool_call_id} ({tool}) executed {len(ran)} times (pids {pids})")
        if (run_id, tool_call_id) not in asked:
            problem(f"run {run_id}: call {tool_call_id} ({tool}) executed, but no stored model response asked for it")
        row = calls_by_key.get((run_id, tool_call_id))
        if tool in APPROVAL_TOOLS and row is None:
            problem(f"run {run_id}: call {tool_call_id} ({tool}) executed but was never a stored call")
        if row is not None and row.status == "denied":
            problem(f"run {run_id}: call {tool_call_id} ({tool}) was denied, yet executed {len(ran)} times")
        if row is not None and row.status == "answered" and row.id not in unknown:
            problem(f"run {run_id}: call {tool_call_id} ({tool}) was answered instead of run, yet executed")
    for call in calls:
        ran = executions.get((call.run_id, call.tool_call_id), [])
        found.stats[f"calls {call.status}"] += 1
        if call.status == "succeeded":
            if not ran:
                problem(f"run {call.run_id}: call {call.tool_call_id} ({call.tool_name}) succeeded but never executed")
            elif call.result not in {f"{e.tool}:{e.nonce}" for e in ran}:
                problem(
                    f"run {call.run_id}: call {call.tool_call_id} ({call.tool_name}) stored result {call.result!r}, "
                    f"which no execution returned ({[e.nonce for e in ran]})"
                )

    found.stats["runs"] = len(runs)
    for action in ("run.resumed", "call.outcome_unknown", "call.retried", "call.released"):
        found.stats[f"audit {action}"] = actions[action]
    verification = await store.audit.verify_audit()
    found.stats["audit events"] = verification.checked
    if not verification.ok:
        problem(f"audit chain broken at event {verification.first_bad_id}: {verification.problem}")
    return found


def result_problems(
    run_id: str,
    result: ToolReturnPart,
    ran: list[Execution],
    calls: dict[tuple[str, str], ToolCallRow],
) -> list[str]:
    """A tool result in the history must be what one logged execution returned, and match its stored call."""
    problems = []
    if result.content not in {f"{e.tool}:{e.nonce}" for e in ran}:
        problems.append(
            f"run {run_id}: result of {result.tool_call_id} ({result.tool_name}) is {result.content!r}, "
            f"which no logged execution returned ({[e.nonce for e in ran]})"
        )
    call = calls.get((run_id, result.tool_call_id))
    if call is not None and call.result != result.content:
        problems.append(
            f"run {run_id}: call {result.tool_call_id} stored result {call.result!r}, history has {result.content!r}"
        )
    return problems


def history_problems(history: Sequence[ModelRequest | ModelResponse]) -> list[str]:
    """Each step whole: every call of a response answered exactly once before the next; all steps there."""
    problems: list[str] = []
    if not history or not isinstance(history[0], ModelRequest):
        return [f"history does not start with a request ({len(history)} messages)"]
    if not any(isinstance(part, UserPromptPart) for part in history[0].parts):
        problems.append("the first request has no prompt")
    responses = [i for i, m in enumerate(history) if isinstance(m, ModelResponse)]
    if len(responses) != len(SCRIPT) + 1:
        problems.append(f"{len(responses)} model responses, expected {len(SCRIPT) + 1}")
    for index, start in enumerate(responses):
        response = history[start]
        assert isinstance(response, ModelResponse)
        end = responses[index + 1] if index + 1 < len(responses) else len(history)
        if end == start + 1 and index + 1 < len(responses):
            problems.append(f"message {start}: two responses in a row")
        answered: Counter[str] = Counter()
        for message in history[start + 1 : end]:
            for part in message.parts:
                if isinstance(part, RetryPromptPart):
                    problems.append(f"message {start}: unexpected retry prompt {part.content!r}")
                if isinstance(part, ToolReturnPart | ToolDeniedPart | RetryPromptPart) and part.tool_call_id:
                    answered[part.tool_call_id] += 1
        asked = Counter(call.tool_call_id for call in response.tool_calls)
        if answered != asked:
            problems.append(f"message {start}: calls {dict(asked)} answered {dict(answered)}")
    last = history[-1]
    if not isinstance(last, ModelResponse) or last.tool_calls or not last.text.startswith("Done."):
        problems.append(f"the last message is not the final answer: {last!r}")
    return problems
