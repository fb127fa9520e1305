"""`/metrics` as a real Prometheus (Debian's `prometheus`, `make prometheus`) scrapes it, with a `metrics:read` token.

Two things only a scraper shows: what Prometheus stores while PostgreSQL is down (fault 1 of
issue 41: it stored no `approvals_database_up 0`, because the token could not be verified),
and what the Grafana dashboard's panels say when every web process is scraped, as Prometheus
setups do (fault 5: the panels summed the same global figures once per process).

One Prometheus serves the module (~1 s to start); each test points it at its own targets
(`/-/reload`) and deletes what the tests before it stored (the admin API).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from approvals.policy import load_rules
from approvals.store import SYSTEM
from approvals.store.metrics_queries import BUCKETS
from approvals.store.migrate import upgrade
from approvals.store.token_cache import TOKEN_CACHE_SECONDS
from approvals.worker.resumer import AgentRegistry

from ..databases import DATABASES
from ..eventually import eventually_sync
from ..live_server import LiveServer, serving
from ..pg_cluster import own_cluster
from ..processes import free_port, stop
from ..store.conftest import execute
from .test_gate import SCHEMA, claude_input, gate_call

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
SCRAPE_INTERVAL = "1s"

pytestmark = [
    pytest.mark.postgresql,  # both tests run on PostgreSQL (a cluster of the test's own, or a fresh database)
    pytest.mark.skipif(not os.access(PROMETHEUS, os.X_OK), reason="needs Debian's prometheus: make prometheus"),
    # uvicorn servers shut down while Prometheus still scrapes them: a scrape in flight then can leave a psycopg
    # connection to the garbage collector (a ResourceWarning), which says nothing about the metrics
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


@dataclass
class Prometheus:
    """A `prometheus` process of the test's own, its configuration rewritten and reloaded per test."""

    url: str
    folder: Path

    def scrape(self, job: str, servers: list[LiveServer], token: str) -> None:
        """Scrape `servers` every second as job `job`, with `token` as the bearer credentials."""
        credentials = self.folder / f"{job}.token"
        credentials.write_text(token)
        targets = [server.url.removeprefix("http://") for server in servers]
        job_config = {
            "job_name": job,
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "authorization": {"credentials_file": str(credentials)},
            "static_configs": [{"targets": targets}],
        }
        self._configure([job_config])

    def forget_everything(self) -> None:
        """Scrape nothing, and delete every series stored so far."""
        self._configure([])
        deleted = httpx.post(f"{self.url}/api/v1/admin/tsdb/delete_series", params={"match[]": '{__name__=~".+"}'})
        assert deleted.status_code == 204, deleted.text

    def _configure(self, jobs: list[dict[str, Any]]) -> None:
        config = {"global": {"scrape_interval": SCRAPE_INTERVAL}, "scrape_configs": jobs}
        (self.folder / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        reloaded = httpx.post(f"{self.url}/-/reload", timeout=10)
        assert reloaded.status_code == 200, reloaded.text

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to (now, or at `at`)."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        response = httpx.get(f"{self.url}/api/v1/query", params=params, timeout=10)
        assert response.status_code == 200, response.text
        data = response.json()["data"]
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def values(self, expr: str, at: float | None = None) -> dict[tuple[tuple[str, str], ...], float]:
        """`query` as {sorted labels: value}."""
        return {tuple(sorted(row["metric"].items())): float(row["value"][1]) for row in self.query(expr, at)}


@pytest.fixture(scope="module")
def prometheus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    folder = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    (folder / "prometheus.yml").write_text(json.dumps({"global": {"scrape_interval": SCRAPE_INTERVAL}}))
    log = folder / "prometheus.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--web.enable-admin-api",
                "--log.level=warn",
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(url=f"http://127.0.0.1:{port}", folder=folder)

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{server.url}/-/ready", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        eventually_sync(ready, "prometheus to be ready", seconds=30, interval=0.1)
        yield server
    finally:
        stop(process)


@pytest.fixture
def prometheus(prometheus_server: Prometheus) -> Prometheus:
    """The module's Prometheus, scraping nothing and holding nothing yet."""
    prometheus_server.forget_everything()
    return prometheus_server


def metrics_token(server: LiveServer) -> str:
    """A token as the README has operators make one: `approvals tokens create prometheus --scope metrics:read`."""
    people = server.store.people
    return server.call(people.create_token("prometheus", role="viewer", actor=SYSTEM, scopes=["metrics:read"]))


# --- fault 1: the outage is stored ---


def test_prometheus_stores_database_up_0_while_postgresql_is_down(prometheus: Prometheus, tmp_path: Path) -> None:
    """Scraped with a `metrics:read` token, the app answers `approvals_database_up 0` through an outage longer than
    the token cache, and 1 again after it."""
    with own_cluster() as cluster:
        url = cluster.database()
        upgrade(url)
        with serving(url, tmp_path, AgentRegistry(), users=False, worker_poll_interval=3600) as server:
            clock = [0.0]  # the token cache's clock: the test moves it past the cache instead of waiting
            server.store.people.verified_tokens.clock = lambda: clock[0]
            prometheus.scrape("outage", [server], metrics_token(server))
            database_up = 'approvals_database_up{job="outage"}'
            eventually_sync(lambda: _value(prometheus, database_up) == 1, "a scrape with the database up", seconds=20)

            cluster.stop()
            clock[0] += TOKEN_CACHE_SECONDS + 1  # as if the outage had lasted longer than the token cache
            eventually_sync(
                lambda: _value(prometheus, database_up) == 0, "Prometheus to store approvals_database_up 0", seconds=20
            )
            assert _value(prometheus, 'up{job="outage"}') == 1, "the scrape itself succeeded: 200, not 503"

            cluster.start()
            eventually_sync(lambda: _value(prometheus, database_up) == 1, "approvals_database_up 1 again", seconds=30)


def _value(prometheus: Prometheus, expr: str) -> float | None:
    found = list(prometheus.values(expr).values())
    assert len(found) <= 1, found
    return found[0] if found else None


# --- fault 5: the dashboard with every process scraped ---

WINDOW = 300.0
"""The fixed window that stands for Grafana's `$__rate_interval` and `$__range`: it holds every sample of the test."""
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
Series = dict[tuple[tuple[str, str], ...], float]
DELETE_SCHEMA = {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}


def panel_queries() -> list[tuple[str, str, str]]:
    """(panel title, legend, PromQL) of every query on the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["legendFormat"], target["expr"]) for panel in panels for target in panel["targets"]]


def fixed_windows(expr: str, instance: str | None = None) -> str:
    """`expr` with Grafana's variables as fixed windows; with `instance`, as a Prometheus scraping only that one."""
    expr = expr.replace("$__rate_interval", f"{WINDOW:.0f}s").replace("$__range", f"{WINDOW:.0f}s")
    if instance is not None:
        expr = re.sub(r"\b(approvals_[a-z_]+)\b", rf'\1{{instance="{instance}"}}', expr)
    return expr


def scraped(server: LiveServer, token: str) -> Samples:
    """One process's `/metrics`: the truth a panel must show, whichever processes are scraped."""
    response = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert response.status_code == 200, response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def grouped(samples: Samples, name: str, by: tuple[str, ...]) -> Series:
    """The samples named `name`, summed by the labels `by` (within one process: each figure once)."""
    out: Series = {}
    for (sample_name, labels), value in samples.items():
        if sample_name == name:
            key = tuple((label, value_) for label, value_ in labels if label in by)
            out[key] = out.get(key, 0.0) + value
    return out


def quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus' `histogram_quantile` of cumulative bucket counts {upper bound: count} (linear within a bucket)."""
    bounds = sorted(buckets)
    total = buckets[math.inf]
    if total <= 0:
        return math.nan
    rank, lower, below = q * total, 0.0, 0.0
    for bound in bounds:
        if buckets[bound] >= rank:
            if bound == math.inf:
                return lower
            return lower + (bound - lower) * (rank - below) / (buckets[bound] - below)
        lower, below = bound, buckets[bound]
    return lower


@dataclass
class Truth:
    """What one process said before (`before`) and after (`after`) the changes the panels' windows hold."""

    before: Samples
    after: Samples
    after_at: float

    def delta(self, name: str, by: tuple[str, ...]) -> Series:
        old = grouped(self.before, name, by)
        return {key: value - old.get(key, 0.0) for key, value in grouped(self.after, name, by).items()}

    def bucket_deltas(self, name: str) -> dict[float, float]:
        return {float(dict(key)["le"]): value for key, value in self.delta(f"{name}_bucket", ("le",)).items()}


Check = Callable[[Series, Truth, float], None]


def same_now(name: str, *by: str) -> Check:
    """A gauge: the panel shows the figure itself, once."""

    def check(got: Series, truth: Truth, at: float) -> None:
        assert got == grouped(truth.after, name, by)

    return check


def rate_of(name: str, *by: str) -> Check:
    """A counter's rate over the window: times the window, the increase one process saw, once (Prometheus
    extrapolates a little past the first and last samples: a few tenths at most; twice it is double counting)."""

    def check(got: Series, truth: Truth, at: float) -> None:
        expected = truth.delta(name, by)
        assert set(got) <= set(expected), (got, expected)
        for key, increase in expected.items():
            seen = got.get(key, 0.0) * WINDOW
            if increase == 0:
                assert seen == 0, (key, seen)
            else:
                assert increase * 0.999 <= seen <= increase * 1.5, (key, seen, increase)

    return check


def increase_of(name: str) -> Check:
    def check(got: Series, truth: Truth, at: float) -> None:
        [increase] = truth.delta(name, ()).values()
        seen = got.get((), 0.0)
        assert increase * 0.999 <= seen <= increase * 1.5 if increase else seen == 0, (seen, increase)

    return check


def quantile_of(q: float, name: str) -> Check:
    """A quantile of the histogram's increase over the window: the one its buckets give, within a quarter of the
    bucket it falls in (each bucket's rate is extrapolated on its own)."""

    def check(got: Series, truth: Truth, at: float) -> None:
        expected = quantile(q, truth.bucket_deltas(name))
        seen = got.get((), math.nan)
        if math.isnan(expected):
            assert math.isnan(seen), seen
            return
        upper = min(bound for bound in (*BUCKETS, math.inf) if bound >= expected)
        lower = max((bound for bound in BUCKETS if bound < expected), default=0.0)
        assert abs(seen - expected) <= (upper - lower) / 4, (seen, expected, (lower, upper))

    return check


def oldest_age(got: Series, truth: Truth, at: float) -> None:
    """The oldest call's age, as the latest scrape saw it: no older than it is now, no younger than at `after`."""
    [age] = grouped(truth.after, "approvals_oldest_pending_call_age_seconds", ()).values()
    assert age - 0.5 <= got[()] <= age + (at - truth.after_at) + 0.5, (got, age)


GATE_PANEL = "Gate waits, hook fallbacks and calls nobody waited on"

PANELS: dict[tuple[str, str], Check] = {
    ("Pending calls", "{{agent}} {{tool}}"): same_now("approvals_pending_calls", "agent", "tool"),
    ("Oldest pending call", "age"): oldest_age,
    ("Database up", "up"): same_now("approvals_database_up"),
    ("Decisions by verdict and channel", "{{verdict}} via {{channel}}"): rate_of(
        "approvals_decisions_total", "verdict", "channel"
    ),
    ("Decision latency (requested to decided)", "p50"): quantile_of(0.5, "approvals_decision_latency_seconds"),
    ("Decision latency (requested to decided)", "p95"): quantile_of(0.95, "approvals_decision_latency_seconds"),
    ("Rule decisions", "{{rule}}: {{effect}}"): rate_of("approvals_rule_decisions_total", "rule", "effect"),
    ("Expired calls", "expired"): increase_of("approvals_expired_calls_total"),
    ("Runs by status", "{{status}}"): same_now("approvals_runs", "status"),
    ("Run failures by reason", "{{reason}}"): rate_of("approvals_run_failures_total", "reason"),
    ("Resumes and their duration", "resumes/s"): rate_of("approvals_resumes_total"),
    ("Resumes and their duration", "p95 duration (s)"): quantile_of(0.95, "approvals_resume_duration_seconds"),
    ("Deliverer lag (events not yet delivered)", "{{destination}}"): same_now(
        "approvals_deliverer_lag_events", "destination"
    ),
    (GATE_PANEL, "waits {{engine}}"): rate_of("approvals_gate_waits_total", "engine"),
    (GATE_PANEL, "nobody waited: {{outcome}} {{engine}}"): rate_of(
        "approvals_gate_outcomes_total", "engine", "outcome"
    ),
    (GATE_PANEL, "fallback {{fallback}} {{engine}}"): rate_of("approvals_gate_fallbacks_total", "engine", "fallback"),
    (GATE_PANEL, "p95 wait (s)"): quantile_of(0.95, "approvals_gate_wait_seconds"),
}
"""How each of the dashboard's queries is checked against what one process says."""


class Agent:
    """A service asking through the gate and the hooks, and a reviewer deciding over the API, on any process."""

    def __init__(self, asking: str, deciding: str) -> None:
        self.asking, self.deciding, self.n = asking, deciding, 0

    def ask(self, server: LiveServer, tool: str = "refund", **overrides: Any) -> str:
        self.n += 1
        args: dict[str, Any] = {"order_id": f"A-{self.n}", "amount": 100} if tool == "refund" else {"user_id": "u-1"}
        body = gate_call(
            session_id=f"s-{self.n}",
            idempotency_key=f"k-{self.n}",
            tool_name=tool,
            args=args | overrides.pop("args", {}),
            json_schema=SCHEMA if tool == "refund" else DELETE_SCHEMA,
            **overrides,
        )
        response = httpx.post(f"{server.url}/api/gate/calls", json=body, headers=self._auth(self.asking), timeout=30)
        assert response.status_code in (200, 201, 202), response.text
        call_id: str = response.json()["call_id"]
        return call_id

    def fall_back(self, server: LiveServer) -> None:
        """A Claude Code hook nobody answers within its wait (none): denied by its fallback."""
        self.n += 1
        body = claude_input(session_id=f"cc-{self.n}", tool_use_id=f"toolu_{self.n}")
        response = httpx.post(
            f"{server.url}/api/hooks/claude-code",
            json=body,
            params={"wait": 0, "fallback": "deny"},
            headers=self._auth(self.asking),
            timeout=30,
        )
        assert response.status_code == 200, response.text

    def decide(self, server: LiveServer, call_id: str, verdict: str) -> None:
        body = {"verdict": verdict} | ({"reason": "not this one"} if verdict == "deny" else {})
        response = httpx.post(
            f"{server.url}/api/calls/{call_id}/decision", json=body, headers=self._auth(self.deciding), timeout=30
        )
        assert response.status_code == 200, response.text

    @staticmethod
    def _auth(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


def expire_and_fail(server: LiveServer, agent: Agent, decided: str) -> None:
    """One call expired undecided (its deadline passed), and the run of `decided` failed."""
    agent.ask(server, approval_ttl=3600)
    assert server.call(server.store.calls.expire(now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))) == 1
    run_id = server.call(server.store.calls.get_call(decided)).run_id
    # a failed run as the resumer writes it (`Type: message`); gate runs never fail on their own
    failed = "UPDATE runs SET status = 'failed', error = :e WHERE id = :id"
    server.call(execute(server.store, failed, e="ValueError: x", id=run_id))


def test_every_dashboard_panel_shows_each_figure_once_with_two_processes_scraped(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    """Two web processes on one PostgreSQL, both scraped: every panel shows what one process says (3 refunds
    pending, not 6); and the same with only one of them scraped."""
    url, _ = DATABASES.fresh("postgresql", tmp_path)
    registry = AgentRegistry()
    try:
        with (
            serving(url, tmp_path / "a", registry, worker_poll_interval=3600) as a,
            serving(url, tmp_path / "b", registry, users=False, worker_poll_interval=3600) as b,
        ):
            people = a.store.people
            rules = "rules:\n  - name: small-refunds\n    tool: refund\n    when: args.amount < 50\n    effect: allow\n"
            a.call(a.store.rules.apply_rules(load_rules(rules), actor=SYSTEM))
            agent = Agent(
                asking=a.call(people.create_token("agent", role="reviewer", actor=SYSTEM, scopes=["calls:ask"])),
                deciding=a.call(people.create_token("alice-api", role="reviewer", actor=SYSTEM, user="alice")),
            )
            token = metrics_token(a)
            # before the scrapes: waiting calls, a decision of each kind, a rule's, an expiry, a fallback, a failure
            for server, tool in ((a, "refund"), (b, "refund"), (a, "refund"), (b, "delete_user"), (a, "delete_user")):
                agent.ask(server, tool)
            to_decide = [agent.ask(a if n % 2 else b) for n in range(5)]
            agent.decide(b, to_decide[0], "approve")
            agent.decide(a, to_decide[1], "deny")
            agent.ask(b, args={"amount": 10})  # allowed by the rule
            agent.fall_back(a)
            expire_and_fail(a, agent, to_decide[0])
            before = scraped(a, token)
            assert grouped(before, "approvals_pending_calls", ("tool",)) == {
                (("tool", "Bash"),): 1,  # the hook's call, still waiting after its fallback
                (("tool", "delete_user"),): 2,
                (("tool", "refund"),): 6,
            }

            prometheus.scrape("dashboard", [a, b], token)
            instances = [server.url.removeprefix("http://") for server in (a, b)]
            _wait_for_scrapes(prometheus, instances, since=time.time(), count=4)

            # while both are scraped: two more approvals and a denial, a rule's, an expiry, a fallback, a failure
            agent.decide(a, to_decide[2], "approve")
            agent.decide(b, to_decide[3], "approve")
            agent.decide(b, to_decide[4], "deny")
            agent.ask(a, args={"amount": 20})
            agent.fall_back(b)
            expire_and_fail(b, agent, to_decide[2])
            after_at = time.time()
            truth = Truth(before=before, after=scraped(a, token), after_at=after_at)
            assert grouped(truth.after, "approvals_pending_calls", ("tool",)) == {
                (("tool", "Bash"),): 2,
                (("tool", "delete_user"),): 2,
                (("tool", "refund"),): 3,
            }
            assert truth.delta("approvals_decisions_total", ("verdict",)) == {
                (("verdict", "approve"),): 2,
                (("verdict", "deny"),): 1,
            }
            _wait_for_scrapes(prometheus, instances, since=after_at, count=3)
            at = time.time()

            queries = panel_queries()
            assert sorted((title, legend) for title, legend, _ in queries) == sorted(PANELS), "a panel unchecked"
            wrong = []
            for title, legend, expr in queries:
                for scraping in (None, *instances):  # both processes, or only one of them
                    got = prometheus.values(fixed_windows(expr, scraping), at=at)
                    try:
                        PANELS[title, legend](got, truth, at)
                    except AssertionError as error:
                        who = f"only {scraping}" if scraping else "both processes"
                        wrong.append(f"{title} / {legend}, {who} scraped: {expr}\n  {error}".replace("\n", "\n  "))
            assert not wrong, "\n".join(wrong)
            pending = prometheus.values(fixed_windows(queries[0][2]), at=at)
            assert pending[(("agent", "billing-service"), ("tool", "refund"))] == 3
    finally:
        DATABASES.release(url)


def _wait_for_scrapes(prometheus: Prometheus, instances: list[str], *, since: float, count: int) -> None:
    """Until Prometheus holds `count` samples of each instance scraped after `since`."""

    def scraped_enough() -> bool:
        samples = {
            dict(labels)["instance"]: stamps
            for labels, stamps in _sample_times(prometheus, 'approvals_database_up{job="dashboard"}').items()
        }
        return all(sum(stamp > since for stamp in samples.get(instance, [])) >= count for instance in instances)

    eventually_sync(scraped_enough, f"{count} scrapes of each process", seconds=30, interval=0.2)


def _sample_times(prometheus: Prometheus, selector: str) -> dict[tuple[tuple[str, str], ...], list[float]]:
    """The timestamps of the raw samples of `selector` in the last window."""
    response = httpx.get(f"{prometheus.url}/api/v1/query", params={"query": f"{selector}[{WINDOW:.0f}s]"}, timeout=10)
    assert response.status_code == 200, response.text
    return {
        tuple(sorted(row["metric"].items())): [float(stamp) for stamp, _ in row["values"]]
        for row in response.json()["data"]["result"]
    }
