"""Stopping a server this process did not start: a host's agent restarts a member that another
process launched (its parent), which reaps it only when it gets round to it. Until then the
stopped server is a zombie, and a stop or kill must take it as gone, not wait for it to vanish."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from asgard.resources.process import ManagedServer

pytestmark = pytest.mark.fast

# a parent that starts the server and never reaps it (it sleeps, holding its Popen). SIGTERM's
# default first: an ignored SIGTERM is inherited through exec, and in a whole-suite run something
# before this test left the pytest process ignoring it (the stop then waited 60 s for SIGKILL)
PARENT = ("import signal, subprocess, sys, time\n"
          "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
          "p = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
          "print(p.pid, flush=True)\n"
          "time.sleep(300)\n")


class Sleeper(ManagedServer):
    def command(self) -> list[str]:
        return ["sleep", "300"]

    def is_ready(self) -> bool:
        return self.is_running()


@pytest.fixture
def someone_elses_server(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    server = Sleeper("sleeper", tmp_path)
    server.pid_file.write_text(str(pid))
    yield server, pid
    parent.kill()
    parent.wait()


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_server_whose_parent_is_another_process_is_gone_once_it_exits(someone_elses_server, how):
    server, pid = someone_elses_server
    assert server.is_running() and psutil.Process(pid).ppid() != psutil.Process().pid
    t0 = time.monotonic()
    assert getattr(server, how)() is True
    assert time.monotonic() - t0 < 5  # not the stop's 60 s for a process that will never vanish
    assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # its parent has not reaped it
    assert not server.is_running() and not server.pid_file.exists()


def test_a_server_this_process_started_is_reaped_by_stop(tmp_path):
    server = Sleeper("sleeper", tmp_path)
    server.start()
    pid = server.pid()
    assert server.stop() is True
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
