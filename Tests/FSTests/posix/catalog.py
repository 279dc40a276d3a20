#!/usr/bin/env python3
"""Named POSIX checks on a keychainfs mount (issue 14, item 10), grouped like pjdfstest's
directories and go-fuse's posixtest: open, lseek, ftruncate, truncate, write, fstat, unlink,
rename, errno, race, names, hidden, dir, cert.

usage: catalog.py MOUNTPOINT [--loops N] [--only NAME,...] [--list]
                  [--cli BIN --vault VAULT --passphrase-file FILE]

With --cli/--vault/--passphrase-file the "persist/..." checks also run: they write through the
mount, then unmount and mount again with that binary and look again (and in dump-keychain --json).
Every check works in its own service directory /genp/c-<name>, asserts at once (no sleep before
a read-back) and, where it matters, from a second process. Prints one JSON object.
"""

import argparse
import ctypes
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Fail, Runner, expect_absent, expect_content, expect_eq, expect_errno, fd_read_all,  # noqa: E402
                    finish, listdir_b, outcome, reader_process, show, step, write_file)

import catalog_more  # noqa: E402

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


# --- open ---------------------------------------------------------------------------------------

@R.check("open/O_CREAT|O_EXCL")
def open_creat_excl():
    d = svc("open-excl")
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"first")
    os.close(fd)
    expect_errno("EEXIST", os.open, p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    expect_content(p, b"first")


@R.check("open/O_CREAT-existing-keeps-data")
def open_creat_existing():
    d = svc("open-creat")
    p = item(d, "f", b"abcdef")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"X")
    os.close(fd)
    expect_content(p, b"Xbcdef")


@R.check("open/O_TRUNC")
def open_trunc():
    d = svc("open-trunc")
    p = item(d, "f", b"hello world")
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))
    expect_content(p, b"")
    write_file(p, b"new", os.O_WRONLY | os.O_TRUNC)
    expect_content(p, b"new")


@R.check("open/O_APPEND")
def open_append():
    d = svc("open-append")
    p = item(d, "f", b"abc")
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"def")
    os.write(fd, b"gh")
    os.close(fd)
    expect_content(p, b"abcdefgh")
    fd = os.open(p, os.O_RDWR | os.O_APPEND)
    os.write(fd, b"!")
    expect_eq("offset after O_APPEND write", os.lseek(fd, 0, os.SEEK_CUR), 9)
    os.close(fd)
    expect_content(p, b"abcdefgh!")


@R.check("open/O_RDONLY-write-EBADF")
def open_rdonly():
    d = svc("open-rdonly")
    p = item(d, "f", b"ro")
    fd = os.open(p, os.O_RDONLY)
    try:
        expect_errno("EBADF", os.write, fd, b"x")
    finally:
        os.close(fd)
    expect_content(p, b"ro", other=False)


# --- lseek --------------------------------------------------------------------------------------

@R.check("lseek/hole")
def lseek_hole():
    d = svc("lseek-hole")
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"A")
    os.lseek(fd, 10000, os.SEEK_SET)
    os.write(fd, b"B")
    os.close(fd)
    expect_content(p, b"A" + b"\0" * 9999 + b"B")
    fd = os.open(p, os.O_RDONLY)
    try:
        hole = os.lseek(fd, 0, os.SEEK_HOLE)
        if not 0 <= hole <= 10001:
            raise Fail("SEEK_HOLE from 0 = %d, outside the file" % hole)
        expect_eq("SEEK_DATA from 0", os.lseek(fd, 0, os.SEEK_DATA), 0)
        expect_errno("ENXIO", os.lseek, fd, 10001, os.SEEK_DATA)
    finally:
        os.close(fd)


@R.check("lseek/SEEK_END")
def lseek_end():
    d = svc("lseek-end")
    p = item(d, "f", b"hello")
    fd = os.open(p, os.O_RDWR)
    expect_eq("SEEK_END", os.lseek(fd, 0, os.SEEK_END), 5)
    os.write(fd, b" world")
    expect_eq("SEEK_END after write", os.lseek(fd, -5, os.SEEK_END), 6)
    expect_eq("read at SEEK_END-5", os.read(fd, 100), b"world")
    os.lseek(fd, 3, os.SEEK_END)
    os.write(fd, b"!")
    os.close(fd)
    expect_content(p, b"hello world\0\0\0!")


# --- ftruncate / truncate -----------------------------------------------------------------------

@R.check("ftruncate/grow")
def ftruncate_grow():
    d = svc("ftruncate-grow")
    p = item(d, "f", b"abc")
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, 10)
    expect_eq("fstat size after ftruncate(10)", os.fstat(fd).st_size, 10)
    expect_eq("pread after ftruncate(10)", os.pread(fd, 100, 0), b"abc" + b"\0" * 7)
    os.close(fd)
    expect_content(p, b"abc" + b"\0" * 7)


@R.check("ftruncate/shrink")
def ftruncate_shrink():
    d = svc("ftruncate-shrink")
    p = item(d, "f", b"hello world")
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, 5)
    expect_eq("fstat size after ftruncate(5)", os.fstat(fd).st_size, 5)
    expect_eq("pread after ftruncate(5)", os.pread(fd, 100, 0), b"hello")
    os.close(fd)
    expect_content(p, b"hello")


@R.check("truncate/path")
def truncate_path():
    d = svc("truncate-path")
    p = item(d, "f", b"hello world")
    os.truncate(p, 4)
    expect_content(p, b"hell")
    os.truncate(p, 6)
    expect_content(p, b"hell\0\0")
    os.truncate(p, 0)
    expect_content(p, b"")


# --- write / fstat ------------------------------------------------------------------------------

@R.check("write/fsync-then-write-new-file")
def write_fsync_write():
    d = svc("write-fsync")
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"hello ")
    os.fsync(fd)
    expect_content(p, b"hello ", "after fsync")
    os.write(fd, b"world")
    os.close(fd)
    expect_content(p, b"hello world")


@R.check("write/two-fds-different-ranges")
def write_two_fds():
    d = svc("write-two-fds")
    p = item(d, "f", b"aaaaaaaaaa")
    fd1 = os.open(p, os.O_WRONLY)
    fd2 = os.open(p, os.O_WRONLY)
    os.pwrite(fd1, b"XX", 0)
    os.pwrite(fd2, b"YY", 8)
    os.close(fd1)
    os.close(fd2)
    expect_content(p, b"XXaaaaaaYY")


@R.check("fstat/sees-unflushed-writes")
def fstat_unflushed():
    d = svc("fstat-unflushed")
    p = os.path.join(d, "new")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"12345")
    expect_eq("fstat size of a new file after write(5)", os.fstat(fd).st_size, 5)
    os.close(fd)
    q = item(d, "old", b"ab")
    fd = os.open(q, os.O_RDWR)
    os.pwrite(fd, b"cdefg", 2)
    expect_eq("fstat size of an item after pwrite(5 at 2)", os.fstat(fd).st_size, 7)
    os.close(fd)
    expect_content(q, b"abcdefg")


@R.check("read/own-unflushed-writes")
def read_own_unflushed():
    d = svc("read-own")
    p = item(d, "f", b"old value")
    fd = os.open(p, os.O_RDWR)
    os.pwrite(fd, b"NEW", 0)
    expect_eq("pread of the same fd", os.pread(fd, 100, 0), b"NEW value")
    os.close(fd)
    expect_content(p, b"NEW value")


@R.check("isolation/other-process-sees-committed-only")
def isolation_committed():
    d = svc("isolation")
    p = item(d, "f", b"committed")
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"uncommitted")
    seen = reader_process(p)
    os.close(fd)
    if seen not in (b"committed", b""):
        raise Fail("another process read %s while a writer held unflushed bytes" % show(seen))
    expect_content(p, b"uncommitted")
    q = os.path.join(d, "pending")
    fd = os.open(q, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"not yet")
    seen = reader_process(q)
    os.close(fd)
    if seen != b"" and not (isinstance(seen, str) and "No such file" in seen):
        raise Fail("another process read %s from a pending create" % show(seen))
    expect_content(q, b"not yet")


# --- unlink -------------------------------------------------------------------------------------

@R.check("unlink/read-open-fd-after-unlink")
def unlink_read_open():
    d = svc("unlink-read")
    p = item(d, "f", b"old data")
    fd = os.open(p, os.O_RDONLY)
    os.unlink(p)
    expect_absent(p)
    try:
        expect_eq("read of an fd opened before unlink", fd_read_all(fd), b"old data")
        expect_eq("fstat of an fd opened before unlink", os.fstat(fd).st_size, 8)
    finally:
        os.close(fd)


@R.check("unlink/open-file-stays-gone")
def unlink_open_write():
    d = svc("unlink-open")
    p = item(d, "f", b"data")
    fd = os.open(p, os.O_WRONLY)
    os.unlink(p)
    expect_absent(p)
    os.write(fd, b"more bytes")
    got, _ = outcome(os.close, fd)
    expect_absent(p, "after the writer's close (%s)" % got)
    expect_eq("listing", listdir_b(d), [])


@R.check("unlink/missing-ENOENT")
def unlink_missing():
    d = svc("unlink-missing")
    expect_errno("ENOENT", os.unlink, os.path.join(d, "nothing"))


# --- rename -------------------------------------------------------------------------------------

@R.check("rename/onto-existing")
def rename_onto():
    d = svc("rename-onto")
    a, b = item(d, "a", b"AAA"), item(d, "b", b"B")
    os.rename(a, b)
    expect_absent(a)
    expect_content(b, b"AAA")
    expect_eq("listing", listdir_b(d), [b"b"])


@R.check("rename/RENAME_NOREPLACE")
def rename_noreplace():
    d = svc("rename-noreplace")
    a, b = item(d, "a", b"A"), item(d, "b", b"B")
    expect_errno("EEXIST", renameat2, a, b, RENAME_NOREPLACE)
    expect_content(a, b"A")
    expect_content(b, b"B")
    c = os.path.join(d, "c")
    renameat2(a, c, RENAME_NOREPLACE)
    expect_absent(a)
    expect_content(c, b"A")


def exchange_pair(d):
    a, b = item(d, "a", b"first"), item(d, "b", b"second")
    got, _ = outcome(renameat2, a, b, RENAME_EXCHANGE)
    return a, b, got


@R.check("rename/RENAME_EXCHANGE")
def rename_exchange():
    a, b, got = exchange_pair(svc("rename-exchange"))
    if got != "OK":
        raise Fail("renameat2(RENAME_EXCHANGE) -> %s (ext4 swaps)" % got)
    expect_content(a, b"second")
    expect_content(b, b"first")


@R.check("rename/RENAME_EXCHANGE-atomic-or-refused")
def rename_exchange_min():
    a, b, got = exchange_pair(svc("rename-exchange-min"))
    if got == "OK":
        expect_content(a, b"second")
        expect_content(b, b"first")
    elif got in ("EINVAL", "EOPNOTSUPP"):
        expect_content(a, b"first")
        expect_content(b, b"second")
    else:
        raise Fail("renameat2(RENAME_EXCHANGE) -> %s" % got)


@R.check("rename/directory")
def rename_dir():
    d = svc("rename-dir")
    item(d, "x", b"X")
    item(d, "y", b"YY")
    to = d + "-renamed"
    os.rename(d, to)
    expect_eq("new directory listing", listdir_b(to), [b"x", b"y"])
    expect_content(os.path.join(to, "x"), b"X")
    expect_content(os.path.join(to, "y"), b"YY")
    expect_absent(d)
    r = subprocess.run(["ls", to], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    expect_eq("ls of the renamed directory from another process", r.stdout, b"x\ny\n")


@R.check("rename/directory-onto-nonempty-ENOTEMPTY")
def rename_dir_nonempty():
    d = svc("rename-dir-ne")
    e = svc("rename-dir-ne2")
    item(d, "x", b"1")
    item(e, "y", b"2")
    expect_errno(("ENOTEMPTY", "EEXIST"), os.rename, d, e)
    expect_content(os.path.join(d, "x"), b"1")
    expect_content(os.path.join(e, "y"), b"2")


@R.check("rename/directory-onto-empty")
def rename_dir_empty():
    d = svc("rename-dir-e")
    e = svc("rename-dir-e2")
    item(d, "x", b"1")
    os.rename(d, e)
    expect_content(os.path.join(e, "x"), b"1")
    expect_absent(d)


@R.check("rename/file-onto-directory-EISDIR")
def rename_file_dir():
    d = svc("rename-f-d")
    a = item(d, "a", b"1")
    e = svc("rename-f-d2")
    expect_errno("EISDIR", os.rename, a, e)
    expect_content(a, b"1")


@R.check("rename/across-classes-EXDEV")
def rename_exdev():
    d = svc("rename-exdev")
    a = item(d, "a", b"1")
    expect_errno("EXDEV", os.rename, a, os.path.join(CTX["mnt"], "keys", "c-exdev"))
    inet = os.path.join(CTX["mnt"], "inet", "c-exdev-%s.example" % CTX["run"])
    os.mkdir(inet)
    expect_errno("EXDEV", os.rename, a, os.path.join(inet, "a"))
    expect_content(a, b"1")


@R.check("rename/missing-ENOENT")
def rename_missing():
    d = svc("rename-missing")
    expect_errno("ENOENT", os.rename, os.path.join(d, "nothing"), os.path.join(d, "b"))


# --- errno --------------------------------------------------------------------------------------

@R.check("errno/EISDIR")
def errno_eisdir():
    d = svc("eisdir")
    expect_errno("EISDIR", os.open, d, os.O_WRONLY)
    fd = os.open(d, os.O_RDONLY)
    try:
        expect_errno("EISDIR", os.read, fd, 10)
    finally:
        os.close(fd)
    expect_errno("EISDIR", os.unlink, d)


@R.check("errno/ENOTDIR")
def errno_enotdir():
    d = svc("enotdir")
    a = item(d, "a", b"1")
    expect_errno("ENOTDIR", os.open, os.path.join(a, "x"), os.O_RDONLY)
    expect_errno("ENOTDIR", os.listdir, a)
    expect_errno("ENOTDIR", os.rmdir, a)


@R.check("errno/ENAMETOOLONG")
def errno_enametoolong():
    d = svc("enametoolong")
    ok = os.path.join(d, "n" * 255)
    write_file(ok, b"255")
    expect_content(ok, b"255")
    long = os.path.join(d, "n" * 256)
    expect_errno("ENAMETOOLONG", os.open, long, os.O_WRONLY | os.O_CREAT, 0o600)
    expect_errno("ENAMETOOLONG", os.stat, long)
    expect_errno("ENAMETOOLONG", os.mkdir, os.path.join(CTX["mnt"], "genp", "s" * 256))


@R.check("errno/ENOENT")
def errno_enoent():
    d = svc("enoent")
    m = CTX["mnt"]
    expect_errno("ENOENT", os.open, os.path.join(d, "missing"), os.O_RDONLY)
    expect_errno("ENOENT", os.stat, os.path.join(m, "genp", "c-no-such-service"))
    expect_errno("ENOENT", os.open, os.path.join(m, "genp", "c-no-such-service", "a"),
                 os.O_WRONLY | os.O_CREAT, 0o600)
    expect_errno("ENOENT", os.getxattr, os.path.join(d, "missing"), "user.keychain.comment")


@R.check("errno/ENOTEMPTY")
def errno_enotempty():
    d = svc("enotempty")
    a = item(d, "a", b"1")
    expect_errno(("ENOTEMPTY", "EEXIST"), os.rmdir, d)
    expect_content(a, b"1")
    os.unlink(a)
    step("rmdir once its last item is unlinked", os.rmdir, d)
    expect_absent(d)


@R.check("errno/EEXIST")
def errno_eexist():
    d = svc("eexist")
    a = item(d, "a", b"1")
    expect_errno("EEXIST", os.mkdir, d)
    expect_errno("EEXIST", os.open, a, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    expect_content(a, b"1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("--loops", type=int, default=50)
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--cli")
    ap.add_argument("--vault")
    ap.add_argument("--passphrase-file")
    a = ap.parse_args()
    CTX.update(mnt=os.path.abspath(a.mountpoint), loops=a.loops, cli=a.cli, vault=a.vault,
               passfile=a.passphrase_file, run="%04x" % (os.getpid() % 0x10000), svc_path=svc_path)
    catalog_more.register(R, CTX, svc, item)
    if a.list:
        print("\n".join(name for name, _, _ in R.checks))
        return
    if not os.path.isdir(os.path.join(CTX["mnt"], "genp")):
        print("not a keychainfs mount: %s" % CTX["mnt"], file=sys.stderr)
        sys.exit(2)
    selected = set(filter(None, a.only.split(",")))
    results = R.run(selected)
    results.update(catalog_more.after_remount(R, CTX, selected))
    finish(results, {"_seconds": R.times})


if __name__ == "__main__":
    main()
