-- The PostgreSQL functions of the hot path, version 3: the one copy, installed by migration 0012.
--
-- A version holds the functions it changes; the others stay at the version that last changed
-- them (`approvals.store.hot_path_sql.FUNCTION_VERSIONS`), and this one calls them by their
-- names. Version 3 changes the claim: a worker says how many messages of which runs it
-- already holds (`known`), and the claim sends only the messages after those, so a resume
-- costs the same at any history length.
--
-- A released version is never edited: a change is a new file with new names, installed by a
-- new migration that records the file's SHA-256; a test checks it.

CREATE FUNCTION approvals_claim_v3(p jsonb) RETURNS TABLE (
    claim_kind text, claimed_id text, claimed_agent text, claimed_prompt text, claimed_deps jsonb, claimed_count int,
    history jsonb, history_versions int[], history_from int, decided_calls jsonb, executing text[]
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
    -- what the worker needs to continue: the history it does not hold yet, and the verdicts to act on.
    -- `known` says how many of a run's messages the worker holds (they never change: history is
    -- append-only); a count above what is stored (a restored database) sends everything.
    history_from := coalesce((p->'known'->>claimed_id)::int, 0);
    IF history_from > claimed_count THEN
        history_from := 0;
    END IF;
    SELECT jsonb_agg(data ORDER BY seq), array_agg(format_version ORDER BY seq) INTO history, history_versions
    FROM messages WHERE run_id = claimed_id AND seq >= history_from;
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
