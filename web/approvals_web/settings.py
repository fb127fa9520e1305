"""Configuration from environment variables (APPROVALS_*) or a `.env`-style config file."""

from __future__ import annotations

import secrets

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from approvals.channels.webhooks import webhook_site
from approvals.worker.resumer import DEFAULT_LEASE_SECONDS, DEFAULT_POLL_INTERVAL, DEFAULT_WORKER_CONCURRENCY


class Settings(BaseSettings):
    """Everything the app needs to start; every field can be set as APPROVALS_<NAME>."""

    model_config = SettingsConfigDict(env_prefix="APPROVALS_", env_file=None, extra="ignore")

    database_url: str = "sqlite:///approvals.db"
    """Where runs, calls and the audit log live: a SQLite file or a PostgreSQL URL."""
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
    """Where reviewers reach the app (`https://approvals.example.com`): links to calls in hook answers use it."""
