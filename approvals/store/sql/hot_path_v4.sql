-- The PostgreSQL functions of the hot path, version 4: installed by migration 0020.
--
-- A worker's write on PostgreSQL sends its statements, its audit appends and its COMMIT in
-- one pipeline with one sync, so a guard that does not hold has to stop the statements after
-- it in the server: `approvals_require_v4` raises when its condition is not true, with the
-- SQLSTATE that says which guard (AP001: the worker no longer holds the run; AP003: the rules
-- that decided the write's calls changed, DETAIL their revision). The client turns the error
-- into the one the store raises on SQLite (`LeaseLost`, `RulesChanged`). The rules themselves
-- stay in the statements both databases run (`run_sql`): this only says no.

CREATE FUNCTION approvals_require_v4(p_ok boolean, p_sqlstate text, p_message text, p_detail text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF p_ok IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = p_sqlstate, MESSAGE = p_message, DETAIL = coalesce(p_detail, '');
    END IF;
    RETURN true;
END
$$
;
