#!/usr/bin/env python3
"""Named POSIX checks on a keychainfs mount (issue 14, item 10), grouped like pjdfstest's
directories and go-fuse's posixtest: open, lseek, ftruncate, truncate, write, fstat, unlink,
rename, errno, race, names, hidden, dir, cert.

usage: catalog.py MOUNTPOINT [--loops N] [--only NAME,...] [--list]
                  [--cli BIN --vault VAULT --passphrase-file FILE]

With --cli/--vault/--passphrase-file, three names/ checks whose items the CLI adds also run, and
the hidden/ checks get their second half: after all checks the script unmounts and mounts again
with that binary, and each hidden/ name must still read its secret (scratch names must be gone)
and be in dump-keychain --json. Every check works in its own service directory
/genp/c-<name>-<run> (catalog_base.py), asserts at once (no sleep before a read-back) and, where
it matters, from a second process. Prints one JSON object; progress lines go to stderr.
Modules: catalog.py (open, lseek, ftruncate, truncate, write, fstat, read, isolation, unlink, xattr),
catalog_rename.py (rename, errno, unsupported, mknod, fallocate), catalog_more.py (race, names, hidden, dir, cert).
"""

import argparse
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (Fail, expect_absent, expect_content, expect_eq, expect_errno, fd_read_all, finish,  # noqa: E402
                    listdir_b, outcome, reader_process, show, write_file)

import catalog_more  # noqa: E402
from catalog_base import CTX, R, item, svc, svc_path  # noqa: E402


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

def fsync_then_write(name, read_between):
    d = svc(name)
    p = os.path.join(d, "f")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"hello ")
    os.fsync(fd)
    if read_between:
        expect_content(p, b"hello ", "after fsync")
    os.write(fd, b"world")
    os.close(fd)
    expect_content(p, b"hello world")


@R.check("write/fsync-then-write-new-file")
def write_fsync_write():
    fsync_then_write("write-fsync", False)


@R.check("write/fsync-read-then-write-new-file")
def write_fsync_read_write():
    fsync_then_write("write-fsync-read", True)


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


# --- xattr: attribute changes are seen at once, and a path-changing one moves the name at once ----

PY_GETX = "import os, sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], sys.argv[2]))"


@R.check("xattr/comment-seen-at-once-by-another-process")
def xattr_comment():
    d = svc("xattr-comment")
    p = item(d, "a", b"1")
    os.setxattr(p, "user.keychain.comment", b"first note")
    expect_eq("getxattr", os.getxattr(p, "user.keychain.comment"), b"first note")
    r = subprocess.run([sys.executable, "-c", PY_GETX, p, "user.keychain.comment"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=20)
    expect_eq("getxattr from another process", (r.returncode, r.stdout), (0, b"first note"))
    if "user.keychain.comment" not in os.listxattr(p):
        raise Fail("listxattr lacks user.keychain.comment")
    expect_content(p, b"1")


@R.check("xattr/account-setxattr-renames-at-once")
def xattr_account():
    d = svc("xattr-account")
    p = item(d, "a", b"secret a")
    os.setxattr(p, "user.keychain.account", b"b")
    expect_content(os.path.join(d, "b"), b"secret a")
    expect_absent(p)
    expect_eq("listing", listdir_b(d), [b"b"])


@R.check("xattr/service-setxattr-moves-at-once")
def xattr_service():
    d = svc("xattr-service")
    p = item(d, "a", b"moving")
    to = d + "-moved"
    os.setxattr(p, "user.keychain.service", os.fsencode(os.path.basename(to)))
    expect_content(os.path.join(to, "a"), b"moving")
    expect_absent(p)


import catalog_rename  # noqa: E402,F401 (registers the rename and errno groups, in this order)

assert catalog_rename


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
