#!/usr/bin/env python3
"""One daemon per vault file (issue 14, item 7): with VAULT mounted on MOUNTED, mounting the same
file again through another name (a hard link, a symlink, the same path) on a second mountpoint must
be refused, and the refusal must name the first daemon's pid. Whatever this script mounts it
unmounts again (only its own mountpoint, by path, and waits for that daemon, by pid).

usage: second_mount.py --cli BIN --vault VAULT --passphrase-file FILE --mounted MOUNTPOINT
                       [--work DIR] [--pid PID]
Prints one JSON object of named checks.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import finish  # noqa: E402


def cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def daemon_of(mountpoint):
    """Pids of keychainfs daemons whose command line names `mountpoint`."""
    found = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            args = cmdline(p)
            if args and args[0].endswith("keychainfs") and "mount" in args and mountpoint in args:
                found.append(int(p))
    return found


def is_mounted(path):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and fields[4] == path:
                return True
    return False


def leftovers(name):
    """The files a daemon made beside a vault name this script made (its lock, SQLite's -wal/-shm)."""
    for suffix in (".lock", "-wal", "-shm", "-journal"):
        try:
            os.unlink(name + suffix)
        except OSError:
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--vault", required=True)
    ap.add_argument("--passphrase-file", required=True)
    ap.add_argument("--mounted", required=True)
    ap.add_argument("--work")
    ap.add_argument("--pid", type=int)
    a = ap.parse_args()
    vault, m1 = os.path.abspath(a.vault), os.path.abspath(a.mounted)
    first = [a.pid] if a.pid else daemon_of(m1)
    if len(first) != 1:
        print("cannot tell the daemon of %s: %s" % (m1, first), file=sys.stderr)
        sys.exit(2)
    first_pid = first[0]
    work = a.work or tempfile.mkdtemp(prefix="keychainfs-second-mount-")
    m2 = os.path.join(os.path.abspath(work), "m2")
    os.makedirs(m2, exist_ok=True)
    base = os.path.join(os.path.dirname(vault), "second-" + os.path.basename(vault))

    def attempt(source):
        try:
            r = subprocess.run([a.cli, "mount", source, m2, "--passphrase-file", a.passphrase_file],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            status, message = r.returncode, (r.stdout + r.stderr).decode(errors="replace").strip()
        except subprocess.TimeoutExpired:
            status, message = None, "timed out after 30 s"
        mounted = is_mounted(m2)
        if mounted:  # ours: undo it, and wait for the daemon it started
            second = daemon_of(m2)
            try:
                subprocess.run([a.cli, "unmount", m2], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=30)
            except subprocess.TimeoutExpired:
                pass
            if is_mounted(m2):
                subprocess.run(["fusermount3", "-u", "-z", m2], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=30)
            deadline = time.time() + 10
            while time.time() < deadline and any(os.path.exists("/proc/%d/cmdline" % p) and cmdline(p)
                                                 for p in second):
                time.sleep(0.1)
            return "FAIL: the second mount succeeded (exit %s; daemons %s and %s on one vault file)" % (
                status, first_pid, second)
        if status is None:
            return "FAIL: keychainfs mount " + message
        if status == 0:
            return "FAIL: exit 0 but nothing mounted on %s: %s" % (m2, message[:200])
        if not re.search(r"\b%d\b" % first_pid, message):
            return "FAIL: refused (exit %d) without naming the first daemon's pid %d: %s" % (
                status, first_pid, message[:300])
        return "ok"

    results = {}
    results["second-mount/same-path-refused-naming-pid"] = attempt(vault)
    link = base + ".hardlink"
    os.link(vault, link)
    try:
        results["second-mount/hard-link-refused-naming-pid"] = attempt(link)
    finally:
        os.unlink(link)
        leftovers(link)
    sym = base + ".symlink"
    os.symlink(vault, sym)
    try:
        results["second-mount/symlink-refused-naming-pid"] = attempt(sym)
    finally:
        os.unlink(sym)
        leftovers(sym)
    dotted = os.path.join(os.path.dirname(vault), ".", os.path.basename(vault))
    results["second-mount/other-spelling-refused-naming-pid"] = attempt(dotted)

    # The first mount is unharmed: it still writes and reads.
    probe = os.path.join(m1, "genp", "second-mount-probe")
    try:
        os.makedirs(probe, exist_ok=True)
        with open(os.path.join(probe, "p"), "wb") as f:
            f.write(b"still here")
        with open(os.path.join(probe, "p"), "rb") as f:
            ok = f.read() == b"still here"
        results["second-mount/first-mount-unharmed"] = "ok" if ok and os.path.exists("/proc/%d" % first_pid) \
            else "FAIL: the first mount or its daemon %d is gone" % first_pid
    except OSError as e:
        results["second-mount/first-mount-unharmed"] = "FAIL: %s" % e
    if not is_mounted(m2):  # rmdir only: never a recursive delete near a mountpoint
        for empty in ([m2, work] if not a.work else [m2]):
            try:
                os.rmdir(empty)
            except OSError:
                pass
    finish(results)


if __name__ == "__main__":
    main()
