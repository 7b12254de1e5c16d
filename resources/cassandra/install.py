"""Fetch the pinned Cassandra from Maven Central once, into ``$ASGARD_HOME/cache``."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..paths import cache_dir

CASSANDRA_VERSION = "5.0.9"
#: the releases a user's own Cassandra is tested on (tests/test_hand_started_cassandra.py: a node of
#: each started by hand from these jars): the latest 4.1 and the pinned 5.0. The install step fetches
#: each (``install(version, tools=False)``: the jars alone).
TESTED_RELEASES = ("4.1.10", CASSANDRA_VERSION)


def cassandra_version() -> str:
    """CASSANDRA_VERSION, or $ASGARD_CASSANDRA_VERSION where it is set (read at each use, never at import)."""
    return os.environ.get("ASGARD_CASSANDRA_VERSION") or CASSANDRA_VERSION


POM = Path(__file__).with_name("pom.xml")
#: the project's own small JMX tools (java/*.java), compiled at install into the version's tools/
JAVA_SOURCES = Path(__file__).with_name("java")
#: changes to Cassandra's own classes: ``patches/<version>/*.patch``, unified diffs against that
#: version's published sources, compiled at install into one jar put first on the classpath.
#: ``ASGARD_CASSANDRA_PATCHES=0`` runs the release's classes alone (e.g. to measure a patch).
PATCH_SOURCES = Path(__file__).with_name("patches")


class InstallError(RuntimeError):
    """Cassandra could not be installed."""


def lib_dir(version: str | None = None) -> Path:
    version = version or cassandra_version()
    return cache_dir("cassandra", version) / "lib"


def install(version: str | None = None, quiet: bool = True, tools: bool = True) -> Path:
    """Return the directory holding ``cassandra-all-<version>.jar`` and its dependencies,
    downloading them with ``mvn dependency:copy-dependencies`` on first use. ``tools=False``: the
    release's jars alone, without the project's JMX tools and patches built for it (a release the
    project only tests as a user runs it)."""
    version = version or cassandra_version()
    lib = lib_dir(version)
    marker = lib / ".complete"
    if marker.exists():
        if tools:
            build_tools(version)
            build_patches(version)
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise InstallError("Maven (mvn) is not on PATH: run scripts/setup.sh, or apt-get install maven")
    if shutil.which("java") is None:
        raise InstallError("Java is not on PATH: Cassandra 5.0 needs Java 17 (apt-get install openjdk-17-jre-headless)")
    staging = lib.with_name("lib.partial")
    shutil.rmtree(staging, ignore_errors=True)
    cmd = [mvn, "-B", "-f", str(POM), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime", f"-Dcassandra.version={version}"]
    if quiet:
        cmd.insert(1, "-q")
    proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0 or not (staging / f"cassandra-all-{version}.jar").exists():
        raise InstallError(f"mvn could not fetch cassandra-all {version}:\n{(proc.stdout or '')[-3000:]}{(proc.stderr or '')[-2000:]}")
    # jars for other platforms are dead weight on the classpath
    for jar in staging.glob("*"):
        if any(tag in jar.name for tag in ("osx-", "windows-", "aarch_64", "riscv64")):
            jar.unlink()
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    marker.write_text(version)
    if tools:
        build_tools(version)
        build_patches(version)
    return lib


def _java_compiler(version: str, release: str = "17") -> list[str] | None:
    """``javac`` when the JDK is installed, else the Eclipse compiler that Cassandra ships in its
    lib (``ecj-*.jar``), so a JRE-only machine compiles too; None when neither is at hand."""
    javac = shutil.which("javac")
    ecj = next(lib_dir(version).glob("ecj-*.jar"), None)
    if javac:
        return [javac, "--release", release]
    if ecj and shutil.which("java"):
        return [shutil.which("java"), "-cp", str(ecj), "org.eclipse.jdt.internal.compiler.batch.Main",
                f"-{release}", "-nowarn"]
    return None


def patches_enabled(enabled: bool | None = None) -> bool:
    """Whether a node runs the patches: ``enabled`` when given (a node's own ``patches=``), else
    ``ASGARD_CASSANDRA_PATCHES`` (``0`` is the release alone), else on."""
    if enabled is not None:
        return bool(enabled)
    return os.environ.get("ASGARD_CASSANDRA_PATCHES", "1") != "0"


class StalePatchesError(InstallError):
    """The patch jar was built from other patches (or another release) than the checkout's, and it
    cannot be rebuilt here: a node would run code that is not in the repository."""


class SourcesChecksumError(InstallError):
    """The Cassandra sources jar the patches would be compiled from is not the one whose sha256 the
    repository pins (``patches/<version>/sources.sha256``), or the repository pins none."""


#: beside each version's patches: ``<sha256>  cassandra-all-<version>-sources.jar`` (sha256sum's format)
SOURCES_PIN = "sources.sha256"


def patches_dir(version: str | None = None) -> Path:
    """Where the patch jar of ``version`` and its fingerprint are built (the install cache)."""
    version = version or cassandra_version()
    return cache_dir("cassandra", version) / "patches"


def patches_jar(version: str | None = None, enabled: bool | None = None,
                patch_root: Path = PATCH_SOURCES) -> Path | None:
    """The built jar of this version's patches, current with them; None when the version has none,
    they are switched off (``enabled``, see :func:`patches_enabled`), or the machine has not the
    tools to build them (the node then runs the release's classes, with a warning).

    Every node start comes here (its classpath, :func:`server_classpath`): a jar whose recorded
    fingerprint (:func:`patches_fingerprint`) differs from the checkout's patches is rebuilt
    first, and where it cannot be, :class:`StalePatchesError` is raised rather than run it."""
    version = version or cassandra_version()
    if not patches_enabled(enabled) or not _patch_files(version, patch_root):
        return None
    jar = patches_dir(version) / "patches.jar"
    if jar.exists() and _recorded_fingerprint(jar) == patches_fingerprint(version, patch_root):
        return jar
    return build_patches(version, patch_root)


def _patch_files(version: str, patch_root: Path = PATCH_SOURCES) -> list[Path]:
    return sorted((patch_root / version).glob("*.patch"))


def patches_fingerprint(version: str | None = None, patch_root: Path = PATCH_SOURCES) -> str:
    """sha256 over the release version, the pinned sources' checksum and each patch's name and
    contents (in the order they apply): what the patch jar is built from."""
    version = version or cassandra_version()
    import hashlib

    h = hashlib.sha256(f"cassandra {version}\n".encode())
    pin = patch_root / version / SOURCES_PIN
    h.update(b"sources " + (pin.read_bytes().split()[0] if pin.exists() and pin.read_bytes().split() else b"-") + b"\n")
    for patch in _patch_files(version, patch_root):
        h.update(f"{patch.name} {hashlib.sha256(patch.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()


def _fingerprint_file(jar: Path) -> Path:
    return jar.with_name(jar.name + ".fingerprint")


def _recorded_fingerprint(jar: Path) -> str | None:
    try:
        return _fingerprint_file(jar).read_text().strip()
    except FileNotFoundError:
        return None


def pinned_sources_sha256(version: str | None = None, patch_root: Path = PATCH_SOURCES) -> str:
    """The sha256 the repository pins for ``cassandra-all-<version>-sources.jar``."""
    version = version or cassandra_version()
    pin = patch_root / version / SOURCES_PIN
    try:
        digest = pin.read_text().split()[0].lower()
    except (FileNotFoundError, IndexError):
        raise SourcesChecksumError(
            f"no sha256 of Cassandra {version}'s sources jar in {pin}: the patches are compiled only from sources "
            f"the repository pins. Fetch cassandra-all-{version}-sources.jar, check it against Maven Central's "
            f".sha1 and the release's .asc signature (Apache's KEYS), and write `sha256sum` of it to {pin}.") from None
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise SourcesChecksumError(f"{pin} does not start with a sha256 (64 hex digits): {digest[:80]!r}")
    return digest


def verify_sources(sources: Path, version: str | None = None, patch_root: Path = PATCH_SOURCES) -> None:
    """Refuse (:class:`SourcesChecksumError`) a sources jar whose sha256 is not the pinned one.
    Maven checks Central's sha1 when it downloads, not when it hands out its local copy again."""
    version = version or cassandra_version()
    import hashlib

    expected = pinned_sources_sha256(version, patch_root)
    h = hashlib.sha256()
    with open(sources, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    if h.hexdigest() != expected:
        raise SourcesChecksumError(
            f"{sources} has sha256 {h.hexdigest()}, but {patch_root / version / SOURCES_PIN} pins {expected}: these "
            f"are not Cassandra {version}'s published sources, and no patch is compiled from them. Delete Maven's "
            f"copy (~/.m2/repository/org/apache/cassandra/cassandra-all/{version}/, or your settings' local "
            f"repository) so that it is downloaded and checked again, then retry; if a fresh download still "
            f"differs, do not change the pin: report it.")


def build_patches(version: str | None = None, patch_root: Path = PATCH_SOURCES,
                  sources: Path | None = None) -> Path | None:
    """Apply this version's patches to its sources (``cassandra-all-<version>-sources.jar`` from
    Maven Central, or ``sources`` when given; either way checked against the pinned sha256,
    :func:`verify_sources`), compile the patched files against the release's jars, and pack the
    classes into :func:`patches_jar`, with the fingerprint they were built from beside it
    (``patches.jar.fingerprint``); once per change of the patches. Returns the jar, or None with a
    warning when a tool is missing and no jar was built before (the node runs unpatched, never
    half-patched); with a jar of other patches, :class:`StalePatchesError`."""
    version = version or cassandra_version()
    import fcntl

    patches = _patch_files(version, patch_root)
    if not patches:
        return None
    out = patches_dir(version)
    jar = out / "patches.jar"
    fingerprint = patches_fingerprint(version, patch_root)
    out.mkdir(parents=True, exist_ok=True)
    # one build at a time (two nodes starting side by side both come here)
    with open(out / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.exists() and _recorded_fingerprint(jar) == fingerprint:
            return jar
        _fingerprint_file(jar).unlink(missing_ok=True)  # a build that dies half way leaves no valid record
        (out / ".patches").unlink(missing_ok=True)  # the sha1 stamp of earlier versions
        return _build_patches(version, patch_root, patches, jar, fingerprint, sources)


def _build_patches(version: str, patch_root: Path, patches: list[Path], jar: Path, fingerprint: str,
                   sources: Path | None) -> Path | None:
    import logging
    import re
    import tempfile
    import zipfile

    compiler, mvn, git = _java_compiler(version), shutil.which("mvn"), shutil.which("git")
    missing = [name for name, tool in (("a Java compiler", compiler), ("mvn", mvn if sources is None else True),
                                       ("git", git)) if tool is None]

    def cannot_build(why: str) -> None:
        if jar.exists():
            raise StalePatchesError(
                f"{jar} was built from other patches than {patch_root / version} now holds (or another release), "
                f"and it cannot be rebuilt here: {why}. Install what is missing (scripts/setup.sh), or run the "
                f"release's classes alone (ASGARD_CASSANDRA_PATCHES=0, CassandraNode(patches=False)).")
        logging.getLogger(__name__).warning("Cassandra runs unpatched: %s", why)

    if missing:
        return cannot_build(f"no {' or '.join(missing)} to build {patch_root / version}")
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        work = Path(tmp)
        if sources is None:
            proc = subprocess.run([mvn, "-q", "-B", "-f", str(POM), "dependency:copy",
                                   f"-Dartifact=org.apache.cassandra:cassandra-all:{version}:jar:sources",
                                   f"-DoutputDirectory={work}"], capture_output=True, text=True)
            sources = work / f"cassandra-all-{version}-sources.jar"
            if proc.returncode != 0 or not sources.exists():
                return cannot_build(f"mvn could not fetch the {version} sources:\n{(proc.stdout + proc.stderr)[-1500:]}")
        verify_sources(sources, version, patch_root)
        src = work / "src"
        touched = sorted({m for p in patches for m in re.findall(r"^\+\+\+ b/(\S+)", p.read_text(), re.M)})
        with zipfile.ZipFile(sources) as zf:
            for name in touched:
                zf.extract(name, src)
        for patch in patches:
            # git apply outside any repository: the cache may sit inside the project's own checkout
            proc = subprocess.run([git, "apply", "-p1", str(patch)], cwd=src, capture_output=True, text=True,
                                  env={**os.environ, "GIT_CEILING_DIRECTORIES": str(work)})
            if proc.returncode != 0:
                raise InstallError(f"{patch.name} does not apply to Cassandra {version}'s sources:\n{proc.stderr[-2000:]}")
        classes = work / "classes"
        proc = subprocess.run([*compiler, "-nowarn", "-proc:none", "-cp", f"{lib_dir(version)}/*", "-d", str(classes),
                               *(str(src / name) for name in touched)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise InstallError(f"the patched sources of Cassandra {version} do not compile:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        partial = work / "patches.jar"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zf:
            for path in sorted(classes.rglob("*.class")):
                zf.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, jar)
    _fingerprint_file(jar).write_text(fingerprint + "\n")
    return jar


def tools_dir(version: str | None = None) -> Path:
    version = version or cassandra_version()
    return cache_dir("cassandra", version) / "tools"


def build_tools(version: str | None = None) -> Path | None:
    """Compile the project's JMX tools (``java/*.java``, JDK classes only) into :func:`tools_dir`,
    once per source change; None when no compiler is at hand (callers then do without them).

    Compiled by :func:`_java_compiler`."""
    version = version or cassandra_version()
    out = tools_dir(version)
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    stamp = out / ".sources"
    fingerprint = "\n".join(f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in sources)
    if stamp.exists() and stamp.read_text() == fingerprint:
        return out
    staging = out.with_name(f"tools.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    compiler = _java_compiler(version)
    if compiler is None:
        shutil.rmtree(staging, ignore_errors=True)
        return None
    cmd = [*compiler, "-d", str(staging)]
    proc = subprocess.run([*cmd, *map(str, sources)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise InstallError(f"compiling {', '.join(p.name for p in sources)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    # file by file (os.replace is atomic): a stop running meanwhile finds the old class or the new
    out.mkdir(parents=True, exist_ok=True)
    for compiled in staging.iterdir():
        os.replace(compiled, out / compiled.name)
    stamp.write_text(fingerprint)
    shutil.rmtree(staging, ignore_errors=True)
    return out


# --- AppCDS: the JVM maps the classes of a Cassandra start from an archive instead of loading
# and verifying them from the jars (about 2 of the 7-8 CPU-seconds of a start on this machine).
def cds_dir(version: str | None = None) -> Path:
    version = version or cassandra_version()
    return cache_dir("cassandra", version) / "cds"


def cds_key(version: str | None = None, patches: bool | None = None) -> str:
    """What an archive is valid for: this java binary and these jars (an upgrade of either
    names another archive; the JVM itself also refuses a stale one and starts without it)."""
    version = version or cassandra_version()
    import hashlib

    java = os.path.realpath(shutil.which("java") or "java")
    parts = [java, str(os.stat(java).st_mtime_ns) if os.path.exists(java) else "0"]
    lib = lib_dir(version)
    if lib.is_dir():
        parts += sorted(f"{e.name}:{e.stat().st_size}" for e in os.scandir(lib) if e.name.endswith(".jar"))
    patched = patches_jar(version, patches)
    if patched is not None:  # a classpath of its own: the JVM maps an archive only for the classpath it was dumped with
        parts.append(f"patches:{patched.stat().st_size}:{patched.stat().st_mtime_ns}")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def cds_archive(version: str | None = None, patches: bool | None = None) -> Path:
    """The archive for the classpath of a node with (``patches``) or without the patches."""
    version = version or cassandra_version()
    return cds_dir(version) / f"cassandra-{cds_key(version, patches)}.jsa"


def nodetool_cds_archive(version: str | None = None) -> Path:
    """The dynamic AppCDS archive of nodetool's classes (the release's jars, never the patches),
    written by its first run at exit (``-XX:ArchiveClassesAtExit``)."""
    version = version or cassandra_version()
    return cds_dir(version) / f"nodetool-{cds_key(version, patches=False)}.jsa"


def cds_classlist(version: str | None = None, patches: bool | None = None) -> Path:
    """The classes a real start loaded (``-XX:DumpLoadedClassList``), the archive's recipe."""
    version = version or cassandra_version()
    return cds_dir(version) / f"cassandra-{cds_key(version, patches)}.classlist"


def build_cds_archive(version: str | None = None, patches: bool | None = None) -> Path | None:
    """The install step's AppCDS archive (``java -Xshare:dump``, about 9 s of CPU once), from the
    class list that the first start of an instance on this machine recorded; None while there is
    no class list yet (:class:`~asgard.resources.cassandra.node.CassandraNode` records one and then runs
    this in the background; ``scripts/setup.sh`` runs it too)."""
    version = version or cassandra_version()
    from .jvm import JVM17_FLAGS

    archive, classlist = cds_archive(version, patches), cds_classlist(version, patches)
    if archive.exists():
        return archive
    if not classlist.exists():
        return None
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    cmd = [shutil.which("java") or "java", "-Xshare:dump", f"-XX:SharedClassListFile={classlist}",
           f"-XX:SharedArchiveFile={partial}", "-XX:+UseG1GC", *JVM17_FLAGS, "-cp", server_classpath(version, patches)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        raise InstallError(f"the CDS archive could not be built:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    partial.rename(archive)
    return archive


def server_classpath(version: str | None = None, patches: bool | None = None) -> str:
    """A Cassandra instance's classpath: this version's patches (if any, and unless ``patches``
    is False or, with ``patches`` None, ``ASGARD_CASSANDRA_PATCHES=0``) before the release's jars
    (installed by the caller: :func:`install` runs at every start, once is enough)."""
    version = version or cassandra_version()
    lib = f"{lib_dir(version)}/*"
    patched = patches_jar(version, patches)
    return f"{patched}{os.pathsep}{lib}" if patched is not None else lib

