"""Fetch the pinned Cassandra from Maven Central once, into ``$ASGARD_HOME/cache``."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..paths import cache_dir

CASSANDRA_VERSION = os.environ.get("ASGARD_CASSANDRA_VERSION", "5.0.9")
POM = Path(__file__).with_name("pom.xml")
#: the project's own small JMX tools (java/*.java), compiled at install into the version's tools/
JAVA_SOURCES = Path(__file__).with_name("java")
#: changes to Cassandra's own classes: ``patches/<version>/*.patch``, unified diffs against that
#: version's published sources, compiled at install into one jar put first on the classpath.
#: ``ASGARD_CASSANDRA_PATCHES=0`` runs the release's classes alone (e.g. to measure a patch).
PATCH_SOURCES = Path(__file__).with_name("patches")


class InstallError(RuntimeError):
    """Cassandra could not be installed."""


def lib_dir(version: str = CASSANDRA_VERSION) -> Path:
    return cache_dir("cassandra", version) / "lib"


def install(version: str = CASSANDRA_VERSION, quiet: bool = True) -> Path:
    """Return the directory holding ``cassandra-all-<version>.jar`` and its dependencies,
    downloading them with ``mvn dependency:copy-dependencies`` on first use."""
    lib = lib_dir(version)
    marker = lib / ".complete"
    if marker.exists():
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


def patches_jar(version: str = CASSANDRA_VERSION, enabled: bool | None = None) -> Path | None:
    """The built jar of this version's patches; None when the version has none, they are
    switched off (``enabled``, see :func:`patches_enabled`), or they could not be built (the
    node then runs the release's classes)."""
    jar = cache_dir("cassandra", version) / "patches" / "patches.jar"
    return jar if patches_enabled(enabled) and jar.exists() and _patch_files(version) else None


def _patch_files(version: str) -> list[Path]:
    return sorted((PATCH_SOURCES / version).glob("*.patch"))


def build_patches(version: str = CASSANDRA_VERSION) -> Path | None:
    """Apply this version's patches to its sources (``cassandra-all-<version>-sources.jar`` from
    Maven Central), compile the patched files against the release's jars, and pack the classes
    into :func:`patches_jar`; once per change of the patches. Returns the jar, or None with a
    warning when something on the way is missing (the node runs unpatched, never half-patched)."""
    import hashlib
    import logging
    import re
    import tempfile
    import zipfile

    patches = _patch_files(version)
    if not patches:
        return None
    out = cache_dir("cassandra", version) / "patches"
    jar, stamp = out / "patches.jar", out / ".patches"
    fingerprint = hashlib.sha1(b"".join(p.name.encode() + p.read_bytes() for p in patches)).hexdigest()
    if jar.exists() and stamp.exists() and stamp.read_text() == fingerprint:
        return jar
    compiler, mvn, git = _java_compiler(version), shutil.which("mvn"), shutil.which("git")
    missing = [name for name, tool in (("a Java compiler", compiler), ("mvn", mvn), ("git", git)) if tool is None]
    if missing:
        logging.getLogger(__name__).warning("Cassandra runs unpatched: no %s to build %s",
                                            " or ".join(missing), PATCH_SOURCES / version)
        return None
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        work = Path(tmp)
        proc = subprocess.run([mvn, "-q", "-B", "-f", str(POM), "dependency:copy",
                               f"-Dartifact=org.apache.cassandra:cassandra-all:{version}:jar:sources",
                               f"-DoutputDirectory={work}"], capture_output=True, text=True)
        sources = work / f"cassandra-all-{version}-sources.jar"
        if proc.returncode != 0 or not sources.exists():
            logging.getLogger(__name__).warning("Cassandra runs unpatched: mvn could not fetch the %s sources:\n%s",
                                                version, (proc.stdout + proc.stderr)[-1500:])
            return None
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
    stamp.write_text(fingerprint)
    return jar


def tools_dir(version: str = CASSANDRA_VERSION) -> Path:
    return cache_dir("cassandra", version) / "tools"


def build_tools(version: str = CASSANDRA_VERSION) -> Path | None:
    """Compile the project's JMX tools (``java/*.java``, JDK classes only) into :func:`tools_dir`,
    once per source change; None when no compiler is at hand (callers then do without them).

    Compiled by :func:`_java_compiler`."""
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
def cds_dir(version: str = CASSANDRA_VERSION) -> Path:
    return cache_dir("cassandra", version) / "cds"


def cds_key(version: str = CASSANDRA_VERSION, patches: bool | None = None) -> str:
    """What an archive is valid for: this java binary and these jars (an upgrade of either
    names another archive; the JVM itself also refuses a stale one and starts without it)."""
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


def cds_archive(version: str = CASSANDRA_VERSION, patches: bool | None = None) -> Path:
    """The archive for the classpath of a node with (``patches``) or without the patches."""
    return cds_dir(version) / f"cassandra-{cds_key(version, patches)}.jsa"


def cds_classlist(version: str = CASSANDRA_VERSION, patches: bool | None = None) -> Path:
    """The classes a real start loaded (``-XX:DumpLoadedClassList``), the archive's recipe."""
    return cds_dir(version) / f"cassandra-{cds_key(version, patches)}.classlist"


def build_cds_archive(version: str = CASSANDRA_VERSION, patches: bool | None = None) -> Path | None:
    """The install step's AppCDS archive (``java -Xshare:dump``, about 9 s of CPU once), from the
    class list that the first start of an instance on this machine recorded; None while there is
    no class list yet (:class:`~asgard.resources.cassandra.node.CassandraNode` records one and then runs
    this in the background; ``scripts/setup.sh`` runs it too)."""
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


def server_classpath(version: str = CASSANDRA_VERSION, patches: bool | None = None) -> str:
    """A Cassandra instance's classpath: this version's patches (if any, and unless ``patches``
    is False or, with ``patches`` None, ``ASGARD_CASSANDRA_PATCHES=0``) before the release's jars
    (installed by the caller: :func:`install` runs at every start, once is enough)."""
    lib = f"{lib_dir(version)}/*"
    patched = patches_jar(version, patches)
    return f"{patched}{os.pathsep}{lib}" if patched is not None else lib

