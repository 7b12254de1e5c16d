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
    return lib


def tools_dir(version: str = CASSANDRA_VERSION) -> Path:
    return cache_dir("cassandra", version) / "tools"


def build_tools(version: str = CASSANDRA_VERSION) -> Path | None:
    """Compile the project's JMX tools (``java/*.java``, JDK classes only) into :func:`tools_dir`,
    once per source change; None when no compiler is at hand (callers then do without them).

    ``javac`` when the JDK is installed, else the Eclipse compiler that Cassandra ships in its
    lib (``ecj-*.jar``), so a JRE-only machine builds them too."""
    out = tools_dir(version)
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    stamp = out / ".sources"
    fingerprint = "\n".join(f"{p.name} {p.stat().st_size} {p.stat().st_mtime_ns}" for p in sources)
    if stamp.exists() and stamp.read_text() == fingerprint:
        return out
    staging = out.with_name("tools.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    javac = shutil.which("javac")
    ecj = next(lib_dir(version).glob("ecj-*.jar"), None)
    if javac:
        cmd = [javac, "--release", "17", "-d", str(staging)]
    elif ecj and shutil.which("java"):
        cmd = [shutil.which("java"), "-cp", str(ecj), "org.eclipse.jdt.internal.compiler.batch.Main",
               "-17", "-nowarn", "-d", str(staging)]
    else:
        return None
    proc = subprocess.run([*cmd, *map(str, sources)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise InstallError(f"compiling {', '.join(p.name for p in sources)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    stamp_tmp = staging / ".sources"
    stamp_tmp.write_text(fingerprint)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    return out


def classpath(version: str = CASSANDRA_VERSION) -> str:
    return str(install(version) / "*")
