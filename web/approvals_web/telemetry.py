"""Send traces over OTLP when, and only when, the standard `OTEL_*` variables ask for it.

The core records spans through the OpenTelemetry API alone (`approvals.tracing`); this sets
up the SDK behind it for the web app and `approvals worker`. An endpoint
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) or an exporter named by
`OTEL_TRACES_EXPORTER` turns it on; with none of them nothing is configured and nothing sent,
and `OTEL_SDK_DISABLED=true` wins over all. The exporter reads its other settings (headers,
timeout, compression) and the sampler reads `OTEL_TRACES_SAMPLER` from the environment as usual.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from approvals import tracing

__all__ = ("configure_tracing", "exporter_from_environment")

logger = logging.getLogger("approvals_web.telemetry")
_OTLP_NAMES = {"otlp", "otlp_proto_http"}


def exporter_from_environment(environ: Mapping[str, str] | None = None) -> SpanExporter | None:
    """The span exporter the `OTEL_*` variables ask for; None when they ask for none."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    named = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if "none" in named or (not named and not endpoint):
        return None
    if not named or _OTLP_NAMES & set(named):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers and the rest from the same variables
    if "console" in named:
        return ConsoleSpanExporter()
    logger.warning("OTEL_TRACES_EXPORTER=%s: only otlp (over HTTP) and console are available; not tracing", named)
    return None


def configure_tracing(service_name: str = "approvals") -> bool:
    """Set the global tracer provider when the environment asks for an exporter; True when traces are now sent.

    Called at every start of the app or the worker; once a provider is set (by an earlier call,
    or by the embedding application) it is left as it is.
    """
    if tracing.enabled():
        return False
    exporter = exporter_from_environment()
    if exporter is None:
        return False
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.info("tracing: sending spans with %s", type(exporter).__name__)
    return True
