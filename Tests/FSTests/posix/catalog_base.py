"""What the catalog's check modules share: the runner, the run's context, a fresh service
directory per check, renameat2 through ctypes."""

import ctypes
import os

from common import Runner, write_file

libc = ctypes.CDLL(None, use_errno=True)
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
R = Runner(default_timeout=30)
CTX = {}


def renameat2(old, new, flags):
    if libc.renameat2(-100, os.fsencode(old), -100, os.fsencode(new), ctypes.c_uint(flags)) < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def svc_path(name):
    """/genp/c-<name>-<run>: the service directory of one check in this run."""
    return os.path.join(CTX["mnt"], "genp", "c-%s-%s" % (name.replace("/", "-").replace("|", "-"), CTX["run"]))


def svc(name):
    """A fresh service directory for one check."""
    d = svc_path(name)
    os.mkdir(d)
    return d


def item(d, leaf, data):
    p = os.path.join(d, leaf)
    write_file(p, data)
    return p
