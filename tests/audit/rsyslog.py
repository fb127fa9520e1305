"""Debian's rsyslog as the test's syslog receiver: TCP or TLS (a test CA made here), each message one JSON line.

`Rsyslog` writes a configuration into a temporary directory and runs `rsyslogd -n` with it
(no system configuration, no other input): `imtcp` on a free port, and `omfile` writing the
parsed RFC 5424 fields of every message (app-name, msgid, facility, severity, structured
data, msg) as one JSON object a line, so the test reads back what rsyslog understood.
Install: `apt-get install rsyslog rsyslog-gnutls` (the Makefile's `syslog` target).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ("RSYSLOGD", "Rsyslog", "TestCA", "make_ca", "sd_params")

RSYSLOGD = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
_SD = re.compile(r'([^\s=\]]+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class TestCA:
    """Files of a test CA, a server certificate for 127.0.0.1 and a client certificate, all PEM."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _key_and_cert(
    name: str, issuer_key: ec.EllipticCurvePrivateKey | None, issuer: x509.Name | None, *, ca: bool, server: bool
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        import ipaddress

        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False).add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    return key, cert


def make_ca(directory: Path) -> TestCA:
    """A CA, and a server and a client certificate it signed, written to `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _key_and_cert("approvals test CA", None, None, ca=True, server=False)
    files: dict[str, Path] = {}
    for role, server in (("server", True), ("client", False)):
        key, cert = _key_and_cert(f"approvals test {role}", ca_key, ca_cert.subject, ca=False, server=server)
        files[f"{role}_cert"] = directory / f"{role}.pem"
        files[f"{role}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        files[f"{role}_key"] = directory / f"{role}.key"
        files[f"{role}_key"].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    ca_path = directory / "ca.pem"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return TestCA(ca=ca_path, **files)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sd_params(structured_data: str) -> dict[str, str]:
    """The parameters of one SD element, unescaped."""
    return {name: re.sub(r"\\(.)", r"\1", value) for name, value in _SD.findall(structured_data)}


class Rsyslog:
    """One rsyslogd of the test's own; `start()` again after `stop()` listens on the same port."""

    def __init__(self, directory: Path, *, tls: TestCA | None = None) -> None:
        self.directory = directory
        self.tls = tls
        self.port = _free_port()
        self.output = directory / "received.jsonl"
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "work").mkdir(exist_ok=True)
        self.config = directory / "rsyslog.conf"
        self.config.write_text(self._configuration())

    def _configuration(self) -> str:
        work = self.directory / "work"
        tls = self.tls
        tls_global = (
            f' defaultNetstreamDriverCAFile="{tls.ca}" defaultNetstreamDriverCertFile="{tls.server_cert}"'
            f' defaultNetstreamDriverKeyFile="{tls.server_key}"'
            if tls
            else ""
        )
        tls_module = ' streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="x509/certvalid"'
        return f"""
global(workDirectory="{work}" maxMessageSize="256k"{tls_global})
module(load="imtcp"{tls_module if tls else ""})
input(type="imtcp" address="127.0.0.1" port="{self.port}" ruleset="audit")
template(name="audit" type="list" option.jsonf="on") {{
  property(outname="app" name="app-name" format="jsonf")
  property(outname="msgid" name="msgid" format="jsonf")
  property(outname="facility" name="syslogfacility" format="jsonf")
  property(outname="severity" name="syslogseverity" format="jsonf")
  property(outname="hostname" name="hostname" format="jsonf")
  property(outname="sd" name="structured-data" format="jsonf")
  property(outname="msg" name="msg" format="jsonf")
}}
ruleset(name="audit") {{ action(type="omfile" file="{self.output}" template="audit") }}
"""

    def start(self, *, timeout: float = 15.0) -> None:
        """Start rsyslogd and wait until it accepts connections."""
        assert self.process is None
        with open(self.directory / "rsyslogd.err", "ab") as errors:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [RSYSLOGD, "-n", "-f", str(self.config), "-i", str(self.directory / "rsyslogd.pid")],
                stdout=subprocess.DEVNULL,
                stderr=errors,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"rsyslogd exited: {(self.directory / 'rsyslogd.err').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, and wait: rsyslogd writes what it took before it exits."""
        process, self.process = self.process, None
        if process is None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    def received(self) -> list[dict[str, Any]]:
        """Every message written so far, parsed; its structured data as `params`, its JSON body as `body`."""
        if not self.output.exists():
            return []
        messages = []
        for line in self.output.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            message = json.loads(line)
            message["params"] = sd_params(message["sd"])
            message["body"] = json.loads(message["msg"].lstrip("\ufeff"))
            messages.append(message)
        return messages
