"""PostgreSQL functions for the hot path: a claim, a run's write or a decision is one statement.

Each was a pipeline of five to ten statements plus BEGIN and COMMIT, and the client's cost
per statement dominated a resume. Each is now one call in autocommit mode to a function
that makes the same checks, guarded updates, inserts, audit appends and wake-ups as the
SQLAlchemy path does on SQLite (`Transaction.apply`, `DecisionOps._apply`):

- `approvals_claim(p)`: lease the oldest ready run, commit its approved calls as
  executing, return its history and the verdicts it has to act on; or report a run whose
  worker's lease expired (`approvals_stale_lease`), for the caller to recover;
- `approvals_run_write(p)`: a worker's write to the run it holds (a `RunWrite`);
- `approvals_decide(p)`: one reviewer's verdict on one call.

The audit chain stays the same: `approvals_event_content` builds the canonical JSON that
Python's `event_content` builds (sorted keys, no spaces, strings escaped as `json.dumps`
escapes them), so `verify_audit_chain` checks events from either path. A test holds the
two to the same output.

Errors a caller must tell apart carry their own SQLSTATE: AP001 (the worker does not hold
the run; DETAIL is the run's status, empty when there is no run), AP002 (a call to execute
is not approved), AP404 (no such call) and AP409 (the call cannot take the verdict; DETAIL
is its state as JSON, for the caller to say why).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 07:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

AUDIT_LOCK_KEY = 7_310_512_001  # approvals.store.audit.AUDIT_LOCK_KEY; a migration keeps its own copy

EVENT_CONTENT = r"""
-- STABLE, not IMMUTABLE, as to_json is: only then is it inlined into its callers rather than planned per call
CREATE FUNCTION approvals_event_content(
    p_at text, p_actor text, p_action text, p_subject_type text, p_subject_id text,
    p_run_id text, p_agent_name text, p_tool_name text, p_details text
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT '{"action":' || to_json(p_action)::text
        || ',"actor":' || to_json(p_actor)::text
        || ',"agent_name":' || coalesce(to_json(p_agent_name)::text, 'null')
        || ',"at":' || to_json(p_at)::text
        || ',"details":' || coalesce(p_details, 'null')
        || ',"run_id":' || coalesce(to_json(p_run_id)::text, 'null')
        || ',"subject_id":' || to_json(p_subject_id)::text
        || ',"subject_type":' || to_json(p_subject_type)::text
        || ',"tool_name":' || coalesce(to_json(p_tool_name)::text, 'null')
        || '}'
$$
"""

AUDIT_HEAD = f"""
CREATE FUNCTION approvals_audit_head() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    -- held until commit: appends to the chain are serialized, and the head read after it is current
    PERFORM pg_advisory_xact_lock({AUDIT_LOCK_KEY});
    RETURN coalesce((SELECT hash FROM audit_events ORDER BY id DESC LIMIT 1), repeat('0', 64));
END
$$
"""

AUDIT_APPEND = r"""
CREATE FUNCTION approvals_audit_append(
    p_head text, p_at timestamptz, p_at_text text, p_actor text, p_run_id text, p_agent_name text, p_event jsonb
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_hash text := encode(sha256(convert_to(p_head || approvals_event_content(
        p_at_text, p_actor, p_event->>'action', p_event->>'subject_type', p_event->>'subject_id',
        p_run_id, p_agent_name, p_event->>'tool_name', p_event->>'details_text'), 'UTF8')), 'hex');
BEGIN
    INSERT INTO audit_events
        (at, actor, action, subject_type, subject_id, run_id, agent_name, tool_name, details, prev_hash, hash)
    VALUES (p_at, p_actor, p_event->>'action', p_event->>'subject_type', p_event->>'subject_id', p_run_id,
            p_agent_name, p_event->>'tool_name', p_event->'details', p_head, v_hash);
    RETURN v_hash;
END
$$
"""

RUN_WRITE = r"""
CREATE FUNCTION approvals_run_write(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
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

    -- calls marked executing that never ran (the run failed first): approved again, their approvals standing
    IF p ? 'released' THEN
        WITH moved AS (
            UPDATE tool_calls SET status = 'approved', updated_at = v_now
            WHERE run_id = v_run AND status = 'executing'
              AND tool_call_id IN (SELECT jsonb_array_elements_text(p->'released'->'tool_call_ids'))
            RETURNING id, tool_name
        ), restored AS (
            UPDATE decisions SET consumed_at = NULL WHERE call_id IN (SELECT id FROM moved)
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

STALE_LEASE = r"""
CREATE FUNCTION approvals_stale_lease(p_now timestamptz, p_only text, p_agents text[]) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT id FROM runs
    WHERE status = 'resuming' AND lease_expires_at < p_now
      AND (p_only IS NULL OR id = p_only) AND (p_agents IS NULL OR agent_name = ANY(p_agents))
    ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED
$$
"""

CLAIM = r"""
CREATE FUNCTION approvals_claim(p jsonb) RETURNS TABLE (
    claim_kind text, claimed_id text, claimed_agent text, claimed_prompt text, claimed_deps jsonb, claimed_count int,
    history jsonb, history_versions int[], decided_calls jsonb, executing text[]
) LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
    v_events jsonb;
    r record;
    v_worker text := p->>'worker_id';
    v_at text := p->>'now';
    v_now timestamptz := (p->>'now')::timestamptz;
    v_only text := p->>'run_id';
    v_agents text[] := CASE WHEN p ? 'agents' THEN ARRAY(SELECT jsonb_array_elements_text(p->'agents')) END;
    v_head text;
    v_looked boolean := false;
BEGIN
    -- (SET enable_bitmapscan = off, above: a planner without statistics, as on a new database or one
    -- without autovacuum, would read every ready run and sort them to find the oldest, once per claim)
    -- a run whose worker's lease expired: when asked to look (`recover`), or when nothing is ready.
    -- Looking costs a scan of every lease, old versions included until vacuum, so callers ration it.
    IF coalesce((p->>'recover')::boolean, true) THEN
        claimed_id := approvals_stale_lease(v_now, v_only, v_agents);
        IF claimed_id IS NOT NULL THEN  -- settling what its dead worker left takes the careful path
            claim_kind := 'stale';
            RETURN NEXT;
            RETURN;
        END IF;
        v_looked := true;
    END IF;
    WITH ready AS (
        SELECT id FROM runs
        WHERE status = 'ready' AND (v_only IS NULL OR id = v_only) AND (v_agents IS NULL OR agent_name = ANY(v_agents))
        ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED
    )
    UPDATE runs SET status = 'resuming', lease_owner = v_worker,
        lease_expires_at = (p->>'lease_expires_at')::timestamptz, updated_at = v_now
    FROM ready WHERE runs.id = ready.id
    RETURNING runs.id, runs.agent_name, runs.prompt, runs.deps, runs.message_count
    INTO claimed_id, claimed_agent, claimed_prompt, claimed_deps, claimed_count;
    IF NOT FOUND THEN
        claimed_id := CASE WHEN NOT v_looked THEN approvals_stale_lease(v_now, v_only, v_agents) END;
        IF claimed_id IS NOT NULL THEN
            claim_kind := 'stale';
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;
    claim_kind := 'claimed';
    -- what the worker needs to continue: the history and the verdicts to act on
    SELECT jsonb_agg(data ORDER BY seq), array_agg(format_version ORDER BY seq) INTO history, history_versions
    FROM messages WHERE run_id = claimed_id;
    SELECT jsonb_agg(jsonb_build_object(
        'id', id, 'tool_call_id', tool_call_id, 'status', status, 'args_digest', args_digest,
        'override_args', override_args, 'denial_reason', denial_reason, 'answer', answer))
    INTO decided_calls
    FROM tool_calls WHERE run_id = claimed_id AND status IN ('approved', 'denied', 'expired', 'answered');
    -- the approved calls run next: committed as executing before any of them runs, approvals consumed
    WITH moved AS (
        UPDATE tool_calls SET status = 'executing', updated_at = v_now
        WHERE run_id = claimed_id AND status = 'approved'
        RETURNING id, tool_call_id, tool_name, coalesce(override_digest, args_digest) AS digest
    ), consumed AS (
        UPDATE decisions SET consumed_at = v_now WHERE call_id IN (SELECT id FROM moved) AND consumed_at IS NULL
    )
    SELECT coalesce(array_agg(tool_call_id), '{}'), coalesce(jsonb_agg(jsonb_build_object(
        'action', 'call.executing', 'subject_type', 'call', 'subject_id', id, 'tool_name', tool_name,
        'details', jsonb_build_object('args_digest', digest),
        'details_text', '{"args_digest":' || to_json(digest)::text || '}')), '[]')
    INTO executing, v_events FROM moved;
    v_head := approvals_audit_head();
    v_events := jsonb_build_array(jsonb_build_object(
        'action', 'run.resumed', 'subject_type', 'run', 'subject_id', claimed_id)) || v_events;
    FOR r IN SELECT e FROM jsonb_array_elements(v_events) WITH ORDINALITY AS t(e, o) ORDER BY o LOOP
        v_head := approvals_audit_append(v_head, v_now, v_at, v_worker, claimed_id, claimed_agent, r.e);
    END LOOP;
    PERFORM pg_notify('approvals_runs', claimed_id);
    RETURN NEXT;
END
$$
"""

DECIDE = r"""
CREATE FUNCTION approvals_decide(p jsonb) RETURNS SETOF tool_calls LANGUAGE plpgsql AS $$
DECLARE
    v_call_id text := p->>'call_id';
    v_actor text := p->>'actor';
    v_kind text := p->>'verdict';
    v_at text := p->>'now';
    v_now timestamptz := (p->>'now')::timestamptz;
    c tool_calls;
    v_started_by text;
    v_current text;
    v_digest text;
    v_approvals int := 1;
    v_settles boolean;
    v_event jsonb;
    v_head text;
    v_ready text;
BEGIN
    -- the run first, then the call: the order every writer takes them in, so none waits for another in a cycle;
    -- holding the run serializes the decisions on its calls (the last one decided sees all the others)
    PERFORM 1 FROM runs WHERE id = (SELECT run_id FROM tool_calls WHERE id = v_call_id) FOR UPDATE;
    SELECT * INTO c FROM tool_calls WHERE id = v_call_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'No call %', v_call_id USING ERRCODE = 'AP404';
    END IF;
    SELECT started_by INTO v_started_by FROM runs WHERE id = c.run_id;
    v_current := coalesce(c.override_digest, c.args_digest);
    -- the rules of approvals.store.decisions._check_decidable; the caller words the refusal
    IF c.status NOT IN ('pending', 'outcome_unknown') OR (v_kind IN ('approve', 'edit') AND (
            (p->>'seen_digest' IS NOT NULL AND p->>'seen_digest' <> v_current) OR v_started_by = v_actor)) THEN
        RAISE EXCEPTION 'Call % cannot take this verdict', v_call_id USING ERRCODE = 'AP409', DETAIL = jsonb_build_object(
            'status', c.status, 'decided_by', c.decided_by, 'args_digest', c.args_digest,
            'override_digest', c.override_digest, 'started_by', v_started_by)::text;
    END IF;

    IF v_kind IN ('deny', 'answer') THEN  -- settles the call at once, whatever the quorum
        INSERT INTO decisions (call_id, actor, verdict, reason, answer, args_digest, created_at)
        VALUES (v_call_id, v_actor, v_kind, p->>'reason', CASE WHEN v_kind = 'answer' THEN p->'answer' END,
                v_current, v_now);
        UPDATE tool_calls SET
            status = CASE v_kind WHEN 'deny' THEN 'denied' ELSE 'answered' END,
            verdict = v_kind, decided_by = v_actor, decided_at = v_now, updated_at = v_now,
            denial_reason = CASE WHEN v_kind = 'deny' THEN p->>'reason' ELSE denial_reason END,
            answer = CASE WHEN v_kind = 'answer' THEN p->'answer' ELSE answer END
        WHERE id = v_call_id RETURNING * INTO c;
        v_event := CASE WHEN v_kind = 'deny'
            THEN jsonb_build_object('action', 'call.denied', 'details', jsonb_build_object('reason', p->>'reason'),
                                    'details_text', '{"reason":' || to_json(p->>'reason')::text || '}')
            ELSE jsonb_build_object('action', 'call.answered', 'details', jsonb_build_object('answer', p->'answer'),
                                    'details_text', '{"answer":' || (p->>'answer_text') || '}')
        END;
    ELSE
        v_digest := CASE WHEN v_kind = 'edit' THEN p->>'edited_digest' ELSE v_current END;
        INSERT INTO decisions (call_id, actor, verdict, args_digest, edited_args, created_at)
        VALUES (v_call_id, v_actor, v_kind, v_digest, CASE WHEN v_kind = 'edit' THEN p->'edited_args' END, v_now);
        IF c.approvals_required > 1 THEN  -- a quorum: distinct approvers of these arguments
            SELECT count(DISTINCT actor) INTO v_approvals FROM decisions
            WHERE call_id = v_call_id AND verdict IN ('approve', 'edit') AND args_digest = v_digest
              AND consumed_at IS NULL;
        END IF;
        v_settles := v_approvals >= c.approvals_required;
        UPDATE tool_calls SET
            override_args = CASE WHEN v_kind = 'edit' THEN p->'edited_args' ELSE override_args END,
            override_digest = CASE WHEN v_kind = 'edit' THEN v_digest ELSE override_digest END,
            status = CASE WHEN v_settles THEN 'approved' ELSE status END,
            verdict = CASE WHEN v_settles THEN v_kind ELSE verdict END,
            decided_by = CASE WHEN v_settles THEN v_actor ELSE decided_by END,
            decided_at = CASE WHEN v_settles THEN v_now ELSE decided_at END,
            updated_at = v_now
        WHERE id = v_call_id RETURNING * INTO c;
        v_event := jsonb_build_object(
            'action', CASE WHEN v_kind = 'edit' THEN 'call.edited' ELSE 'call.approved' END,
            'details', jsonb_build_object('args_digest', v_digest, 'approvals', v_approvals,
                                          'required', c.approvals_required)
                       || CASE WHEN v_kind = 'edit' THEN jsonb_build_object('edited_args', p->'edited_args')
                               ELSE '{}' END,
            'details_text', '{"approvals":' || v_approvals || ',"args_digest":' || to_json(v_digest)::text
                || CASE WHEN v_kind = 'edit' THEN ',"edited_args":' || (p->>'edited_text') ELSE '' END
                || ',"required":' || c.approvals_required || '}');
    END IF;

    -- a paused run whose calls are all decided becomes ready
    IF c.status NOT IN ('pending', 'outcome_unknown') THEN
        UPDATE runs SET status = 'ready', updated_at = v_now
        WHERE id = c.run_id AND status = 'awaiting_approval'
          AND NOT EXISTS (SELECT 1 FROM tool_calls WHERE run_id = c.run_id AND status IN ('pending', 'outcome_unknown'))
        RETURNING id INTO v_ready;
    END IF;
    v_head := approvals_audit_head();
    v_head := approvals_audit_append(v_head, v_now, v_at, v_actor, c.run_id, c.agent_name,
        v_event || jsonb_build_object('subject_type', 'call', 'subject_id', c.id, 'tool_name', c.tool_name));
    PERFORM pg_notify('approvals_pending', c.run_id);
    IF v_ready IS NOT NULL THEN
        PERFORM approvals_audit_append(v_head, v_now, v_at, 'system', c.run_id, c.agent_name,
            jsonb_build_object('action', 'run.ready', 'subject_type', 'run', 'subject_id', c.run_id));
        PERFORM pg_notify('approvals_ready', c.run_id);
        PERFORM pg_notify('approvals_runs', c.run_id);
    END IF;
    RETURN NEXT c;
END
$$
"""

FUNCTIONS = ("approvals_claim(jsonb)", "approvals_decide(jsonb)", "approvals_run_write(jsonb)")
HELPERS = (
    "approvals_audit_append(text, timestamptz, text, text, text, text, jsonb)",
    "approvals_audit_head()",
    "approvals_event_content(text, text, text, text, text, text, text, text, text)",
    "approvals_stale_lease(timestamptz, text, text[])",
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for statement in (EVENT_CONTENT, AUDIT_HEAD, AUDIT_APPEND, RUN_WRITE, STALE_LEASE, CLAIM, DECIDE):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for signature in (*FUNCTIONS, *HELPERS):
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
