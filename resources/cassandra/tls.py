"""The one place that makes certificates: a local CA and a node certificate per instance.

``asgard cassandra up --secure`` keeps them in the node's ``conf/tls/``::

    ca.pem            the CA certificate: what clients trust (``ssl_ca_file``)
    ca.key            the CA's private key (0600), reused for a re-issued node certificate
    node.pem          the node's certificate (SAN: its IP address), then the CA certificate
    node.key          the node's private key (0600, PKCS#8 PEM)
    node-keystore.pem node.key followed by node.pem (0600): the ``keystore`` of Cassandra's
                      PEMBasedSslContextFactory, which reads key and chain from one file

Files are written once and reused; a node certificate whose SAN no longer matches its address,
or that expires within 30 days, is issued again by the same CA (clients keep trusting it). A CA is
made only in a directory that has neither ``ca.pem`` nor ``ca.key``: where one of the two is
missing, issuing raises :class:`CAFileMissing` and leaves the other as it was (a new CA would
silently replace the one every client trusts). A ring across hosts keeps its one CA apart
(:mod:`~asgard.resources.cassandra.ring_ca`).
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


class CAFileMissing(CertificateError):
    """A CA directory lacks ``ca.pem`` or ``ca.key``, so no certificate can be issued from it;
    nothing was made in place of the missing file.

    Attributes: ``path``, the (first) missing file; ``missing``, every absent file (full paths);
    ``directory``, the CA directory.
    """

    def __init__(self, directory: Path, missing: list[Path], remedy: str | None = None):
        self.directory, self.missing = Path(directory), list(missing)
        self.path = self.missing[0]
        names = " and ".join(str(m) for m in self.missing)
        verb = "is" if len(self.missing) == 1 else "are"
        remedy = remedy or (
            "Put the missing file back from where the CA was made (ca.key with mode 0600); or, to start over, "
            f"delete {self.directory} (a new CA is then made, and clients must trust its new ca.pem)")
        super().__init__(f"the CA in {self.directory} is incomplete: {names} {verb} missing, so no certificate can be "
                         f"issued here, and a new CA would replace the one clients trust. {remedy}.")


@dataclass(frozen=True)
class CAFiles:
    """A directory holding a CA's certificate and (where this host issues) its key."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"


@dataclass(frozen=True)
class NodeTLS(CAFiles):
    """Paths of one node's TLS material."""

    @property
    def node_cert(self) -> Path:
        return self.directory / "node.pem"

    @property
    def node_key(self) -> Path:
        return self.directory / "node.key"

    @property
    def keystore(self) -> Path:
        return self.directory / "node-keystore.pem"


def new_private_key():
    from cryptography.hazmat.primitives.asymmetric import rsa

    # RSA, not EC: every TLS stack on the path (Cassandra's PEMReader, Netty, the JDK, Python's
    # ssl) accepts it without provider-specific set-up
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def pem_private_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    # unencrypted PKCS#8 ("BEGIN PRIVATE KEY"): what PEMBasedSslContextFactory reads without a
    # password in cassandra.yaml; the file's 0600 mode protects it
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def pem_certificate(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def subject_alt_name(address: str):
    """``address`` as a SAN entry: an IP address, else a DNS host name; anything else is refused."""
    import re

    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(address))
    except ValueError:
        pass
    label = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
    if len(address) <= 253 and re.fullmatch(rf"{label}(\.{label})*", address):
        return x509.DNSName(address)
    raise CertificateError(f"{address!r} is neither an IP address nor a host name: it cannot be a certificate's SAN")


def ensure_ca(tls: NodeTLS, name: str = "asgard local Cassandra CA", create: bool = True):
    """The CA of ``tls.directory``: ``(certificate, private key)``. Made only when ``create`` and
    the directory holds neither ``ca.pem`` nor ``ca.key``; where one of them is missing (or both,
    without ``create``) raises :class:`CAFileMissing` and writes nothing."""
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
    missing = [p for p in (tls.ca_cert, tls.ca_key) if not p.exists()]
    if len(missing) == 1 or not create:
        raise CAFileMissing(tls.directory, missing)
    key = new_private_key()
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
    tls.directory.mkdir(parents=True, exist_ok=True)
    write_private(tls.ca_key, pem_private_key(key))
    tls.ca_cert.write_bytes(pem_certificate(cert))
    return cert, key


def load_ca_certificate(path: Path):
    """The CA certificate in ``path`` (a ``ca.pem``)."""
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes())
    except ValueError as exc:
        raise CertificateError(f"{path} is not a PEM certificate ({exc})") from exc


def sign_node_certificate(ca_cert, ca_key, public_key, address: str):
    """A node certificate for ``public_key`` at ``address`` (its SAN), signed by the CA: what every
    node certificate here is (NODE_DAYS, server and client auth, not a CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cassandra {address}")]))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=NODE_DAYS))
        .add_extension(x509.SubjectAlternativeName([subject_alt_name(address)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def write_node_files(tls: NodeTLS, key, cert, ca_cert) -> NodeTLS:
    """``node.key``, ``node.pem`` (the certificate, then the CA's) and the keystore of ``tls``."""
    chain = pem_certificate(cert) + pem_certificate(ca_cert)
    write_private(tls.node_key, pem_private_key(key))
    write_private(tls.keystore, pem_private_key(key) + chain)
    tls.node_cert.write_bytes(chain)
    return tls


def node_certificate_current(tls: NodeTLS, address: str, ca_cert) -> bool:
    """Whether ``tls`` holds a node certificate for ``address``, signed by ``ca_cert``, that is
    not due for renewal (more than RENEW_BEFORE left), with its key and keystore."""
    from cryptography import x509
    from cryptography.exceptions import InvalidSignature

    if not (tls.node_cert.exists() and tls.node_key.exists() and tls.keystore.exists()):
        return False
    try:
        cert = x509.load_pem_x509_certificate(tls.node_cert.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        cert.verify_directly_issued_by(ca_cert)  # the same issuer name on another CA is not enough
        wanted = subject_alt_name(address)
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound, CertificateError):
        return False
    return wanted in names and cert.not_valid_after_utc - _now() > RENEW_BEFORE


def ensure_node_certificate(directory: Path, address: str) -> NodeTLS:
    """The CA and a certificate for the node at ``address`` (an IP, in the SAN) under
    ``directory``, made or renewed as needed; returns their paths. A current certificate needs
    only ``ca.pem``; issuing one needs ``ca.key`` too (:class:`CAFileMissing` without it)."""
    tls = NodeTLS(Path(directory))
    if tls.ca_cert.exists() and node_certificate_current(tls, address, load_ca_certificate(tls.ca_cert)):
        return tls
    ca_cert, ca_key = ensure_ca(tls)
    key = new_private_key()
    return write_node_files(tls, key, sign_node_certificate(ca_cert, ca_key, key.public_key(), address), ca_cert)


def verify_node_certificate(cert_file: Path, ca_file: Path, address: str) -> None:
    """Raise :class:`CertificateError` unless ``cert_file`` is signed by the CA of ``ca_file``, is
    valid now and names ``address`` in its SAN (what a client's hostname check accepts)."""
    from cryptography import x509
    from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

    certs = x509.load_pem_x509_certificates(Path(cert_file).read_bytes())
    store = Store(x509.load_pem_x509_certificates(Path(ca_file).read_bytes()))
    verifier = PolicyBuilder().store(store).build_server_verifier(subject_alt_name(address))
    try:
        verifier.verify(certs[0], certs[1:])
    except VerificationError as exc:
        raise CertificateError(f"{cert_file} does not verify for {address} against {ca_file}: {exc}") from exc


def issue_node_certificate(ca_directory: Path, node_directory: Path, address: str) -> NodeTLS:
    """A certificate for the node at ``address``, issued by the ring's one CA in ``ca_directory``
    into ``node_directory``, which gets the CA certificate and the node's own key and chain --
    never the CA's key. Every member of a ring across hosts trusts the same CA for internode and
    client TLS. The CA must be there already (``ring_ca.create_ring_ca``): a missing ``ca.pem`` or
    ``ca.key`` raises :class:`CAFileMissing`, never a new CA."""
    import shutil

    ca = NodeTLS(Path(ca_directory))
    ensure_ca(ca, create=False)
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
