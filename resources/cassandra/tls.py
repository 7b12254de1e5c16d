"""The one place that makes certificates: a local CA and a node certificate per instance.

``asgard cassandra up --secure`` keeps them in the node's ``conf/tls/``::

    ca.pem            the CA certificate: what clients trust (``ssl_ca_file``)
    ca.key            the CA's private key (0600), reused for a re-issued node certificate
    node.pem          the node's certificate (SAN: its IP address), then the CA certificate
    node.key          the node's private key (0600, PKCS#8 PEM)
    node-keystore.pem node.key followed by node.pem (0600): the ``keystore`` of Cassandra's
                      PEMBasedSslContextFactory, which reads key and chain from one file

Files are written once and reused; a node certificate whose SAN no longer matches its address,
or that expires within 30 days, is issued again by the same CA (clients keep trusting it).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from ..paths import write_private

CA_DAYS = 3650
NODE_DAYS = 825  # the longest validity clients such as browsers and macOS accept for a leaf
RENEW_BEFORE = dt.timedelta(days=30)


class CertificateError(RuntimeError):
    """A certificate could not be made or read."""


@dataclass(frozen=True)
class NodeTLS:
    """Paths of one node's TLS material."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def node_cert(self) -> Path:
        return self.directory / "node.pem"

    @property
    def node_key(self) -> Path:
        return self.directory / "node.key"

    @property
    def keystore(self) -> Path:
        return self.directory / "node-keystore.pem"


def _key():
    from cryptography.hazmat.primitives.asymmetric import rsa

    # RSA, not EC: every TLS stack on the path (Cassandra's PEMReader, Netty, the JDK, Python's
    # ssl) accepts it without provider-specific set-up
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    # unencrypted PKCS#8 ("BEGIN PRIVATE KEY"): what PEMBasedSslContextFactory reads without a
    # password in cassandra.yaml; the file's 0600 mode protects it
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def ensure_ca(tls: NodeTLS, name: str = "asgard local Cassandra CA"):
    """The CA of ``tls.directory`` (made on first use): ``(certificate, private key)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    if tls.ca_cert.exists() and tls.ca_key.exists():
        try:
            cert = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
            key = serialization.load_pem_private_key(tls.ca_key.read_bytes(), password=None)
        except ValueError as exc:
            raise CertificateError(f"the CA in {tls.directory} is unreadable ({exc}); delete the directory "
                                   "to make a new CA (clients must then trust the new ca.pem)") from exc
        return cert, key
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate a little clock skew
        .not_valid_after(now + dt.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(tls.ca_key, _pem_key(key))
    tls.ca_cert.write_bytes(_pem_cert(cert))
    return cert, key


def _node_cert_current(tls: NodeTLS, address: str, ca_cert) -> bool:
    from cryptography import x509

    if not (tls.node_cert.exists() and tls.node_key.exists() and tls.keystore.exists()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(tls.node_cert.read_bytes())
        ips = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.IPAddress)
    except (ValueError, x509.ExtensionNotFound):
        return False
    return (ipaddress.ip_address(address) in ips and cert.issuer == ca_cert.subject
            and cert.not_valid_after_utc - _now() > RENEW_BEFORE)


def ensure_node_certificate(directory: Path, address: str) -> NodeTLS:
    """The CA and a certificate for the node at ``address`` (an IP, in the SAN) under
    ``directory``, made or renewed as needed; returns their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    tls = NodeTLS(Path(directory))
    ca_cert, ca_key = ensure_ca(tls)
    if _node_cert_current(tls, address, ca_cert):
        return tls
    key = _key()
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cassandra {address}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=NODE_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    chain = _pem_cert(cert) + _pem_cert(ca_cert)
    write_private(tls.node_key, _pem_key(key))
    write_private(tls.keystore, _pem_key(key) + chain)
    tls.node_cert.write_bytes(chain)
    return tls


def verify_node_certificate(cert_file: Path, ca_file: Path, address: str) -> None:
    """Raise :class:`CertificateError` unless ``cert_file`` is signed by the CA of ``ca_file``, is
    valid now and names ``address`` in its SAN (what a client's hostname check accepts)."""
    from cryptography import x509
    from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

    certs = x509.load_pem_x509_certificates(Path(cert_file).read_bytes())
    store = Store(x509.load_pem_x509_certificates(Path(ca_file).read_bytes()))
    verifier = PolicyBuilder().store(store).build_server_verifier(x509.IPAddress(ipaddress.ip_address(address)))
    try:
        verifier.verify(certs[0], certs[1:])
    except VerificationError as exc:
        raise CertificateError(f"{cert_file} does not verify for {address} against {ca_file}: {exc}") from exc


def issue_node_certificate(ca_directory: Path, node_directory: Path, address: str) -> NodeTLS:
    """A certificate for the node at ``address``, issued by the ring's one CA in ``ca_directory``
    (made there on first use: the operator's machine, never a node) into ``node_directory``, which
    gets the CA certificate and the node's own key and chain -- never the CA's key. Every member of
    a ring across hosts trusts the same CA for internode and client TLS."""
    import shutil

    ca = NodeTLS(Path(ca_directory))
    ensure_ca(ca, name="asgard ring CA")
    issuer = NodeTLS(ca.directory / "issued" / address)  # the CA's own record of what it issued
    issuer.directory.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ca.ca_cert, issuer.ca_cert)
    write_private(issuer.ca_key, ca.ca_key.read_bytes())
    ensure_node_certificate(issuer.directory, address)
    node = NodeTLS(Path(node_directory))
    node.directory.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ca.ca_cert, node.ca_cert)
    write_private(node.node_key, issuer.node_key.read_bytes())
    write_private(node.keystore, issuer.keystore.read_bytes())
    node.node_cert.write_bytes(issuer.node_cert.read_bytes())
    node.ca_key.unlink(missing_ok=True)  # a node never holds the CA's key
    return node
