-- The PostgreSQL functions of the hot path, version 2: the one copy, installed by migration 0011.
--
-- A claim and a worker's write to the run it holds are each one call to a function here, in
-- autocommit mode: the same guarded updates, inserts, audit appends and wake-ups that
-- `Transaction.apply` makes through SQLAlchemy on SQLite. Decisions are not here: they have
-- one implementation, in Python, on both databases.
--
-- Names carry the version, so workers of two releases can share a database during a deploy.
-- A released version is never edited: a change is a new file (hot_path_v3.sql) with new
-- names, installed by a new migration; the migration records this file's SHA-256 and a test
-- checks it. Status names are those of `approvals.store.states` (a test checks each one).
--
-- Errors a caller must tell apart carry their own SQLSTATE: AP001 (the worker does not hold
-- the run; DETAIL is the run's status, empty when there is no run), AP002 (a call to
-- execute is not approved).

-- STABLE, not IMMUTABLE, as to_json is: only then is it inlined into its callers rather than planned per call
CREATE FUNCTION approvals_event_content_v2(
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
;

CREATE FUNCTION approvals_audit_head_v2() RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    -- held until commit: appends to the chain are serialized, and the head read after it is current
    PERFORM pg_advisory_xact_lock(7310512001);
    RETURN coalesce((SELECT hash FROM audit_events ORDER BY id DESC LIMIT 1), repeat('0', 64));
END
$$
;

CREATE FUNCTION approvals_audit_append_v2(
    p_head text, p_at timestamptz, p_at_text text, p_actor text, p_run_id text, p_agent_name text, p_event jsonb
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_hash text := encode(sha256(convert_to(p_head || approvals_event_content_v2(
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
;

CREATE FUNCTION approvals_run_write_v2(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
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
        v_head := approvals_audit_head_v2();
        FOR r IN SELECT e FROM jsonb_array_elements(v_events) WITH ORDINALITY AS t(e, o) ORDER BY o LOOP
            v_head := approvals_audit_append_v2(v_head, v_now, v_at, v_worker, v_run, v_agent, r.e);
        END LOOP;
    END IF;
    PERFORM pg_notify(a->>0, a->>1) FROM jsonb_array_elements(coalesce(p->'announce', '[]')) AS a;
END
$$
;

CREATE FUNCTION approvals_stale_lease_v2(p_now timestamptz, p_only text, p_agents text[]) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT id FROM runs
    WHERE status = 'resuming' AND lease_expires_at < p_now
      AND (p_only IS NULL OR id = p_only) AND (p_agents IS NULL OR agent_name = ANY(p_agents))
    ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED
$$
;

CREATE FUNCTION approvals_claim_v2(p jsonb) RETURNS TABLE (
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
        claimed_id := approvals_stale_lease_v2(v_now, v_only, v_agents);
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
        claimed_id := CASE WHEN NOT v_looked THEN approvals_stale_lease_v2(v_now, v_only, v_agents) END;
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
    v_head := approvals_audit_head_v2();
    v_events := jsonb_build_array(jsonb_build_object(
        'action', 'run.resumed', 'subject_type', 'run', 'subject_id', claimed_id)) || v_events;
    FOR r IN SELECT e FROM jsonb_array_elements(v_events) WITH ORDINALITY AS t(e, o) ORDER BY o LOOP
        v_head := approvals_audit_append_v2(v_head, v_now, v_at, v_worker, claimed_id, claimed_agent, r.e);
    END LOOP;
    PERFORM pg_notify('approvals_runs', claimed_id);
    RETURN NEXT;
END
$$
;
