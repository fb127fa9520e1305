"""`/metrics`: Prometheus metrics read from the database at scrape time, by a custom collector.

Every number comes from the database (`approvals.store.metrics_queries`: rollups that triggers
keep in the transactions of the writes, folded at scrape time), never from counters kept in a
process: any web process answers the same numbers, whatever number of web and worker
processes run, on however many hosts, and a scrape costs the same at any length of history.
`prometheus_client`'s multiprocess mode would need a directory shared by all processes and
breaks across hosts and restarts; the database already holds the truth. A database that
cannot be reached is `approvals_database_up 0` and nothing else, still answered 200, so the
scrape itself reports the outage.

Access (`metrics_access`): a bearer token whose scope includes `metrics:read` (an unscoped token of any
role too), or nothing with `APPROVALS_METRICS_PUBLIC=true`; while the database is down, a token this
process verified within the last hour still scrapes. Refusals are text/plain.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from approvals.engines.gate import API_ENGINES, HOOK_ENGINES
from approvals.store.audit_sinks import SinkLag, sink_lags
from approvals.store.errors import describe, is_transient
from approvals.store.metrics_queries import BUCKETS, Histogram, MetricsSnapshot, read_metrics

from .auth import app_context
from .metrics_access import metrics_refusal

logger = logging.getLogger("approvals.web.metrics")
router = APIRouter()
GATE_ENGINES = (*API_ENGINES, *HOOK_ENGINES)


class SnapshotCollector(Collector):
    """The metric families of one snapshot (None: the database could not be reached)."""

    def __init__(self, snapshot: MetricsSnapshot | None) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("approvals_database_up", "1 when the scrape reached the database")
        up.add_metric([], 0 if self.snapshot is None else 1)
        yield up
        s = self.snapshot
        if s is None:
            return
        pending = GaugeMetricFamily("approvals_pending_calls", "Calls waiting for a person", labels=["agent", "tool"])
        for agent, tool, count in s.pending:
            pending.add_metric([agent, tool], count)
        yield pending
        oldest = GaugeMetricFamily("approvals_oldest_pending_call_age_seconds", "Age of the oldest waiting call")
        oldest.add_metric([], s.oldest_pending_age)
        yield oldest
        decisions = CounterMetricFamily(
            "approvals_decisions", "Verdicts people gave (each quorum approval)", labels=["verdict", "channel"]
        )
        for verdict, channel, count in s.decisions:
            decisions.add_metric([verdict, channel], count)
        yield decisions
        yield _histogram(
            "approvals_decision_latency_seconds", "Call requested to settled by a person", s.decision_latency
        )
        rules = CounterMetricFamily("approvals_rule_decisions", "Calls decided by a rule", labels=["rule", "effect"])
        for rule, effect, count in s.rule_decisions:
            rules.add_metric([rule, effect], count)
        yield rules
        yield CounterMetricFamily("approvals_expired_calls", "Calls that expired undecided", value=s.expired)
        runs = GaugeMetricFamily("approvals_runs", "Runs by status", labels=["status"])
        for status, count in s.runs:
            runs.add_metric([status], count)
        yield runs
        failures = CounterMetricFamily("approvals_run_failures", "Failed runs by reason", labels=["reason"])
        for reason, count in sorted(s.failures.items()):
            failures.add_metric([reason], count)
        yield failures
        yield CounterMetricFamily("approvals_resumes", "Runs a worker resumed", value=s.resumes.count)
        yield _histogram("approvals_resume_duration_seconds", "Resume to the run's next settle event", s.resumes)
        lag = GaugeMetricFamily(
            "approvals_deliverer_lag_events", "Audit events not yet delivered", labels=["destination"]
        )
        for site, behind in sorted(s.deliverer_lag.items()):
            lag.add_metric([site], behind)
        yield lag
        waits = CounterMetricFamily("approvals_gate_waits", "Gate calls a person decided, by engine", labels=["engine"])
        for engine, count in s.gate_waits:
            waits.add_metric([engine], count)
        yield waits
        yield _histogram("approvals_gate_wait_seconds", "Gate call asked to decided by a person", s.gate_wait)
        outcomes = CounterMetricFamily(
            "approvals_gate_outcomes",
            "Gate calls nobody waited on: decided by a rule, or expired",
            labels=["engine", "outcome"],
        )
        for engine, outcome, count in s.gate_outcomes:
            outcomes.add_metric([engine, outcome], count)
        yield outcomes
        fallbacks = CounterMetricFamily(
            "approvals_gate_fallbacks",
            "Hook answers given by the fallback: nobody decided within the wait",
            labels=["engine", "fallback"],
        )
        for engine, kind, count in s.gate_fallbacks:
            fallbacks.add_metric([engine, kind], count)
        yield fallbacks


def _histogram(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation)
    bounds = [*(str(float(bound)) for bound in BUCKETS), "+Inf"]
    family.add_metric([], list(zip(bounds, histogram.cumulative, strict=True)), histogram.total)
    return family


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """The Prometheus text format; a token with `metrics:read` unless metrics are public."""
    context = app_context(request)
    refused = await metrics_refusal(request)  # plain text, and a known token still scrapes in an outage
    if refused is not None:
        return refused
    snapshot: MetricsSnapshot | None
    try:
        snapshot = await read_metrics(context.db, GATE_ENGINES)
    except (SQLAlchemyError, OSError) as exc:
        if isinstance(exc, SQLAlchemyError) and not is_transient(exc):
            logger.error("metrics: the database refused a metrics query", exc_info=exc)
        else:
            logger.warning(
                "metrics: database unavailable: %s", describe(exc) if isinstance(exc, SQLAlchemyError) else exc
            )
        snapshot = None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    if snapshot is not None:  # issue 39 C: the audit log's sinks, from their cursors (AuditSinkCollector below)
        try:
            registry.register(AuditSinkCollector(await sink_lags(context.db)))
        except (SQLAlchemyError, OSError) as exc:
            logger.warning("metrics: audit sink lag not read: %s", exc)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


# --- Issue 39, part C: the audit log's sinks (syslog, webhook) ---


class AuditSinkCollector(Collector):
    """Each audit sink's lag behind the log's head, in events and seconds, and its failed tries in a row."""

    def __init__(self, lags: list[SinkLag]) -> None:
        self.lags = lags

    def collect(self) -> Iterator[Metric]:
        events = GaugeMetricFamily("approvals_audit_sink_lag_events", "Audit events not yet delivered", labels=["sink"])
        seconds = GaugeMetricFamily(
            "approvals_audit_sink_lag_seconds", "Age of the oldest audit event not yet delivered", labels=["sink"]
        )
        failures = GaugeMetricFamily(
            "approvals_audit_sink_failures", "Failed tries in a row of the sink's next event", labels=["sink"]
        )
        for lag in self.lags:
            events.add_metric([lag.name], lag.events)
            seconds.add_metric([lag.name], lag.seconds)
            failures.add_metric([lag.name], lag.failures)
        yield from (events, seconds, failures)
