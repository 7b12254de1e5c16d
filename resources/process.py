"""The one place that starts a server process.

Every server the project runs (Cassandra nodes, Redis, MinIO) is a :class:`ManagedServer`:
it is started detached (it outlives the CLI that started it), tracked by a pid file in its
own run directory, logged to a file there, and probed until it answers. ``start`` and
``stop`` are idempotent.
"""
from __future__ import annotations

import abc
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from .numa import Binding, NumaBindingError, node_binding, observe_binding


#: Start every server with the stop signals at their defaults (coreutils ``env`` execs in place).
#: A child inherits an *ignored* SIGTERM, and the JVM then installs no handler for it: Cassandra
#: never drains, ``stop`` waits out its timeout and SIGKILLs it, and outputs of a keyspace
#: without a commit log that were not flushed are lost. A CI run met exactly that: every node
#: stop took 60 s, and one run lost an output that its step had written.
DEFAULT_SIGNALS = ["env", "--default-signal=HUP,INT,QUIT,TERM"]


class ServerError(RuntimeError):
    """A managed server failed to start, answer or stop."""


class ManagedServer(abc.ABC):
    #: seconds ``start`` waits for :meth:`is_ready`
    start_timeout: float = 120.0

    def __init__(self, name: str, workdir: Path, numa_node: int | None = None, netns: str | None = None):
        self.name = name
        self.workdir = Path(workdir)
        self.numa_node = numa_node
        # a Linux network namespace to run in (``ip netns exec``): the server is then reached
        # over that namespace's link (asgard.resources.network), as a remote host would be
        self.netns = netns

    # --- what a concrete server says -------------------------------------------------
    @abc.abstractmethod
    def command(self) -> list[str]:
        """The argv that runs the server in the foreground."""

    @abc.abstractmethod
    def is_ready(self) -> bool:
        """True when the server answers clients."""

    def prepare(self) -> None:
        """Install binaries and write config files before a start."""

    def exec_wrappers(self) -> list[str]:
        """The argv that :meth:`command` puts in front of the server (a program that execs it in
        place, e.g. ``setpriv``): :meth:`verify_binding` waits until the pid is the server itself."""
        return []

    def environment(self) -> dict[str, str]:
        return dict(os.environ)

    def binding(self) -> Binding | None:
        """Where the server must run (numactl binds it there, :meth:`start` checks it in /proc);
        None: not pinned. The base class binds to ``numa_node`` when one is given."""
        return None if self.numa_node is None else node_binding(self.numa_node)

    @property
    def endpoint(self) -> str:
        return ""

    # --- lifecycle -------------------------------------------------------------------
    @property
    def pid_file(self) -> Path:
        return self.workdir / "server.pid"

    @property
    def log_file(self) -> Path:
        return self.workdir / "server.log"

    @property
    def binding_file(self) -> Path:
        """The binding the running server was launched with (absent: launched unpinned)."""
        return self.workdir / "binding.json"

    def pid(self) -> int | None:
        """The live server's pid, or None (a stale pid file is ignored)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.NoSuchProcess:
            return None
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def start(self, timeout: float | None = None) -> float:
        """Start (or find running) and wait until ready; returns seconds spent."""
        t0 = time.monotonic()
        if self.is_running():
            self.wait_ready(timeout)
            return time.monotonic() - t0
        if self.is_ready():
            # another process (another workdir's, or a leftover) holds the address: waiting for
            # "ready" would take it for ours and talk to the wrong server
            raise ServerError(
                f"{self.name}: its address already answers, but not from a process started from "
                f"{self.workdir}. Stop that server first (another workdir's instance, or a leftover)."
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        binding = self.binding()
        pin = binding.numactl_args() if binding is not None else []
        argv = DEFAULT_SIGNALS + self.netns_prefix() + pin + self.command()
        if binding is not None:
            self.binding_file.write_text(json.dumps(binding.to_dict()))
        else:
            self.binding_file.unlink(missing_ok=True)
        with open(self.log_file, "ab") as log:
            log.write(f"\n=== start {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(argv)}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                argv,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,  # outlives the CLI and is not hit by its Ctrl-C
            )
        self.pid_file.write_text(str(proc.pid))
        self.wait_ready(timeout, proc)
        if binding is not None:
            self.verify_binding(binding, wrappers=[argv[0], *self.netns_prefix()[:1], *pin[:1],
                                                   *self.exec_wrappers()[:1]])
        return time.monotonic() - t0

    def verify_binding(self, binding: Binding, wrappers: list[str] = (), timeout: float = 10.0):
        """Check the launched server's binding in /proc against ``binding``; on a mismatch stop it
        and raise :class:`NumaBindingError` saying what was planned and what was found.

        ``env``, ``ip netns exec`` and ``numactl`` exec in place, so the recorded pid becomes the
        server itself; until the last exec the pid may still be a wrapper (a server that is
        ready at once, or a slow exec), so this waits until /proc shows another executable.
        """
        pid = self.pid()
        if pid is None:
            raise ServerError(f"{self.name} exited right after it started; see {self.log_file}")
        wrapper_exes = {os.path.realpath(shutil.which(w) or w) for w in wrappers}
        deadline = time.monotonic() + timeout
        seen = observe_binding(pid)
        while seen.exe in wrapper_exes and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = observe_binding(pid)
        problems = [f"pid {pid} is still {seen.exe} after {timeout:.0f}s"] if seen.exe in wrapper_exes else []
        problems += binding.problems(seen)
        if problems:
            self.stop()
            raise NumaBindingError(
                f"{self.name} (pid {pid}, {seen.exe}) is not bound as planned, so it was stopped. "
                f"Planned: {binding.describe()}. Found in /proc/{pid}: {seen.describe()}. "
                + "; ".join(problems))
        with open(self.log_file, "a") as log:
            log.write(f"=== binding verified in /proc/{pid}: {seen.describe()}\n")
        return seen

    def launched_binding(self) -> Binding | None:
        try:
            return Binding.from_dict(json.loads(self.binding_file.read_text()))
        except (FileNotFoundError, ValueError, KeyError):
            return None

    def binding_status(self) -> dict | None:
        """The running server's binding from /proc against the one it was launched with
        (None when it is not running)."""
        pid = self.pid()
        if pid is None:
            return None
        try:
            seen = observe_binding(pid)
        except NumaBindingError:
            return None
        expected = self.launched_binding()
        problems = expected.problems(seen) if expected is not None else []
        return {"planned": expected.to_dict() if expected else None, "observed": seen.to_dict(),
                "text": seen.describe(), "ok": not problems, "problems": problems}

    def netns_prefix(self) -> list[str]:
        """``ip netns exec NS`` for a server in a namespace (it execs in place: the pid stays the
        server's), or nothing."""
        if self.netns is None:
            return []
        from .network.namespace import netns_exec_prefix

        return netns_exec_prefix(self.netns)

    def wait_ready(self, timeout: float | None = None, proc: subprocess.Popen | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise ServerError(
                    f"{self.name} exited with code {proc.returncode} while starting; "
                    f"last lines of {self.log_file}:\n{self.tail_log()}"
                )
            if self.is_ready():
                return
            time.sleep(0.25)
        raise ServerError(
            f"{self.name} did not answer within {timeout or self.start_timeout:.0f}s; "
            f"last lines of {self.log_file}:\n{self.tail_log()}"
        )

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); False if it was not running."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        proc = psutil.Process(pid)
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            proc.terminate()
        if not _gone(proc, timeout):
            os.killpg(pid, signal.SIGKILL)
            if not _gone(proc, 10):
                raise ServerError(f"{self.name} (pid {pid}) outlived SIGKILL by 10 s")
        self.pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> bool:
        """SIGKILL the server now, as a crash or the OOM killer would (fault tests): nothing is
        flushed. False if it was not running."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            proc = psutil.Process(pid)
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
        else:
            if not _gone(proc, 30):
                raise ServerError(f"{self.name} (pid {pid}) outlived SIGKILL by 30 s")
        self.pid_file.unlink(missing_ok=True)
        return True

    def restart(self, timeout: float | None = None) -> float:
        t0 = time.monotonic()
        self.stop()
        self.start(timeout)
        return time.monotonic() - t0

    def status(self) -> dict:
        pid = self.pid()
        return {
            "name": self.name,
            "running": pid is not None,
            "ready": pid is not None and self.is_ready(),
            "pid": pid,
            "endpoint": self.endpoint,
            "workdir": str(self.workdir),
            "log": str(self.log_file),
            "binding": self.binding_status() if pid is not None else None,
        }

    def tail_log(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def cpu_seconds(self) -> float:
        """User+system CPU seconds used by the server process so far (for cost reports)."""
        pid = self.pid()
        if pid is None:
            return 0.0
        return process_cpu_seconds(pid)


def _at_once(servers: list[ManagedServer], action) -> list:
    """``action(server)`` for every server in threads of its own; the results in order."""
    from concurrent.futures import ThreadPoolExecutor

    if not servers:
        return []
    with ThreadPoolExecutor(len(servers), thread_name_prefix="asgard-servers") as pool:
        return list(pool.map(action, servers))


def start_all(servers: list[ManagedServer]) -> dict[str, float]:
    """Start ``servers`` at once, each waited for as :meth:`ManagedServer.start` does; the seconds
    each took, by name. Workers spend their start importing their orchestrator, which overlaps."""
    return dict(zip((s.name for s in servers), _at_once(servers, lambda s: s.start())))


def stop_all(servers: list[ManagedServer]) -> list[bool]:
    """Stop ``servers`` at once (each as :meth:`ManagedServer.stop`); whether each was running."""
    return _at_once(servers, lambda s: s.stop())


def _gone(proc: psutil.Process, timeout: float) -> bool:
    """Whether ``proc`` exits within ``timeout`` seconds. A zombie is gone: its parent may be
    another process that has not reaped it yet (a host's agent restarting a member that another
    process started), and only the parent can."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                proc.wait(0) if proc.ppid() == os.getpid() else None  # ours: reaped now
                return True
        except (psutil.NoSuchProcess, psutil.TimeoutExpired, ChildProcessError):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process ``pid``, all its threads, to the nanosecond where /proc allows.

    /proc/<pid>/stat counts whole clock ticks (10 ms): a Redis serving a small run moves by
    less than one, and a delta of two readings read 0.0 (a CI run). The threads' own
    ``schedstat`` run times are in nanoseconds but miss threads that have exited. Both are
    lower bounds of the true figure, so the larger is the closer one.
    """
    proc = psutil.Process(pid)
    t = proc.cpu_times()
    ticks = t.user + t.system
    ns = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ns += int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                continue  # the thread exited between listing and reading
    except FileNotFoundError:  # no schedstat on this kernel (CONFIG_SCHED_INFO off)
        return ticks
    return max(ticks, ns / 1e9)


class ThreadCpuClock:
    """CPU seconds of process ``pid`` to the nanosecond, for differences between readings: the sum
    of each thread's ``schedstat`` run time, a thread that has exited counted at its last reading.

    :func:`process_cpu_seconds` is a total; its difference over a short span (one 1 MiB read, a
    few ms of server CPU) moves in whole 10 ms ticks, and read 0.00 s/GB for a JVM whose exited
    threads keep its tick count above the live threads' run time. Only a thread that starts and
    exits between two readings is missed (none in a serving JVM, Redis or MinIO here)."""

    def __init__(self, pid: int, thread_names: tuple[str, ...] = ()):
        self.pid = pid
        #: with names, only threads whose name (``comm``, 15 characters) starts with one of them count
        self.thread_names = thread_names
        self._last: dict[int, int] = {}  # thread id -> run time (ns) at its last reading
        self._named: dict[int, bool] = {}  # thread id -> counted (names are read once per thread)

    def _counted(self, tid: str) -> bool:
        if not self.thread_names:
            return True
        if int(tid) not in self._named:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/comm") as f:
                    self._named[int(tid)] = f.read().startswith(self.thread_names)
            except (FileNotFoundError, ProcessLookupError):
                return False
        return self._named[int(tid)]

    def seconds(self) -> float:
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except FileNotFoundError:  # the process is gone: what it had run by the last reading
            tids = []
        for tid in tids:
            if not self._counted(tid):
                continue
            try:
                with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                    self._last[int(tid)] = int(f.read().split()[0])
            except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
                continue  # exited between listing and reading: its last reading stands
        return sum(self._last.values()) / 1e9

    @property
    def threads(self) -> int:
        """How many threads counted so far (with names: how many matched)."""
        return len(self._last)


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of ``pid`` so far, for
    differences (a server that hands a request between threads switches once or twice a hand-off)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except FileNotFoundError:  # a thread that ended
            continue
    return total


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
