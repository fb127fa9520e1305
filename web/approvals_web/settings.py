"""Configuration from environment variables (APPROVALS_*) or a `.env`-style config file."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from approvals.audit.checkpoints import CheckpointConfig
from approvals.audit.signing import SigningConfig
from approvals.audit.sinks import AuditSinkSettings, SyslogSinkSettings, WebhookSinkSettings
from approvals.channels.settings import (
    DEFAULT_SLACK_API_URL,
    FollowUpDefaults,
    OutboundSettings,
    SlackSettings,
    SmtpSettings,
)
from approvals.channels.webhooks import webhook_site
from approvals.exceptions import UserError
from approvals.first_run import default_database_url
from approvals.policy.rules import parse_duration
from approvals.policy.sandbox import DEFAULT_BUDGET
from approvals.store.accounts import check_groups
from approvals.worker.resumer import DEFAULT_LEASE_SECONDS, DEFAULT_POLL_INTERVAL, DEFAULT_WORKER_CONCURRENCY

from .sso.config import OidcProvider

Duration = Annotated[float | None, BeforeValidator(parse_duration)]
"""Seconds, or a text such as 30m, 4h, 2d; empty: off."""


class Settings(BaseSettings):
    """Everything the app needs to start; every field can be set as APPROVALS_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="APPROVALS_", env_file=None, extra="ignore")

    database_url: str = Field(default_factory=default_database_url)
    """Where runs, calls and the audit log live: a SQLite file or a PostgreSQL URL; by default a SQLite file in the
    user's data directory, `$XDG_DATA_HOME/approvals/approvals.db` (`~/.local/share/approvals/approvals.db`)."""
    agents: list[str] = Field(default_factory=list)
    """Import paths of the agents this process serves, e.g. ["myapp.agents:support_agent"]."""
    secret_key: str = Field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)
    """Signs session cookies. Set it in production, or sessions end when the process restarts."""
    session_max_age: int = 8 * 3600
    """Seconds a login lasts."""
    cookie_secure: bool = False
    """Send the session cookie over HTTPS only; turn on whenever the app is served over TLS."""
    trusted_identity_header: str | None = None
    """Header set by an SSO proxy that names the logged-in user (only when the proxy strips it from clients)."""
    worker: bool = True
    """Run a resumer inside the web process (the SQLite setup); turn off when separate workers run."""
    worker_concurrency: int = Field(default=DEFAULT_WORKER_CONCURRENCY, ge=1)
    """Runs the web process's resumer continues at once."""
    worker_lease_seconds: float = Field(default=DEFAULT_LEASE_SECONDS, ge=1)
    """How long the resumer's lease on a run lasts between renewals; a dead worker's run waits this long."""
    worker_poll_interval: float = Field(default=DEFAULT_POLL_INTERVAL, gt=0)
    """Longest wait between looks for ready runs when no wake-up comes."""
    log_format: Literal["text", "json"] = "text"
    """How `approvals serve` and `approvals worker` write log lines: text, or JSON with run, call and trace ids."""
    metrics_public: bool = False
    """Serve `/metrics` without a token (a scraper inside a private network); else it needs `metrics:read`."""
    condition_budget: float = Field(default=DEFAULT_BUDGET, gt=0, le=60)
    """Seconds one evaluation of a rule's condition may take (those not provably cheap, in a worker process);
    past it the condition counts as failed: the call asks a person and the rule is flagged."""
    webhook_urls: list[str] = Field(default_factory=list)
    """URLs that get a signed POST when a call needs a person and when a run ends; once each, in order, durably."""
    webhook_secret: str | None = Field(default=None, repr=False)
    """HMAC key for webhook signatures, for every URL without one of its own in `webhook_secrets`."""
    webhook_secrets: dict[str, str] = Field(default_factory=dict, repr=False)
    """A secret per webhook URL (JSON object URL -> secret), so one leaked secret exposes one receiver."""
    webhook_allow_unsigned: bool = False
    """Send webhooks to URLs without a secret (unsigned); refused at start-up unless set."""

    @model_validator(mode="after")
    def _webhooks_are_signed(self) -> Settings:
        unsigned = [url for url in self.webhook_urls if not self.secret_for_webhook(url)]
        if unsigned and not self.webhook_allow_unsigned:
            shown = ", ".join(webhook_site(url) for url in unsigned)
            raise ValueError(
                f"webhook URLs without a secret ({shown}): set APPROVALS_WEBHOOK_SECRET or APPROVALS_WEBHOOK_SECRETS, "
                "or APPROVALS_WEBHOOK_ALLOW_UNSIGNED=true to send them unsigned"
            )
        return self

    def secret_for_webhook(self, url: str) -> str | None:
        """The key that signs deliveries to `url`: its own, else the shared one."""
        return self.webhook_secrets.get(url) or self.webhook_secret

    max_request_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest request body accepted; bigger ones get 413 before they are read."""
    expiring_soon_seconds: int = 15 * 60
    """Calls that expire within this many seconds are marked in the inbox."""
    gate_max_wait: float = Field(default=600.0, ge=0)
    """The longest a gate request or hook is held open waiting for a decision; longer waits are cut to it."""
    public_url: str | None = None
    """Where reviewers reach the app (`https://approvals.example.com`): links in hook answers, Slack and mail use it."""

    slack_bot_token: str | None = Field(default=None, repr=False)
    """A Slack app's bot token (`xoxb-…`): turns on Slack messages for pending calls."""
    slack_signing_secret: str | None = Field(default=None, repr=False)
    """The Slack app's signing secret: every button click and form Slack sends is checked with it."""
    slack_channel: str | None = None
    """Where calls go when no route names their group: a channel id (`C…`) or a member id (`U…`, a direct message)."""
    slack_routes: dict[str, str] = Field(default_factory=dict)
    """Group -> channel or member id (JSON object), e.g. {"finance": "C0FINANCE"}."""
    slack_api_url: str = DEFAULT_SLACK_API_URL
    """Slack's Web API; change it only to point at a test double."""

    smtp_host: str | None = None
    """The SMTP server reviewers' mail leaves through: turns on e-mail for pending calls."""
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: str | None = Field(default=None, repr=False)
    smtp_security: Literal["starttls", "tls", "none"] = "starttls"
    """starttls (port 587), tls (port 465) or none (a relay on the same host only)."""
    mail_from: str | None = None
    """The From address of reviewers' mail, e.g. approvals@example.com."""
    email_link_ttl: Duration = 24 * 3600.0
    """How long a decision link in a mail works (never past the call's own expiry)."""

    remind_before: Duration = 15 * 60.0
    """Remind a call's reviewers this long before it expires, unless its rule says otherwise; empty: no reminders."""
    escalate_after: Duration = 3600.0
    """Escalate a call nobody decided after this long, unless its rule says otherwise; empty: no escalation."""
    escalate_to: list[str] = Field(default_factory=list)
    """Groups escalated to by default (JSON list); none: calls whose rule names none are not escalated."""
    follow_up_interval: float = Field(default=15.0, gt=0)
    """Seconds between looks for calls to remind or escalate."""

    @field_validator("escalate_to")
    @classmethod
    def _escalation_groups(cls, groups: list[str]) -> list[str]:
        try:
            return check_groups(groups)  # the rules' own pattern: a default may name any group a rule may
        except UserError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _reviewer_channels_complete(self) -> Settings:
        problems = []
        if self.slack_bot_token and not self.slack_signing_secret:
            problems.append("APPROVALS_SLACK_SIGNING_SECRET (Slack's clicks cannot be verified without it)")
        if self.slack_bot_token and not (self.slack_channel or self.slack_routes):
            problems.append("APPROVALS_SLACK_CHANNEL or APPROVALS_SLACK_ROUTES (where Slack messages go)")
        if self.smtp_host and not self.mail_from:
            problems.append("APPROVALS_MAIL_FROM (the From address of reviewers' mail)")
        if (self.slack_bot_token or self.smtp_host) and not self.public_url:
            problems.append("APPROVALS_PUBLIC_URL (Slack messages and mails link to the inbox)")
        if problems:
            raise ValueError("Slack or e-mail is turned on but incomplete: set " + "; ".join(problems))
        return self

    def outbound(self) -> OutboundSettings:
        """Webhooks, Slack, e-mail and follow-ups as the core's channels take them."""
        slack = None
        if self.slack_bot_token and self.slack_signing_secret:
            slack = SlackSettings(
                bot_token=self.slack_bot_token,
                signing_secret=self.slack_signing_secret,
                channel=self.slack_channel,
                routes=dict(self.slack_routes),
                api_url=self.slack_api_url,
            )
        smtp = None
        if self.smtp_host and self.mail_from:
            smtp = SmtpSettings(
                host=self.smtp_host,
                sender=self.mail_from,
                port=self.smtp_port,
                username=self.smtp_username,
                password=self.smtp_password,
                security=self.smtp_security,
                link_ttl=self.email_link_ttl or 24 * 3600.0,
            )
        return OutboundSettings(
            public_url=self.public_url,
            webhook_urls=tuple(self.webhook_urls),
            webhook_secret_for=self.secret_for_webhook,
            slack=slack,
            smtp=smtp,
            follow_ups=FollowUpDefaults(
                remind_before=self.remind_before,
                escalate_after=self.escalate_after,
                escalate_to=tuple(self.escalate_to),
            ),
        )

    # --- Issue 39, part C: streaming the audit log to syslog and a webhook (approvals.audit.sinks) ---
    audit_syslog_host: str | None = None
    """A syslog receiver (rsyslog, syslog-ng, a SIEM's collector): turns on streaming every audit event to it."""
    audit_syslog_port: int = Field(default=6514, ge=1, le=65535)
    audit_syslog_tls: bool = True
    """TLS (RFC 5425) to the receiver; turn off only for a receiver on a private network (plain TCP, RFC 6587)."""
    audit_syslog_ca_file: str | None = None
    """The CA that signed the receiver's certificate (PEM); by default the system's CAs."""
    audit_syslog_cert_file: str | None = None
    """A client certificate (PEM), for receivers that ask for one."""
    audit_syslog_key_file: str | None = Field(default=None, repr=False)
    audit_webhook_url: str | None = None
    """A URL that receives every audit event (and checkpoint) as a signed JSON POST."""
    audit_webhook_secret: str | None = Field(default=None, repr=False)
    """Signs the audit webhook's POSTs (`X-Approvals-Signature`); required with `audit_webhook_url`."""
    audit_sink_start: Literal["beginning", "head"] = "beginning"
    """Where a new sink's copy starts: the whole log, or only events after it was added."""

    @model_validator(mode="after")
    def _audit_sinks_complete(self) -> Settings:
        if self.audit_webhook_url and not self.audit_webhook_secret:
            raise ValueError(
                "APPROVALS_AUDIT_WEBHOOK_URL needs APPROVALS_AUDIT_WEBHOOK_SECRET: its receiver must trust it"
            )
        if self.audit_syslog_cert_file and not self.audit_syslog_key_file:
            raise ValueError("APPROVALS_AUDIT_SYSLOG_CERT_FILE needs APPROVALS_AUDIT_SYSLOG_KEY_FILE")
        return self

    def audit_sinks(self) -> AuditSinkSettings:
        """The audit log's sinks as the core takes them."""
        syslog: tuple[SyslogSinkSettings, ...] = ()
        if self.audit_syslog_host:
            syslog = (
                SyslogSinkSettings(
                    host=self.audit_syslog_host,
                    port=self.audit_syslog_port,
                    tls=self.audit_syslog_tls,
                    ca_file=self.audit_syslog_ca_file,
                    cert_file=self.audit_syslog_cert_file,
                    key_file=self.audit_syslog_key_file,
                ),
            )
        webhooks: tuple[WebhookSinkSettings, ...] = ()
        if self.audit_webhook_url:
            webhooks = (WebhookSinkSettings(url=self.audit_webhook_url, secret=self.audit_webhook_secret),)
        return AuditSinkSettings(syslog=syslog, webhooks=webhooks, start=self.audit_sink_start)

    # --- Issue 39, part B: signed checkpoints of the audit log (approvals.audit.checkpoints) ---
    audit_signing: bool = False
    """Require audit checkpoints to be signed: without a usable key the app refuses to start."""
    audit_signing_key_file: str | None = None
    """The Ed25519 private key (PEM) that signs checkpoints (`approvals audit keygen --out FILE`); turns signing on."""
    audit_signing_key: str | None = Field(default=None, repr=False)
    """The key itself (PEM, or base64 of its 32-byte seed), for secret stores that set variables; turns signing on."""
    audit_checkpoint_events: int = Field(default=1000, ge=1)
    """Sign a checkpoint once this many audit events are not covered by one."""
    audit_checkpoint_interval: Duration = 600.0
    """And at least this often while any event is not covered (seconds, or 10m, 1h); empty: by count only."""
    audit_checkpoint_dir: str | None = None
    """A directory outside the database (mounted or synced object storage) that gets a file per checkpoint."""

    def audit_signing_config(self) -> SigningConfig:
        """Where the signing key comes from; a checkpoint directory asks for signing too."""
        return SigningConfig(
            key_file=Path(self.audit_signing_key_file) if self.audit_signing_key_file else None,
            key_text=self.audit_signing_key,
            required=self.audit_signing or bool(self.audit_checkpoint_dir),
        )

    def audit_checkpoint_config(self) -> CheckpointConfig:
        """When checkpoints are made and where their files go."""
        return CheckpointConfig(
            every_events=self.audit_checkpoint_events,
            interval=self.audit_checkpoint_interval or float("inf"),
            directory=Path(self.audit_checkpoint_dir) if self.audit_checkpoint_dir else None,
        )

    # --- Issue 40: single sign-on through OpenID Connect providers (approvals_web.sso) ---
    oidc_providers: list[OidcProvider] = Field(default_factory=list)
    """The providers people sign in with (JSON list in APPROVALS_OIDC_PROVIDERS); see the README's "Single sign-on"."""
    local_passwords: bool | None = None
    """Password logins; by default on without providers and off once any is configured."""
    local_password_users: list[str] = Field(default_factory=list)
    """Who may still log in with a password when `local_passwords` is off: the emergency local admin."""

    def password_login_allowed(self, username: str | None = None) -> bool:
        """Whether the password form is on (for `username`: including the emergency admins)."""
        allowed = self.local_passwords if self.local_passwords is not None else not self.oidc_providers
        return allowed or (username is not None and username in self.local_password_users)

    # --- Issue 40: SCIM provisioning (approvals_web.scim) ---
    scim_default_role: Literal["viewer", "reviewer", "admin"] = "reviewer"
    """The role of a user a provider creates through SCIM (groups come from the provider's SCIM groups)."""
