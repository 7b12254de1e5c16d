"""The patch jar follows the patches (issue 28): it records the fingerprint it was built from
(sha256 of the release version, the pinned sources' sha256 and every patch's name and contents),
a node start rebuilds it when the checkout's patches give another fingerprint, and where it
cannot be rebuilt, refuses it with StalePatchesError instead of running code the repository no
longer has. The sources it is compiled from must have the sha256 the repository pins
(patches/<version>/sources.sha256): Maven checks Central's sha1 when it downloads a file, never
when it hands out its local copy again.

No node is started: each test builds into a cache of its own (ASGARD_HOME in a temporary
directory, the release's jars linked from the real cache) with the real javac, git and mvn.
"""
from __future__ import annotations

import importlib
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from asgard.resources.cassandra.install import (CASSANDRA_VERSION, PATCH_SOURCES, SOURCES_PIN, SourcesChecksumError,
                                                StalePatchesError, build_patches, patches_fingerprint, patches_jar,
                                                verify_sources)

# the module (the package's own `install` name is the function)
inst = importlib.import_module("asgard.resources.cassandra.install")

VERSION = CASSANDRA_VERSION
KEEP_ROWS = "local-read-keep-rows.patch"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A cache of its own, with the release's jars (the compile classpath) linked from the real one."""
    lib = inst.install(VERSION)  # the real cache, installed once
    monkeypatch.setenv("ASGARD_HOME", str(tmp_path / "home"))
    (tmp_path / "home" / "cache" / "cassandra" / VERSION).mkdir(parents=True)
    (tmp_path / "home" / "cache" / "cassandra" / VERSION / "lib").symlink_to(lib)
    assert inst.lib_dir(VERSION).resolve() == lib.resolve()
    return tmp_path / "home"


@pytest.fixture
def patch_root(tmp_path) -> Path:
    """A copy of the repository's patches, to change."""
    root = tmp_path / "patches"
    shutil.copytree(PATCH_SOURCES / VERSION, root / VERSION)
    return root


@pytest.fixture(scope="module")
def genuine_sources(tmp_path_factory) -> Path:
    """Cassandra's sources jar, fetched by Maven as the build fetches it."""
    import subprocess

    out = tmp_path_factory.mktemp("sources")
    proc = subprocess.run([shutil.which("mvn") or "mvn", "-q", "-B", "-f", str(inst.POM), "dependency:copy",
                           f"-Dartifact=org.apache.cassandra:cassandra-all:{VERSION}:jar:sources",
                           f"-DoutputDirectory={out}"], capture_output=True, text=True)
    jar = out / f"cassandra-all-{VERSION}-sources.jar"
    assert proc.returncode == 0 and jar.exists(), proc.stdout + proc.stderr
    return jar


def _edit_patch(root: Path, old: str, new: str) -> None:
    """Change an added line of a patch (a log message: the patch still applies and compiles)."""
    patch = root / VERSION / KEEP_ROWS
    text = patch.read_text()
    assert text.count(old) == 1
    patch.write_text(text.replace(old, new))


def _class_bytes(jar: Path) -> bytes:
    with zipfile.ZipFile(jar) as zf:
        return zf.read("org/apache/cassandra/db/ReadResponse$KeptDataResponse.class")


def test_fingerprint_covers_version_sources_pin_and_each_patch(patch_root):
    base = patches_fingerprint(VERSION, patch_root)
    assert base == patches_fingerprint(VERSION, patch_root)  # stable
    assert len(base) == 64
    _edit_patch(patch_root, "keep their rows (no serialization)", "keep their rows (not serialized)")
    changed = patches_fingerprint(VERSION, patch_root)
    assert changed != base
    # the release version is part of it: the same patch files for another release are another build
    shutil.copytree(patch_root / VERSION, patch_root / "5.0.10")
    assert patches_fingerprint("5.0.10", patch_root) != changed
    # so is the pinned sources' checksum
    pin = patch_root / VERSION / SOURCES_PIN
    pin.write_text("0" * 64 + "  x\n")
    assert patches_fingerprint(VERSION, patch_root) != changed
    # a renamed patch applies in another order: another fingerprint
    (patch_root / VERSION / KEEP_ROWS).rename(patch_root / VERSION / ("z-" + KEEP_ROWS))
    assert patches_fingerprint(VERSION, patch_root) not in (base, changed)


def test_a_changed_patch_rebuilds_the_jar_at_the_next_start(home, patch_root):
    jar = patches_jar(VERSION, True, patch_root)  # a first start builds it
    assert jar is not None and jar.parent == home / "cache" / "cassandra" / VERSION / "patches"
    record = jar.with_name("patches.jar.fingerprint")
    assert record.read_text().strip() == patches_fingerprint(VERSION, patch_root)
    first = _class_bytes(jar)
    assert b"keep their rows (no serialization)" in first
    stamp = jar.stat().st_mtime_ns
    assert patches_jar(VERSION, True, patch_root) == jar and jar.stat().st_mtime_ns == stamp  # current: kept

    _edit_patch(patch_root, "keep their rows (no serialization)", "keep their rows (not serialized)")
    rebuilt = patches_jar(VERSION, True, patch_root)
    assert rebuilt == jar
    assert record.read_text().strip() == patches_fingerprint(VERSION, patch_root)
    assert b"keep their rows (not serialized)" in _class_bytes(jar) and _class_bytes(jar) != first


def test_every_node_start_checks_the_jar_against_the_checkouts_patches(home, tmp_path):
    """A node's launch command (built at every start) asks for the jar of the repository's own
    patches: a jar recorded as built from anything else is rebuilt before the JVM is launched."""
    from asgard.resources.cassandra import CassandraNode

    node = CassandraNode(index=22, heap="1G", patches=True, workdir=tmp_path / "node")
    argv = node.command()  # what start() runs; nothing is launched here
    jar = inst.patches_dir(VERSION) / "patches.jar"
    assert argv[argv.index("-cp") + 1].split(os.pathsep)[0] == str(jar)
    record = jar.with_name("patches.jar.fingerprint")
    assert record.read_text().strip() == patches_fingerprint(VERSION)
    # as if built from other patches (an older checkout's): the next start rebuilds it
    record.write_text("0" * 64 + "\n")
    stamp = jar.stat().st_mtime_ns
    argv = node.command()
    assert record.read_text().strip() == patches_fingerprint(VERSION) and jar.stat().st_mtime_ns != stamp
    # a node on the release's classes does not use it at all
    argv = CassandraNode(index=22, heap="1G", patches=False, workdir=tmp_path / "node").command()
    assert argv[argv.index("-cp") + 1] == f"{inst.lib_dir(VERSION)}/*"


def test_a_stale_jar_that_cannot_be_rebuilt_is_refused(home, patch_root, tmp_path, monkeypatch):
    jar = patches_jar(VERSION, True, patch_root)
    _edit_patch(patch_root, "keep their rows (no serialization)", "keep their rows (not serialized)")
    # a machine without Maven: java, javac and git on PATH, no mvn
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("java", "javac", "git"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(StalePatchesError, match="cannot be rebuilt here: no mvn") as refused:
        patches_jar(VERSION, True, patch_root)
    assert "ASGARD_CASSANDRA_PATCHES=0" in str(refused.value)  # says what to do
    assert jar.exists() and not jar.with_name("patches.jar.fingerprint").exists()  # not taken for current later
    # the release alone needs no jar: still possible
    assert patches_jar(VERSION, False, patch_root) is None


def test_a_patch_that_no_longer_applies_is_a_clear_error(home, patch_root, genuine_sources):
    patch = patch_root / VERSION / KEEP_ROWS
    patch.write_text(patch.read_text().replace("-                    response = command.createResponse(",
                                               "-                    response = command.createResponseX("))
    with pytest.raises(inst.InstallError, match=f"{KEEP_ROWS} does not apply"):
        build_patches(VERSION, patch_root, sources=genuine_sources)
    assert not (inst.patches_dir(VERSION) / "patches.jar").exists()


def test_the_pinned_sources_checksum_is_the_genuine_jars(genuine_sources):
    verify_sources(genuine_sources, VERSION)  # the repository's pin, as Maven Central serves the jar
    pin = (PATCH_SOURCES / VERSION / SOURCES_PIN).read_text().split()
    assert pin[1] == f"cassandra-all-{VERSION}-sources.jar"  # sha256sum's format: `sha256sum -c` checks it too


def test_a_tampered_sources_jar_is_refused(home, patch_root, genuine_sources, tmp_path):
    tampered = tmp_path / genuine_sources.name
    shutil.copy(genuine_sources, tampered)
    # one source file changed inside an otherwise valid jar: what a poisoned local Maven repository holds
    with zipfile.ZipFile(tampered, "a") as zf:
        zf.writestr("org/apache/cassandra/Injected.java", "class Injected {}\n")
    with pytest.raises(SourcesChecksumError) as refused:
        build_patches(VERSION, patch_root, sources=tampered)
    message = str(refused.value)
    assert "pins ca9d836d" in message and "Delete Maven's copy" in message and "report it" in message
    assert not (inst.patches_dir(VERSION) / "patches.jar").exists()  # nothing built from it


def test_a_version_without_a_pinned_checksum_is_refused(home, patch_root, genuine_sources):
    (patch_root / VERSION / SOURCES_PIN).unlink()
    with pytest.raises(SourcesChecksumError, match="no sha256 of Cassandra .* sources jar"):
        build_patches(VERSION, patch_root, sources=genuine_sources)
    assert os.listdir(inst.patches_dir(VERSION)) == [".build.lock"]
