"""Shared plumbing of the POSIX check scripts (catalog.py, tools.py, stress.py, ...).

Stdlib only. A script registers named checks; each runs in a forked child with a deadline (a
check that hangs in a FUSE call is reported and killed, the others still run), and the script
prints ONE JSON object {"check-name": "ok" | "FAIL: detail", ...} on stdout. Keys starting with
"_" are not checks (summaries). Exit status: 0 when every check is "ok", 1 otherwise, 2 on usage.

Inside a check: raise Fail("detail") (or use expect_* helpers); any other exception becomes
"FAIL: <exception>", an OSError as "FAIL: unexpected ENAME in <where>".
"""

import errno
import json
import os
import select
import signal
import subprocess
import sys
import time
import traceback


class Fail(Exception):
    pass


def en(code):
    """errno name (ENOTSUP spelled EOPNOTSUPP)."""
    n = errno.errorcode.get(code, str(code))
    return "EOPNOTSUPP" if n == "ENOTSUP" else n


def show(b, limit=80):
    """Short printable form of bytes for failure messages."""
    if not isinstance(b, (bytes, bytearray)):
        return repr(b)
    if len(b) <= limit:
        return repr(b)
    return "%r...(%d bytes)" % (b[:limit], len(b))


def outcome(fn, *a, **kw):
    """Calls fn; returns ("OK", value) or (ERRNAME, None)."""
    try:
        return "OK", fn(*a, **kw)
    except OSError as e:
        return en(e.errno), None


def step(label, fn, *a, **kw):
    """fn(*a); an OSError becomes Fail("label: ENAME")."""
    try:
        return fn(*a, **kw)
    except OSError as e:
        raise Fail("%s: %s" % (label, en(e.errno)))


def expect_errno(name, fn, *a, **kw):
    """fn must fail with errno `name` (a string, or a set/tuple of accepted names)."""
    accepted = {name} if isinstance(name, str) else set(name)
    got, value = outcome(fn, *a, **kw)
    if got not in accepted:
        what = getattr(fn, "__name__", str(fn))
        raise Fail("%s%r: expected %s, got %s %s" % (what, tuple(a), "/".join(sorted(accepted)), got,
                                                     show(value) if got == "OK" else ""))


def expect_eq(label, got, want):
    if got != want:
        raise Fail("%s: got %s, want %s" % (label, show(got), show(want)))


# --- file helpers -----------------------------------------------------------------------------

def read_all(path, chunk=1 << 20):
    with open(path, "rb", buffering=0) as f:
        out = b""
        while True:
            b = f.read(chunk)
            if not b:
                return out
            out += b


def fd_read_all(fd, chunk=1 << 20):
    out = b""
    while True:
        b = os.read(fd, chunk)
        if not b:
            return out
        out += b


def write_file(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    fd = os.open(path, flags, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def listdir_b(path):
    return sorted(os.listdir(os.fsencode(path)))


def reader_process(path):
    """Reads `path` from another process (`cat`): the bytes, or the errno name seen by cat."""
    r = subprocess.run(["cat", "--", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    if r.returncode == 0:
        return r.stdout
    return "cat failed: " + r.stderr.decode(errors="replace").strip()


PY_STAT = r"""
import os, sys, errno, json
out = {}
for p in sys.argv[1:]:
    try:
        st = os.stat(p)
        out[p] = st.st_size
    except OSError as e:
        out[p] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


def stat_process(*paths):
    """Sizes (or errno names) of `paths` from another process: {path: size | "ENOENT"}."""
    r = subprocess.run([sys.executable, "-c", PY_STAT] + list(paths), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=20)
    if r.returncode != 0:
        raise Fail("stat process failed: %s" % r.stderr.decode(errors="replace")[-300:])
    return json.loads(r.stdout)


def expect_content(path, want, label=None, other=True):
    """`path` reads `want` at once, in this process and (other=True) from `cat`; size agrees."""
    label = label or os.path.basename(path)
    got, value = outcome(read_all, path)
    if got != "OK":
        raise Fail("%s: read -> %s, want %s" % (label, got, show(want)))
    expect_eq("%s: content" % label, value, want)
    got, st = outcome(os.stat, path)
    if got != "OK":
        raise Fail("%s: stat -> %s after a successful read" % (label, got))
    expect_eq("%s: st_size" % label, st.st_size, len(want))
    if other:
        expect_eq("%s: content from another process (cat)" % label, reader_process(path), want)


def expect_absent(path, label=None, other=True):
    label = label or os.path.basename(path)
    got, _ = outcome(os.stat, path)
    if got != "ENOENT":
        raise Fail("%s: stat -> %s, want ENOENT" % (label, got))
    parent, leaf = os.path.split(path)
    got, names = outcome(listdir_b, parent)
    if got == "OK" and os.fsencode(leaf) in names:
        raise Fail("%s: still listed in its directory" % label)
    if other:
        seen = stat_process(path)[path]
        if seen != "ENOENT":
            raise Fail("%s: another process sees %s, want ENOENT" % (label, seen))


# --- running checks ---------------------------------------------------------------------------

def where(e):
    """`code` (function:line) of the check's own frame and, if deeper, the frame that raised."""
    frames = traceback.extract_tb(e.__traceback__)[1:]
    if not frames:
        return "?"
    spots = [frames[0]] if len(frames) == 1 else [frames[0], frames[-1]]
    return " via ".join("`%s` (%s:%d)" % ((f.line or "").strip(), f.name, f.lineno) for f in spots)


class Runner:
    """Named checks, each in a forked child with a deadline."""

    def __init__(self, default_timeout=30.0):
        self.checks = []  # (name, fn, timeout)
        self.results = {}
        self.times = {}
        self.default_timeout = default_timeout

    def check(self, name, timeout=None):
        def register(fn):
            self.checks.append((name, fn, timeout or self.default_timeout))
            return fn
        return register

    def run_one(self, name, fn, timeout, *args):
        r, w = os.pipe()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the check
            os.close(r)
            try:
                os.setpgid(0, 0)
            except OSError:
                pass
            try:
                fn(*args)
                msg = "ok"
            except Fail as e:
                msg = "FAIL: " + str(e)
            except OSError as e:
                msg = "FAIL: unexpected %s from %s" % (en(e.errno), where(e))
            except BaseException as e:  # noqa: the check's own bug is a failure too
                msg = "FAIL: %s: %s at %s" % (type(e).__name__, e, where(e))
            data = msg.encode("utf-8", "replace")
            while data:
                data = data[os.write(w, data):]
            os._exit(0)
        os.close(w)
        chunks = []
        deadline = started + timeout
        timed_out = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                b = os.read(r, 65536)
                if not b:
                    break
                chunks.append(b)
        os.close(r)
        if timed_out:
            for target in (-pid, pid):
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    pass
        os.waitpid(pid, 0)
        self.times[name] = round(time.monotonic() - started, 2)
        if timed_out:
            return "FAIL: timed out after %.0f s" % timeout
        text = b"".join(chunks).decode("utf-8", "replace")
        return text or "FAIL: the check died without a result"

    def run(self, selected=None, *args):
        for name, fn, timeout in self.checks:
            if selected and name not in selected:
                continue
            self.results[name] = self.run_one(name, fn, timeout, *args)
            sys.stderr.write("%-45s %6.2fs %s\n" % (name, self.times[name], self.results[name][:150]))
            sys.stderr.flush()
        return self.results


def finish(results, extra=None):
    """Prints the one JSON object and exits 0 if every check is ok, else 1."""
    out = dict(results)
    if extra:
        out.update(extra)
    sys.stdout.write(json.dumps(out, ensure_ascii=True, sort_keys=False) + "\n")
    sys.stdout.flush()
    bad = [k for k, v in results.items() if v != "ok"]
    sys.exit(1 if bad else 0)


def unique(prefix):
    return "%s-%d-%d" % (prefix, os.getpid(), int(time.time() * 1000) % 100000000)
