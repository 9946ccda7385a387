"""The operator-managed webhook CA (kube/webhook_tls.py): issue, keep, renew before expiry."""

import datetime
import ssl
import tempfile
from pathlib import Path

from cryptography import x509

from vllm_operator.kube.webhook_tls import (
    CA_DAYS,
    CA_RENEW_BEFORE_DAYS,
    SERVING_DAYS,
    SERVING_RENEW_BEFORE_DAYS,
    WebhookTls,
    renew,
)

T0 = datetime.datetime(2026, 11, 25, tzinfo=datetime.UTC)
HOSTS = ["vllm-operator-webhook.ops.svc", "127.0.0.1"]


def days(n: float) -> datetime.timedelta:
    return datetime.timedelta(days=n)


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def bundle(tls: WebhookTls) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(tls.bundle)


def names(tls: WebhookTls) -> set[str]:
    san = cert(tls.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n) for n in san.get_values_for_type(x509.DNSName)} | {
        str(ip) for ip in san.get_values_for_type(x509.IPAddress)
    }


def test_first_issue_is_a_ca_and_a_serving_certificate_it_signed_for_every_host() -> None:
    tls = renew(None, HOSTS, T0)
    cert(tls.cert).verify_directly_issued_by(cert(tls.ca_cert))
    assert names(tls) == set(HOSTS)
    assert [c.subject for c in bundle(tls)] == [cert(tls.ca_cert).subject]
    assert cert(tls.ca_cert).not_valid_after_utc == T0 + days(CA_DAYS)
    assert cert(tls.cert).not_valid_after_utc == T0 + days(SERVING_DAYS)


def test_python_ssl_serves_the_pair_and_trusts_it_through_the_bundle() -> None:
    tls = renew(None, HOSTS, datetime.datetime.now(datetime.UTC))
    with tempfile.TemporaryDirectory() as tmp:
        certfile, keyfile = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        certfile.write_bytes(tls.cert)
        keyfile.write_bytes(tls.key)
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server.load_cert_chain(certfile, keyfile)  # raises when the key does not match
    client = ssl.create_default_context(cadata=tls.bundle.decode())
    assert client.cert_store_stats()["x509_ca"] == 1


def test_nothing_due_keeps_the_same_material() -> None:
    tls = renew(None, HOSTS, T0)
    assert renew(tls, HOSTS, T0 + days(SERVING_DAYS - SERVING_RENEW_BEFORE_DAYS - 1)) is tls


def test_serving_certificate_is_reissued_before_expiry_by_the_same_ca() -> None:
    tls = renew(None, HOSTS, T0)
    later = T0 + days(SERVING_DAYS - SERVING_RENEW_BEFORE_DAYS + 1)
    renewed = renew(tls, HOSTS, later)
    assert renewed.ca_cert == tls.ca_cert and renewed.bundle == tls.bundle
    assert renewed.cert != tls.cert
    assert cert(renewed.cert).not_valid_after_utc == later + days(SERVING_DAYS)
    cert(renewed.cert).verify_directly_issued_by(cert(tls.ca_cert))


def test_changed_hostnames_reissue_the_serving_certificate() -> None:
    tls = renew(None, HOSTS, T0)
    renewed = renew(tls, ["other.ops.svc"], T0 + days(1))
    assert names(renewed) == {"other.ops.svc"}
    assert renewed.ca_cert == tls.ca_cert


def test_ca_is_renewed_before_expiry_and_the_old_one_stays_trusted_until_it_expires() -> None:
    tls = renew(None, HOSTS, T0)
    # Keep the serving certificate fresh on the way, as the periodic check would.
    when = T0 + days(CA_DAYS - CA_RENEW_BEFORE_DAYS - 1)
    tls = renew(renew(tls, HOSTS, when - days(SERVING_DAYS - 1)), HOSTS, when)
    old_ca = tls.ca_cert
    assert tls.ca_cert == old_ca
    rotated = renew(tls, HOSTS, when + days(2))
    assert rotated.ca_cert != old_ca
    cert(rotated.cert).verify_directly_issued_by(cert(rotated.ca_cert))
    assert {c.fingerprint(c.signature_hash_algorithm) for c in bundle(rotated)} == {  # type: ignore[arg-type]
        cert(pem).fingerprint(cert(pem).signature_hash_algorithm)  # type: ignore[arg-type]
        for pem in (old_ca, rotated.ca_cert)
    }
    # Once the old CA has expired it leaves the bundle.
    expired = renew(rotated, HOSTS, T0 + days(CA_DAYS + 1))
    assert len(bundle(expired)) == 1 and expired.ca_cert == rotated.ca_cert


def test_serving_certificate_never_outlives_its_ca() -> None:
    tls = renew(None, HOSTS, T0)
    late = T0 + days(CA_DAYS - CA_RENEW_BEFORE_DAYS - 10)
    renewed = renew(tls, HOSTS, late)
    assert cert(renewed.cert).not_valid_after_utc <= cert(renewed.ca_cert).not_valid_after_utc


def test_secret_data_round_trips_and_garbage_means_issue_anew() -> None:
    tls = renew(None, HOSTS, T0)
    assert WebhookTls.from_secret_data(tls.secret_data()) == tls
    assert WebhookTls.from_secret_data(None) is None
    assert WebhookTls.from_secret_data({**tls.secret_data(), "tls.crt": "bm90IGEgY2VydA=="}) is None
    partial = tls.secret_data()
    del partial["ca.key"]
    assert WebhookTls.from_secret_data(partial) is None
