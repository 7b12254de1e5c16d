"""Certificates and the superuser's password of a ring across hosts (issue 38, part 4): a host
without the ring's ``ca.key`` gets its member's certificate through a request signed on the CA's
host, or its member refuses to start naming what to copy; nothing ever makes a CA or a password
in place of a missing one. Hosts here are two directories (``host_a`` holds the CA, ``host_b``
does not) and only what an operator carries crosses between them. All but the last test are
file logic, no server; the last starts one secure node on a certificate from the request flow.
"""
from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from asgard.cli import main as cli
from asgard.resources.cassandra.ring_ca import (RingCADirectory, RingCertificateMissing, RingPasswordMissing,
                                                create_ring_ca, member_certificate, request_member_certificate,
                                                sign_member_request)
from asgard.resources.cassandra.tls import (CAFileMissing, CertificateError, NodeTLS, ensure_node_certificate,
                                            issue_node_certificate, verify_node_certificate)

B_ADDRESS = "10.0.0.21"


@pytest.fixture
def host_a(tmp_path) -> RingCADirectory:
    """The first host's ring CA directory: ``ca-init`` ran here."""
    return create_ring_ca(tmp_path / "host-a" / "ring-ca")


@pytest.fixture
def host_b(tmp_path, host_a) -> RingCADirectory:
    """Another host's ring CA directory: the operator copied ca.pem and superuser.password, not ca.key."""
    ring = RingCADirectory(tmp_path / "host-b" / "ring-ca")
    ring.directory.mkdir(parents=True)
    for name in ("ca.pem", "superuser.password"):
        shutil.copy2(host_a.directory / name, ring.directory / name)
    return ring


def _carry(path: Path, to: Path) -> Path:
    """What an operator's scp does: one file to another host's directory."""
    to.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(path, to / path.name))


def _tree_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


def _der_private(key_file: Path) -> bytes:
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    return key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _signed_member(host_a: RingCADirectory, host_b: RingCADirectory, address: str = B_ADDRESS) -> Path:
    """The request made on B, signed on A, carried back to B: the certificate's path on B."""
    request = request_member_certificate(host_b.directory, address)
    signed = sign_member_request(host_a.directory, _carry(request, host_a.directory / "requests"))
    return _carry(signed, host_b.directory)


# --- the request and sign flow --------------------------------------------------------------------
def test_a_request_made_without_the_ca_key_is_signed_on_the_ca_host_and_verifies(host_a, host_b, tmp_path):
    request = request_member_certificate(host_b.directory, B_ADDRESS)
    key_file = host_b.member_key(B_ADDRESS)
    assert request == host_b.member_request(B_ADDRESS) and request.exists()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    carried = _carry(request, tmp_path / "host-a" / "inbox")
    signed = sign_member_request(host_a.directory, carried)
    assert signed == carried.with_name(f"member-{B_ADDRESS}.pem")

    verify_node_certificate(signed, host_a.ca_cert, B_ADDRESS)  # chain to the ring's CA, valid now, SAN
    with pytest.raises(CertificateError, match="subjectAltName"):
        verify_node_certificate(signed, host_a.ca_cert, "10.0.0.22")
    cert = x509.load_pem_x509_certificate(signed.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [B_ADDRESS]
    # what tls.py issues its own nodes: RSA 2048, 825 days, not a CA, server and client auth
    assert isinstance(cert.public_key(), rsa.RSAPublicKey) and cert.public_key().key_size == 2048
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 825
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    if shutil.which("openssl"):
        out = subprocess.run(["openssl", "verify", "-CAfile", str(host_a.ca_cert), str(signed)],
                             capture_output=True, text=True)
        assert out.returncode == 0 and ": OK" in out.stdout, out.stdout + out.stderr

    # B's private key never left B: neither its PEM nor its DER is anywhere on A's side
    secret = _der_private(key_file)
    a_side = _tree_bytes(tmp_path / "host-a")
    assert key_file.read_bytes() not in a_side and secret not in a_side
    assert [p.name for p in (tmp_path / "host-a").rglob("*.key")] == ["ca.key"]

    # carried back, it is the member's certificate at its start; no ca.key anywhere on B
    _carry(signed, host_b.directory)
    node = member_certificate(host_b.directory, tmp_path / "host-b" / "node" / "tls", B_ADDRESS)
    verify_node_certificate(node.node_cert, node.ca_cert, B_ADDRESS)
    assert node.ca_cert.read_bytes() == host_a.ca_cert.read_bytes()
    assert _der_private(node.node_key) == secret  # the key made with the request, not a new one
    assert node.keystore.read_bytes().startswith(node.node_key.read_bytes())
    for private in (node.node_key, node.keystore):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert not list((tmp_path / "host-b").rglob("ca.key"))


def test_a_second_request_keeps_the_members_key(host_a, host_b):
    first = request_member_certificate(host_b.directory, B_ADDRESS).read_bytes()
    key = host_b.member_key(B_ADDRESS).read_bytes()
    second = request_member_certificate(host_b.directory, B_ADDRESS).read_bytes()
    assert host_b.member_key(B_ADDRESS).read_bytes() == key  # a certificate signed for the first still matches
    load = x509.load_pem_x509_csr
    assert load(first).public_key().public_numbers() == load(second).public_key().public_numbers()


def test_a_host_name_is_a_san_too(host_a, host_b):
    signed = _signed_member(host_a, host_b, "cassandra-b.example")
    cert = x509.load_pem_x509_certificate(signed.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["cassandra-b.example"]
    with pytest.raises(CertificateError, match="neither an IP address nor a host name"):
        request_member_certificate(host_b.directory, "*.example")


def _request(tmp_path: Path, key, names: list, name: str = "forged.csr") -> Path:
    builder = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([]))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    path = tmp_path / name
    path.write_bytes(builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return path


def test_signing_checks_the_request(host_a, tmp_path):
    import ipaddress

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ip = x509.IPAddress(ipaddress.ip_address(B_ADDRESS))
    with pytest.raises(CertificateError, match="exactly one IP address or host name"):
        sign_member_request(host_a.directory, _request(tmp_path, rsa_key, []))
    with pytest.raises(CertificateError, match="exactly one IP address or host name"):
        sign_member_request(host_a.directory, _request(tmp_path, rsa_key, [ip, x509.DNSName("other.example")]))
    with pytest.raises(CertificateError, match="exactly one IP address or host name"):
        sign_member_request(host_a.directory, _request(tmp_path, rsa_key, [x509.RFC822Name("a@b.example")]))
    with pytest.raises(CertificateError, match="nor a host name"):  # a wildcard would cover other hosts
        sign_member_request(host_a.directory, _request(tmp_path, rsa_key, [x509.DNSName("*.example")]))
    with pytest.raises(CertificateError, match="not a host name"):  # an IP address dressed as a DNS name
        sign_member_request(host_a.directory, _request(tmp_path, rsa_key, [x509.DNSName(B_ADDRESS)]))
    with pytest.raises(CertificateError, match="RSA keys of 2048 bits"):
        sign_member_request(host_a.directory, _request(tmp_path, ec.generate_private_key(ec.SECP256R1()), [ip]))
    # altered on its way: the last byte of the DER is the signature's
    good = x509.load_pem_x509_csr(_request(tmp_path, rsa_key, [ip]).read_bytes())
    der = bytearray(good.public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0xFF
    tampered = tmp_path / "tampered.csr"
    tampered.write_bytes(x509.load_der_x509_csr(bytes(der)).public_bytes(serialization.Encoding.PEM))
    with pytest.raises(CertificateError, match="not signed by the key it carries"):
        sign_member_request(host_a.directory, tampered)
    junk = tmp_path / "junk.csr"
    junk.write_text("not a request\n")
    with pytest.raises(CertificateError, match="not a PEM certificate request"):
        sign_member_request(host_a.directory, junk)
    assert not list(tmp_path.glob("member-*.pem"))  # nothing signed


def test_signing_without_the_ca_key_refuses_and_makes_no_ca(host_b):
    request = request_member_certificate(host_b.directory, B_ADDRESS)
    ca_before = host_b.ca_cert.read_bytes()
    with pytest.raises(CAFileMissing) as caught:
        sign_member_request(host_b.directory, request)
    assert caught.value.path == host_b.ca_key and caught.value.missing == [host_b.ca_key]
    assert str(host_b.ca_key) in str(caught.value) and "ca-init" in str(caught.value)
    assert host_b.ca_cert.read_bytes() == ca_before and not host_b.ca_key.exists()
    assert not host_b.member_cert(B_ADDRESS).exists()


# --- refusals: never a new CA ---------------------------------------------------------------------
def test_a_member_without_ca_key_or_signed_certificate_refuses_naming_what_to_copy(host_b, tmp_path):
    ca_before = host_b.ca_cert.read_bytes()
    node_dir = tmp_path / "host-b" / "node" / "tls"
    with pytest.raises(RingCertificateMissing) as caught:
        member_certificate(host_b.directory, node_dir, B_ADDRESS)
    error = caught.value
    assert error.path == host_b.member_cert(B_ADDRESS)
    assert error.missing == [host_b.ca_key, host_b.member_cert(B_ADDRESS)] and error.directory == host_b.directory
    message = str(error)
    for needed in (str(host_b.ca_key), str(host_b.member_cert(B_ADDRESS)),
                   f"asgard cassandra host cert-request --ring-ca {host_b.directory} --address {B_ADDRESS}",
                   f"asgard cassandra host cert-sign --ring-ca <its ring CA directory> member-{B_ADDRESS}.csr"):
        assert needed in message, message
    assert host_b.ca_cert.read_bytes() == ca_before  # byte for byte: no CA made over it
    assert not host_b.ca_key.exists() and not list(node_dir.parent.rglob("ca.key"))


def test_a_member_without_the_rings_ca_pem_refuses_and_points_at_ca_init(tmp_path):
    empty = tmp_path / "ring-ca"
    empty.mkdir()
    with pytest.raises(RingCertificateMissing) as caught:
        member_certificate(empty, tmp_path / "node" / "tls", B_ADDRESS)
    assert caught.value.path == empty / "ca.pem" and caught.value.missing == [empty / "ca.pem"]
    assert str(empty / "ca.pem") in str(caught.value)
    assert f"asgard cassandra host ca-init --ring-ca {empty}" in str(caught.value)
    assert list(empty.iterdir()) == []  # what the first member's start used to fill with a new CA
    with pytest.raises(CAFileMissing):  # the CA host's own issuing path makes none either
        issue_node_certificate(empty, tmp_path / "node" / "tls", B_ADDRESS)
    assert list(empty.iterdir()) == []


def test_a_signed_certificate_without_its_key_or_for_another_key_is_refused(host_a, host_b, tmp_path):
    signed = _signed_member(host_a, host_b)
    node_dir = tmp_path / "node" / "tls"
    key = host_b.member_key(B_ADDRESS)
    kept = key.read_bytes()
    key.unlink()
    with pytest.raises(RingCertificateMissing, match="its key .* is not") as caught:
        member_certificate(host_b.directory, node_dir, B_ADDRESS)
    assert caught.value.path == key
    key.write_bytes(kept)
    other = RingCADirectory(tmp_path / "elsewhere")  # a request made from another key for the same address
    request = request_member_certificate(other.directory, B_ADDRESS)
    shutil.copy2(sign_member_request(host_a.directory, request), signed)
    with pytest.raises(CertificateError, match="signed for another key"):
        member_certificate(host_b.directory, node_dir, B_ADDRESS)


def test_a_certificate_from_another_ca_is_refused_at_the_members_start(host_b, tmp_path):
    foreign = create_ring_ca(tmp_path / "foreign")
    request = request_member_certificate(host_b.directory, B_ADDRESS)
    _carry(sign_member_request(foreign.directory, _carry(request, tmp_path / "foreign-inbox")), host_b.directory)
    with pytest.raises(CertificateError, match="does not verify"):
        member_certificate(host_b.directory, tmp_path / "node" / "tls", B_ADDRESS)


def test_an_installed_certificate_serves_later_starts_without_the_signed_files(host_a, host_b, tmp_path):
    _signed_member(host_a, host_b)
    node_dir = tmp_path / "node" / "tls"
    first = member_certificate(host_b.directory, node_dir, B_ADDRESS).node_cert.read_bytes()
    host_b.member_cert(B_ADDRESS).unlink()  # an operator tidied the ring CA directory
    assert member_certificate(host_b.directory, node_dir, B_ADDRESS).node_cert.read_bytes() == first


def test_a_standalone_ca_without_its_key_refuses_to_issue_and_keeps_ca_pem(tmp_path):
    tls = ensure_node_certificate(tmp_path / "tls", "127.0.0.5")  # a standalone node's first start: its own CA
    ca_before = tls.ca_cert.read_bytes()
    tls.ca_key.unlink()
    assert ensure_node_certificate(tls.directory, "127.0.0.5") == tls  # current: needs no key
    with pytest.raises(CAFileMissing) as caught:
        ensure_node_certificate(tls.directory, "127.0.0.6")  # a new address: must be issued
    assert caught.value.path == tls.ca_key and str(tls.ca_key) in str(caught.value)
    assert tls.ca_cert.read_bytes() == ca_before and not tls.ca_key.exists()
    verify_node_certificate(tls.node_cert, tls.ca_cert, "127.0.0.5")  # the old certificate stands


def test_a_ca_key_without_its_certificate_is_kept_too(tmp_path):
    tls = ensure_node_certificate(tmp_path / "tls", "127.0.0.5")
    key_before = tls.ca_key.read_bytes()
    tls.ca_cert.unlink()
    with pytest.raises(CAFileMissing, match="ca.pem is missing"):
        ensure_node_certificate(tls.directory, "127.0.0.5")
    assert tls.ca_key.read_bytes() == key_before and not tls.ca_cert.exists()


def test_ca_init_refuses_a_directory_with_a_ca(host_a):
    before = host_a.ca_cert.read_bytes(), host_a.ca_key.read_bytes(), host_a.superuser_password.read_bytes()
    with pytest.raises(CertificateError, match="already holds a CA"):
        create_ring_ca(host_a.directory)
    assert (host_a.ca_cert.read_bytes(), host_a.ca_key.read_bytes(), host_a.superuser_password.read_bytes()) == before
    assert stat.S_IMODE(host_a.superuser_password.stat().st_mode) == 0o600


# --- the superuser's password ---------------------------------------------------------------------
def _member(ring: RingCADirectory, workdir: Path):
    from asgard.resources.cassandra import CassandraNode

    return CassandraNode(index=38, ring_ca=str(ring.directory), address=B_ADDRESS, workdir=workdir)


def test_a_member_without_the_rings_password_refuses_naming_the_file(host_a, host_b, tmp_path):
    host_b.superuser_password.unlink()
    member = _member(host_b, tmp_path / "member")
    with pytest.raises(RingPasswordMissing) as caught:
        member.superuser_password()
    assert caught.value.path == host_b.superuser_password and caught.value.missing == [host_b.superuser_password]
    assert str(host_b.superuser_password) in str(caught.value) and "ca-init" in str(caught.value)
    assert not host_b.superuser_password.exists() and not member.password_file.exists()  # none invented
    shutil.copy2(host_a.superuser_password, host_b.superuser_password)
    assert member.superuser_password() == host_a.superuser_password.read_text().strip()
    assert stat.S_IMODE(member.password_file.stat().st_mode) == 0o600


# --- the commands ---------------------------------------------------------------------------------
def test_the_three_commands_one_on_each_side(tmp_path):
    runner = CliRunner()
    a, b = tmp_path / "a", tmp_path / "b"

    def run(*args: str):
        result = runner.invoke(cli, ["cassandra", "host", *args])
        return result.exit_code, result.output

    code, said = run("ca-init", "--ring-ca", str(a))
    assert code == 0 and "ca.key" in said, said
    assert run("ca-init", "--ring-ca", str(a))[0] != 0  # a second CA over the first: refused
    b.mkdir()
    for name in ("ca.pem", "superuser.password"):
        shutil.copy2(a / name, b / name)
    code, said = run("cert-request", "--ring-ca", str(b), "--address", B_ADDRESS)
    assert code == 0 and f"member-{B_ADDRESS}.csr" in said, said
    carried = _carry(b / f"member-{B_ADDRESS}.csr", tmp_path / "inbox")
    code, said = run("cert-sign", "--ring-ca", str(b), str(carried))
    assert code != 0 and "ca.key" in said, said  # B cannot sign: no key
    code, said = run("cert-sign", "--ring-ca", str(a), str(carried))
    assert code == 0 and f"member-{B_ADDRESS}.pem" in said, said
    _carry(carried.with_name(f"member-{B_ADDRESS}.pem"), b)
    node = member_certificate(b, tmp_path / "node" / "tls", B_ADDRESS)
    verify_node_certificate(node.node_cert, a / "ca.pem", B_ADDRESS)


# --- one real node ---------------------------------------------------------------------------------
def test_a_member_started_on_a_signed_certificate_serves_tls_verified_against_the_ring_ca(host_a, host_b, tmp_path):
    """A secure node whose host has no ca.key, on a certificate from the request flow: a client
    trusting the ring's ca.pem (host A's) connects with hostname checking and logs in."""
    from asgard.resources.cassandra import CassandraNode
    from asgard.resources.cassandra.node import SUPERUSER
    from asgard.resources.stores import ObjectKey
    from asgard.resources.stores.cql import CassandraObjectStore

    address = "127.0.0.38"
    _signed_member(host_a, host_b, address)
    node = CassandraNode(index=38, heap="1G", secure=True, ring_ca=str(host_b.directory),
                         workdir=tmp_path / "host-b" / "node38")
    try:
        node.start()
        assert not NodeTLS(node.tls.directory).ca_key.exists() and not host_b.ca_key.exists()
        assert _der_private(node.tls.node_key) == _der_private(host_b.member_key(address))  # the requested key
        store = CassandraObjectStore(contact_points=[address], keyspace="asgard_ring_ca", username=SUPERUSER,
                                     password=host_a.superuser_password.read_text().strip(),
                                     ssl_ca_file=str(host_a.ca_cert), ssl_verify_hostname=True,
                                     replication_factor=1, ride_through_seconds=0)
        key = ObjectKey.for_run("ring-ca", "signed", "member")
        store.put(key, {"over": "tls"})
        assert store.get(key)[0] == {"over": "tls"}
        store.session.cluster.shutdown()
    finally:
        node.stop()
