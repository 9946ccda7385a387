"""The admission webhook's TLS without cert-manager: an operator-managed CA in a Secret (#16).

Why not Kopf's own self-signed mode: it makes a new self-signed certificate per process start
(nothing stored, so every restart changes the CA), it never renews one before expiry, and it
needs certbuilder/oscrypto, whose OpenSSL detection fails on OpenSSL 3.0.1x. Here:

- `renew` (pure, clock injected) decides what to issue: a CA (1 year) and a serving certificate
  (90 days) for the webhook's hostnames; the serving certificate is re-issued 30 days before it
  expires or when its names change, the CA 60 days before it expires. A new CA is trusted next
  to the old one (`bundle`) until the old one expires, so the API server never meets a
  certificate its caBundle does not cover.
- `WebhookCertificates` (I/O) keeps that material in one Secret (so restarts and replicas share
  it), patches the bundle into the named ValidatingWebhookConfiguration's caBundle (only that
  object: RBAC restricts it by resourceNames) and writes the files Kopf's WebhookServer serves;
  the server re-reads them when they change.

With cert-manager the chart mounts its Certificate's Secret instead and cainjector fills the
caBundle; none of this runs then.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

CA_DAYS = 365
CA_RENEW_BEFORE_DAYS = 60
SERVING_DAYS = 90
SERVING_RENEW_BEFORE_DAYS = 30
CA_NAME = "vllm-operator-webhook-ca"

# Secret keys (type Opaque: it holds the CA key too, which is not a kubernetes.io/tls field).
KEY_CA_CERT, KEY_CA_KEY = "ca.crt", "ca.key"
KEY_CERT, KEY_KEY = "tls.crt", "tls.key"
KEY_BUNDLE = "bundle.crt"

Clock = Callable[[], datetime.datetime]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


@dataclass(frozen=True)
class WebhookTls:
    """A CA, a serving certificate it signed, and the CAs clients must trust (PEM)."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes
    bundle: bytes

    def secret_data(self) -> dict[str, str]:
        raw = {
            KEY_CA_CERT: self.ca_cert,
            KEY_CA_KEY: self.ca_key,
            KEY_CERT: self.cert,
            KEY_KEY: self.key,
            KEY_BUNDLE: self.bundle,
        }
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_secret_data(cls, data: dict[str, str] | None) -> WebhookTls | None:
        """None when a key is missing or not PEM (then everything is issued anew)."""
        try:
            raw = {k: base64.b64decode((data or {})[k]) for k in (KEY_CA_CERT, KEY_CA_KEY)}
            raw |= {k: base64.b64decode((data or {})[k]) for k in (KEY_CERT, KEY_KEY, KEY_BUNDLE)}
            x509.load_pem_x509_certificate(raw[KEY_CA_CERT])
            x509.load_pem_x509_certificate(raw[KEY_CERT])
        except (KeyError, ValueError):
            return None
        return cls(raw[KEY_CA_CERT], raw[KEY_CA_KEY], raw[KEY_CERT], raw[KEY_KEY], raw[KEY_BUNDLE])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def issue_ca(now: datetime.datetime) -> tuple[bytes, bytes]:
    """A new CA certificate and key (PEM), valid CA_DAYS from `now`."""
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem(cert), _pem_key(key)


def _san(hostnames: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hostnames:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def issue_serving(
    ca_cert: bytes, ca_key: bytes, hostnames: Sequence[str], now: datetime.datetime
) -> tuple[bytes, bytes]:
    """A serving certificate for `hostnames` (DNS names or IPs) signed by the CA (PEM)."""
    ca = x509.load_pem_x509_certificate(ca_cert)
    signer = serialization.load_pem_private_key(ca_key, password=None)
    assert isinstance(signer, ec.EllipticCurvePrivateKey)
    key = _key()
    not_after = min(now + datetime.timedelta(days=SERVING_DAYS), ca.not_valid_after_utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostnames[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(_san(hostnames)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False
        )
        .sign(signer, hashes.SHA256())
    )
    return _pem(cert), _pem_key(key)


def _certs(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def _names(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }


def _wanted(hostnames: Sequence[str]) -> set[str]:
    out = set()
    for host in hostnames:
        try:
            out.add(str(ipaddress.ip_address(host)))
        except ValueError:
            out.add(host)
    return out


def renew(
    current: WebhookTls | None, hostnames: Sequence[str], now: datetime.datetime
) -> WebhookTls:
    """What to serve and trust from `now` on; `current` itself when nothing is due."""
    ca_due = current is None
    if current is not None:
        ca = x509.load_pem_x509_certificate(current.ca_cert)
        ca_due = ca.not_valid_after_utc - now < datetime.timedelta(days=CA_RENEW_BEFORE_DAYS)
    if current is None or ca_due:
        ca_cert, ca_key = issue_ca(now)
        old = [c for c in _certs(current.bundle) if c.not_valid_after_utc > now] if current else []
        cert, key = issue_serving(ca_cert, ca_key, hostnames, now)
        bundle = ca_cert + b"".join(_pem(c) for c in old)
        return WebhookTls(ca_cert, ca_key, cert, key, bundle)

    serving = x509.load_pem_x509_certificate(current.cert)
    ca = x509.load_pem_x509_certificate(current.ca_cert)
    live = [c for c in _certs(current.bundle) if c.not_valid_after_utc > now]
    due = (
        serving.not_valid_after_utc - now < datetime.timedelta(days=SERVING_RENEW_BEFORE_DAYS)
        or _names(serving) != _wanted(hostnames)
        or serving.issuer != ca.subject
        or serving.not_valid_after_utc > ca.not_valid_after_utc
    )
    bundle = b"".join(_pem(c) for c in live) or current.ca_cert
    if not due and bundle == current.bundle:
        return current
    cert, key = (
        issue_serving(current.ca_cert, current.ca_key, hostnames, now)
        if due
        else (current.cert, current.key)
    )
    return WebhookTls(current.ca_cert, current.ca_key, cert, key, bundle)


class WebhookCertificates:
    """Keeps the webhook's CA in a Secret, its bundle in the webhook configuration, and the
    serving files on disk. `ensure` is idempotent: call it at start and then periodically."""

    def __init__(
        self,
        api_client: Any,
        *,
        hostnames: Sequence[str],
        secret: tuple[str, str] | None,
        configuration: str | None,
        directory: Path | None = None,
        clock: Clock = _utcnow,
    ) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.admission = k8s.AdmissionregistrationV1Api(api_client)
        self.hostnames = list(hostnames)
        self.secret = secret
        self.configuration = configuration
        self.directory = directory or Path(tempfile.mkdtemp(prefix="vllm-operator-webhook-"))
        self.clock = clock
        self._tls: WebhookTls | None = None

    @property
    def certfile(self) -> Path:
        return self.directory / KEY_CERT

    @property
    def keyfile(self) -> Path:
        return self.directory / KEY_KEY

    @property
    def bundlefile(self) -> Path:
        return self.directory / KEY_BUNDLE

    def ensure(self) -> WebhookTls:
        """Renew what is due, store it, publish the bundle, then switch the served files (in
        that order: the API server trusts a new CA before it sees a certificate signed by it)."""
        stored, version = self._read()
        tls = renew(stored or self._tls, self.hostnames, self.clock())
        if stored is None or tls != stored:
            tls = self._write(tls, version)
        self._patch_bundle(tls.bundle)
        self._write_files(tls)
        self._tls = tls
        return tls

    def _read(self) -> tuple[WebhookTls | None, str | None]:
        if self.secret is None:
            return None, None
        namespace, name = self.secret
        try:
            obj = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None, None
            raise
        data = {
            str(k): v if isinstance(v, str) else v.decode() for k, v in (obj.data or {}).items()
        }
        meta = obj.metadata
        return WebhookTls.from_secret_data(data), meta.resource_version if meta else None

    def _write(self, tls: WebhookTls, version: str | None) -> WebhookTls:
        """Store `tls`; when another writer won the race, serve what it stored instead."""
        if self.secret is None:
            return tls
        namespace, name = self.secret
        body = k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(
                name=name,
                namespace=namespace,
                resource_version=version,
                labels={"app.kubernetes.io/managed-by": "vllm-operator"},
            ),
            type="Opaque",
            data=tls.secret_data(),
        )
        try:
            if version is None:
                self.core.create_namespaced_secret(namespace, body)
            else:
                self.core.replace_namespaced_secret(name, namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            stored, _ = self._read()
            if stored is None:
                raise
            log.info(
                "Adopted the webhook certificates another writer stored secret=%s/%s", *self.secret
            )
            return stored
        log.info(
            "Stored webhook certificates secret=%s/%s hosts=%s",
            namespace,
            name,
            ",".join(self.hostnames),
        )
        return tls

    def _patch_bundle(self, bundle: bytes) -> None:
        if not self.configuration:
            return
        encoded = base64.b64encode(bundle).decode()
        try:
            obj = self.admission.read_validating_webhook_configuration(self.configuration)
        except ApiException as exc:
            if exc.status == 404:
                log.warning(
                    "Found no webhook configuration name=%s to patch the CA bundle into",
                    self.configuration,
                )
                return
            raise
        ops = [
            {
                "op": "add",  # JSON patch "add" replaces an existing member too
                "path": f"/webhooks/{i}/clientConfig/caBundle",
                "value": encoded,
            }
            for i, hook in enumerate(obj.webhooks or [])
            if hook.client_config.ca_bundle != encoded
        ]
        if not ops:
            return
        self.admission.patch_validating_webhook_configuration(self.configuration, ops)
        log.info("Patched the CA bundle into webhook configuration name=%s", self.configuration)

    def _write_files(self, tls: WebhookTls) -> None:
        """Atomic replace per file; the key file is private to the process user."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for path, data in (
            (self.bundlefile, tls.bundle),
            (self.keyfile, tls.key),
            (self.certfile, tls.cert),
        ):
            if path.exists() and path.read_bytes() == data:
                continue
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            tmp.replace(path)
