"""One process of stress.py: random operations, each outcome compared with a model of the worker's
own acknowledged operations (private names) or recorded for the parent (shared names)."""

import hashlib
import os
import time

from common import en

UNKNOWN = "<unknown>"  # a comment the model cannot predict (see rename below)
COMMENT = "user.keychain.comment"
CHUNK = 4096  # reads in 4 KiB calls, so a value changing between calls shows as a torn read


def digest(b):
    return hashlib.sha1(b).hexdigest()[:16]


class Entry:
    """What the model knows of one private name: its bytes, its comment (None = never set,
    UNKNOWN), and whether it is "fresh" (created through the mount, no attribute set since: such a
    file renamed onto an item gives that item its bytes and the item keeps its own attributes,
    docs/paths.md rule 6)."""

    def __init__(self, data, comment=None, fresh=True):
        self.data, self.comment, self.fresh = data, comment, fresh


class Worker:
    def __init__(self, index, d, rng, shared_trunc, shared_swap, private_names=4):
        self.i, self.d, self.rng = index, d, rng
        self.shared_trunc, self.shared_swap = shared_trunc, shared_swap
        self.names = ["p%d-%d" % (index, k) for k in range(private_names)]
        self.model = {}
        self.seq = 0
        self.ops = {}
        self.unexpected = []  # {"kind", "errno", "text"}
        self.mismatches = []
        self.shared_writes = []  # [name, digest, acknowledged]
        self.shared_reads = []  # [name, digest, head]
        self.weights = [("read", 22), ("create", 12), ("overwrite", 10), ("append", 7), ("ftruncate", 4),
                        ("rename", 8), ("unlink", 8), ("setxattr", 6), ("shared_write", 7), ("shared_swap", 5),
                        ("shared_read", 14)]
        self.total = sum(w for _, w in self.weights)

    # --- bookkeeping ---------------------------------------------------------------------------

    def path(self, name):
        return os.path.join(self.d, name)

    def value(self, small=False):
        self.seq += 1
        head = ("w%d.%d;" % (self.i, self.seq)).encode()
        n = self.rng.choice([0, 1, 5, 100, 3000, 9000, 20000]) if not small else self.rng.choice([0, 1, 7, 50])
        if n == 0:
            return b""
        return (head * (n // len(head) + 1))[:n]

    def shared_value(self):
        self.seq += 1
        head = ("w%d.%d;" % (self.i, self.seq)).encode()
        n = self.rng.choice([20, 5000, 12000])
        return (head * (n // len(head) + 1))[:n]

    def unexpected_errno(self, kind, op, name, got, want):
        self.unexpected.append({"kind": kind, "errno": got, "op": op,
                                "text": "w%d %s %s: %s, model says %s" % (self.i, op, name, got, want)})

    def resync(self, name):
        """After an unexpected outcome the model no longer knows the name: take what is there."""
        try:
            with open(self.path(name), "rb") as f:
                self.model[name] = Entry(f.read(), UNKNOWN, fresh=False)
        except OSError:
            self.model.pop(name, None)

    def call(self, kind, op, name, want, fn):
        """Runs fn; compares its outcome ("OK" or errno name) with `want`; True when it succeeded."""
        try:
            fn()
            got = "OK"
        except OSError as e:
            got = en(e.errno)
        if got != want:
            self.unexpected_errno(kind, op, name, got, want)
            if kind == "private":
                self.resync(name)
            return None
        return got == "OK"

    # --- private operations ---------------------------------------------------------------------

    def write_whole(self, path, flags, data):
        fd = os.open(path, flags, 0o600)
        try:
            if data:
                os.write(fd, data)
        finally:
            os.close(fd)

    def op_create(self, name):
        data = self.value()
        want = "EEXIST" if name in self.model else "OK"
        if self.call("private", "create", name, want,
                     lambda: self.write_whole(self.path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, data)):
            self.model[name] = Entry(data)

    def op_overwrite(self, name):
        data = self.value()
        want = "OK" if name in self.model else "ENOENT"
        if self.call("private", "overwrite", name, want,
                     lambda: self.write_whole(self.path(name), os.O_WRONLY | os.O_TRUNC, data)):
            self.model[name].data = data

    def op_append(self, name):
        data = self.value(small=True)
        want = "OK" if name in self.model else "ENOENT"
        if self.call("private", "append", name, want,
                     lambda: self.write_whole(self.path(name), os.O_WRONLY | os.O_APPEND, data)):
            self.model[name].data += data

    def op_ftruncate(self, name):
        size = self.rng.choice([0, 3, 567, 5000])
        want = "OK" if name in self.model else "ENOENT"

        def go():
            fd = os.open(self.path(name), os.O_RDWR)
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)
        if self.call("private", "ftruncate", name, want, go):
            e = self.model[name]
            e.data = e.data[:size] + b"\0" * max(0, size - len(e.data))

    def op_rename(self, src):
        dst = self.rng.choice([n for n in self.names if n != src])
        want = "OK" if src in self.model else "ENOENT"
        if self.call("private", "rename", "%s->%s" % (src, dst), want,
                     lambda: os.rename(self.path(src), self.path(dst))):
            moved, old = self.model.pop(src), self.model.get(dst)
            if old is not None and moved.fresh:
                # rule 6: the item keeps its attributes (or, if that rule goes, takes the file's).
                comment = old.comment if old.comment == moved.comment else UNKNOWN
                moved = Entry(moved.data, comment, fresh=old.fresh and moved.fresh)
            self.model[dst] = moved

    def op_unlink(self, name):
        want = "OK" if name in self.model else "ENOENT"
        if self.call("private", "unlink", name, want, lambda: os.unlink(self.path(name))):
            del self.model[name]

    def op_setxattr(self, name):
        comment = ("comment w%d.%d" % (self.i, self.seq)).encode()
        self.seq += 1
        want = "OK" if name in self.model else "ENOENT"
        if self.call("private", "setxattr", name, want, lambda: os.setxattr(self.path(name), COMMENT, comment)):
            e = self.model[name]
            e.comment, e.fresh = comment, False
            self.check_comment(name, "right after setxattr")

    def check_comment(self, name, when):
        e = self.model.get(name)
        if e is None or e.comment == UNKNOWN:
            return
        try:
            got = os.getxattr(self.path(name), COMMENT)
        except OSError as err:
            got = en(err.errno)
        want = e.comment if e.comment is not None else "ENODATA"
        if got != want:
            self.mismatches.append("w%d %s: comment %r, model %r (%s)" % (self.i, name, got, want, when))
            e.comment = UNKNOWN

    def op_read(self, name):
        e = self.model.get(name)
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except OSError as err:
            if e is not None or en(err.errno) != "ENOENT":
                self.unexpected_errno("private", "read", name, en(err.errno), "OK" if e else "ENOENT")
                self.resync(name)
            return
        try:
            size = os.fstat(fd).st_size
            data = b""
            while True:
                b = os.read(fd, CHUNK)
                if not b:
                    break
                data += b
        except OSError as err:
            self.unexpected_errno("private", "read", name, en(err.errno), "OK")
            self.resync(name)
            return
        finally:
            os.close(fd)
        if e is None:
            self.unexpected_errno("private", "read", name, "OK (%d bytes)" % len(data), "ENOENT")
            self.resync(name)
            return
        if data != e.data or size != len(e.data):
            self.mismatches.append("w%d %s: read %d bytes %s (size %d), model %d bytes %s" % (
                self.i, name, len(data), digest(data), size, len(e.data), digest(e.data)))
            e.data = data
        self.check_comment(name, "at read")

    # --- shared operations ----------------------------------------------------------------------

    def op_shared_write(self, _):
        name = self.rng.choice(self.shared_trunc)
        data = self.shared_value()
        ok = self.call("shared", "overwrite", name, "OK",
                       lambda: self.write_whole(self.path(name), os.O_WRONLY | os.O_TRUNC, data))
        self.shared_writes.append([name, digest(data), bool(ok)])

    def op_shared_swap(self, _):
        name = self.rng.choice(self.shared_swap)
        tmp = self.path("tmp-w%d" % self.i)
        data = self.shared_value()
        if not self.call("shared", "temp create", tmp, "OK",
                         lambda: self.write_whole(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, data)):
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return
        ok = self.call("shared", "rename onto", name, "OK", lambda: os.rename(tmp, self.path(name)))
        self.shared_writes.append([name, digest(data), bool(ok)])
        if not ok:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def op_shared_read(self, _):
        name = self.rng.choice(self.shared_trunc + self.shared_swap)
        try:
            with open(self.path(name), "rb", buffering=0) as f:
                data = b""
                while True:
                    b = f.read(CHUNK)
                    if not b:
                        break
                    data += b
        except OSError as err:
            self.unexpected_errno("shared", "read", name, en(err.errno), "OK")
            return
        self.shared_reads.append([name, digest(data), data[:24].decode("ascii", "replace")])

    # --- the loop -------------------------------------------------------------------------------

    def pick(self):
        x = self.rng.randrange(self.total)
        for op, w in self.weights:
            if x < w:
                return op
            x -= w
        return self.weights[-1][0]

    def run(self, deadline):
        while time.time() < deadline:
            op = self.pick()
            self.ops[op] = self.ops.get(op, 0) + 1
            getattr(self, "op_" + op)(self.rng.choice(self.names))

    def report(self):
        final = {n: ([digest(self.model[n].data), len(self.model[n].data)] if n in self.model else None)
                 for n in self.names}
        return {"worker": self.i, "ops": self.ops, "unexpected": self.unexpected, "mismatches": self.mismatches,
                "shared_writes": self.shared_writes, "shared_reads": self.shared_reads, "final": final}
