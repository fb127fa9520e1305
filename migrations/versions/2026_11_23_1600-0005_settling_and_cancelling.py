"""Settling calls whose outcome is unknown, and cancelling runs a worker holds (issue 13).

A reviewer could not decide a call twice with the same arguments: `decisions` had a unique
(call_id, actor, args_digest) constraint, so the reviewer who approved a call could neither
deny it later (a quorum call still pending) nor settle it once its outcome became unknown
(its worker died while it ran). What must stay unique is narrower: one *standing* approval
per reviewer and arguments, the approvals a quorum counts (`verdict` approve or edit, not
yet used up by running the call). The constraint becomes a partial unique index on those.

Releasing a call that never ran (`approvals_run_write`'s `released`) made every used-up
approval of the call stand again, those of earlier runs of it too; with the partial index
that would collide with the same reviewer's later approval. It now restores only the
approvals the latest start used up (they share its `consumed_at`).

Cancelling a run a worker holds needs no function change: every write of a worker checks
that the run is still `resuming` under its lease, so a cancelled run refuses it (AP001).

A downgrade fails where one reviewer has several decisions with the same arguments on a
call, which the old constraint cannot hold; nothing is deleted to make it fit.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 16:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STANDING_APPROVAL = "verdict IN ('approve', 'edit') AND consumed_at IS NULL"  # models.STANDING_APPROVAL; our own copy
DECISION_COLUMNS = ["call_id", "actor", "args_digest"]

RUN_WRITE = r"""
CREATE OR REPLACE FUNCTION approvals_run_write(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_run text := p->>'run_id';
    v_worker text := p->>'worker_id';
    v_at text := p->>'now';
    v_now timestamptz := (p->>'now')::timestamptz;
    v_set jsonb := coalesce(p->'set', '{}');
    v_grow int := coalesce(jsonb_array_length(p->'messages'), 0);
    v_events jsonb := '[]';
    v_agent text;
    v_count int;
    v_status text;
    v_head text;
    v_wanted int;
    v_id text;
    v_tool text;
    r record;
BEGIN
    UPDATE runs SET
        message_count = message_count + v_grow,
        updated_at = v_now,
        status = CASE WHEN v_set ? 'status' THEN v_set->>'status' ELSE status END,
        output = CASE WHEN v_set ? 'output' THEN v_set->'output' ELSE output END,
        error = CASE WHEN v_set ? 'error' THEN v_set->>'error' ELSE error END,
        lease_owner = CASE WHEN v_set ? 'lease_owner' THEN v_set->>'lease_owner' ELSE lease_owner END,
        lease_expires_at = CASE WHEN v_set ? 'lease_expires_at'
                                THEN (v_set->>'lease_expires_at')::timestamptz ELSE lease_expires_at END
    WHERE id = v_run AND status = 'resuming' AND lease_owner = v_worker
    RETURNING agent_name, message_count INTO v_agent, v_count;
    IF NOT FOUND THEN
        SELECT status INTO v_status FROM runs WHERE id = v_run;
        RAISE EXCEPTION 'Worker % no longer holds run %', v_worker, v_run
            USING ERRCODE = 'AP001', DETAIL = coalesce(v_status, '');
    END IF;

    IF v_grow > 0 THEN
        INSERT INTO messages (run_id, seq, kind, format_version, data, created_at)
        SELECT v_run, v_count - v_grow + t.o::int - 1, t.m->>'kind', (p->>'format_version')::int, t.m->'data', v_now
        FROM jsonb_array_elements(p->'messages') WITH ORDINALITY AS t(m, o);
    END IF;

    IF p ? 'tool_definitions' THEN
        INSERT INTO tool_definitions (version, name, definition, created_at)
        SELECT d->>'version', d->>'name', d->'definition', v_now FROM jsonb_array_elements(p->'tool_definitions') AS d
        ON CONFLICT DO NOTHING;
    END IF;

    IF p ? 'calls' THEN
        INSERT INTO tool_calls (id, run_id, tool_call_id, agent_name, tool_name, tool_version, args, args_digest,
                                status, reason, approvals_required, idempotent, expires_at, created_at, updated_at)
        SELECT c.id, v_run, c.tool_call_id, v_agent, c.tool_name, c.tool_version, c.args, c.args_digest,
               'pending', c.reason, c.approvals_required, c.idempotent, c.expires_at, v_now, v_now
        FROM jsonb_to_recordset(p->'calls') AS c(
            id text, tool_call_id text, tool_name text, tool_version text, args jsonb, args_digest text,
            reason text, approvals_required int, idempotent boolean, expires_at timestamptz);
    END IF;

    IF p ? 'start_executing' THEN
        WITH moved AS (
            UPDATE tool_calls SET status = 'executing', updated_at = v_now
            WHERE run_id = v_run AND status = 'approved'
              AND tool_call_id IN (SELECT jsonb_array_elements_text(p->'start_executing'))
            RETURNING id, tool_name, coalesce(override_digest, args_digest) AS digest
        ), consumed AS (
            UPDATE decisions SET consumed_at = v_now WHERE call_id IN (SELECT id FROM moved) AND consumed_at IS NULL
        )
        SELECT coalesce(jsonb_agg(jsonb_build_object(
            'action', 'call.executing', 'subject_type', 'call', 'subject_id', id, 'tool_name', tool_name,
            'details', jsonb_build_object('args_digest', digest),
            'details_text', '{"args_digest":' || to_json(digest)::text || '}')), '[]')
        INTO v_events FROM moved;
        SELECT count(DISTINCT x) INTO v_wanted FROM jsonb_array_elements_text(p->'start_executing') AS x;
        IF jsonb_array_length(v_events) <> v_wanted THEN
            RAISE EXCEPTION 'Run %: not every call to execute is approved', v_run USING ERRCODE = 'AP002';
        END IF;
    END IF;

    -- executed calls: their results, by tool call id, for the calls still executing
    FOR r IN SELECT s->>'tool_call_id' AS tool_call_id, s->>'status' AS status, s->'result' AS result,
                    s->>'result_text' AS result_text
             FROM jsonb_array_elements(coalesce(p->'settle', '[]')) WITH ORDINALITY AS t(s, o) ORDER BY o LOOP
        UPDATE tool_calls SET status = r.status, result = nullif(r.result, 'null'), updated_at = v_now
        WHERE run_id = v_run AND tool_call_id = r.tool_call_id AND status = 'executing'
        RETURNING id, tool_name INTO v_id, v_tool;
        IF FOUND THEN
            v_events := v_events || jsonb_build_array(jsonb_build_object(
                'action', 'call.' || r.status, 'subject_type', 'call', 'subject_id', v_id, 'tool_name', v_tool,
                'details', jsonb_build_object('result', r.result), 'details_text', '{"result":' || r.result_text || '}'));
        END IF;
    END LOOP;

    -- calls marked executing that never ran (the run failed first): approved again, the approvals this start
    -- used up standing again; those an earlier start used up (before the outcome became unknown) stay used
    IF p ? 'released' THEN
        WITH moved AS (
            UPDATE tool_calls SET status = 'approved', updated_at = v_now
            WHERE run_id = v_run AND status = 'executing'
              AND tool_call_id IN (SELECT jsonb_array_elements_text(p->'released'->'tool_call_ids'))
            RETURNING id, tool_name
        ), restored AS (
            UPDATE decisions AS d SET consumed_at = NULL
            WHERE d.call_id IN (SELECT id FROM moved)
              AND d.consumed_at = (SELECT max(x.consumed_at) FROM decisions AS x WHERE x.call_id = d.call_id)
        )
        SELECT v_events || coalesce(jsonb_agg(jsonb_build_object(
            'action', 'call.released', 'subject_type', 'call', 'subject_id', id, 'tool_name', tool_name,
            'details', p->'released'->'details', 'details_text', p->'released'->>'details_text')), '[]')
        INTO v_events FROM moved;
    END IF;

    -- the run failed: the call that failed it is failed, the others caught mid-execution outcome_unknown
    IF p ? 'interrupted' THEN
        WITH moved AS (
            UPDATE tool_calls SET
                status = CASE WHEN tool_call_id = p->'interrupted'->>'failed_tool_call_id'
                              THEN 'failed' ELSE 'outcome_unknown' END,
                result = CASE WHEN tool_call_id = p->'interrupted'->>'failed_tool_call_id'
                              THEN p->'interrupted'->'error' END,
                updated_at = v_now
            WHERE run_id = v_run AND status = 'executing'
            RETURNING id, tool_name, status
        )
        SELECT v_events || coalesce(jsonb_agg(jsonb_build_object(
            'action', 'call.' || status, 'subject_type', 'call', 'subject_id', id, 'tool_name', tool_name,
            'details', jsonb_build_object('error', p->'interrupted'->'error'),
            'details_text', '{"error":' || (p->'interrupted'->>'error_text') || '}')), '[]')
        INTO v_events FROM moved;
    END IF;

    v_events := v_events || coalesce(p->'events', '[]');
    IF jsonb_array_length(v_events) > 0 THEN
        v_head := approvals_audit_head();
        FOR r IN SELECT e FROM jsonb_array_elements(v_events) WITH ORDINALITY AS t(e, o) ORDER BY o LOOP
            v_head := approvals_audit_append(v_head, v_now, v_at, v_worker, v_run, v_agent, r.e);
        END LOOP;
    END IF;
    PERFORM pg_notify(a->>0, a->>1) FROM jsonb_array_elements(coalesce(p->'announce', '[]')) AS a;
END
$$
"""


def _revision_0004() -> Any:
    """Migration 0004's module: a downgrade restores its function bodies as they are there."""
    script = op.get_context().script
    assert script is not None, "run through alembic's environment (approvals db upgrade)"
    return script.get_revision("0004").module


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch_op:
        batch_op.drop_constraint("uq_decisions_call_id_actor_args_digest", type_="unique")
        batch_op.create_index(
            "uq_decisions_standing_approval",
            DECISION_COLUMNS,
            unique=True,
            sqlite_where=sa.text(STANDING_APPROVAL),
            postgresql_where=sa.text(STANDING_APPROVAL),
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(RUN_WRITE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_revision_0004().RUN_WRITE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    with op.batch_alter_table("decisions") as batch_op:
        batch_op.drop_index("uq_decisions_standing_approval")
        batch_op.create_unique_constraint("uq_decisions_call_id_actor_args_digest", DECISION_COLUMNS)
