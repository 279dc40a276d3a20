"""catalog.py, the rename, errno, unsupported, mknod and fallocate groups (pjdfstest's rename/, the
errno of each call, and the calls keychainfs refuses)."""

import os
import stat
import subprocess

from catalog_base import CTX, R, RENAME_EXCHANGE, RENAME_NOREPLACE, item, renameat2, svc
from common import Fail, expect_absent, expect_content, expect_eq, expect_errno, listdir_b, outcome, step, write_file


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


# ext4 swaps; keychainfs documents EINVAL (docs/paths.md, differences from ext4): two items
# cannot swap key attributes in one SecItemUpdate. Either way nothing may be half done.
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


@R.check("rename/keeps-inode-number")
def rename_keeps_inode():
    d = svc("rename-ino")
    a = item(d, "a", b"1")
    ino = os.stat(a).st_ino
    b = os.path.join(d, "b")
    os.rename(a, b)
    expect_eq("st_ino after rename", os.stat(b).st_ino, ino)


# --- calls keychainfs does not support: a documented errno, never ENOSYS, nothing created ---------

def refused(label, path, fn, *a):
    got, _ = outcome(fn, *a)
    if got == "OK":
        raise Fail("%s succeeded (expected a documented refusal)" % label)
    if got == "ENOSYS":
        raise Fail("%s -> ENOSYS (an unimplemented operation, not a documented errno)" % label)
    expect_absent(path, "%s (%s)" % (label, got))


@R.check("unsupported/link-refused")
def unsupported_link():
    d = svc("link")
    a = item(d, "a", b"1")
    refused("link", os.path.join(d, "b"), os.link, a, os.path.join(d, "b"))
    expect_content(a, b"1")


@R.check("unsupported/symlink-refused-not-ENOSYS")
def unsupported_symlink():
    d = svc("symlink")
    refused("symlink", os.path.join(d, "s"), os.symlink, "target", os.path.join(d, "s"))


@R.check("unsupported/mkfifo-refused-not-ENOSYS")
def unsupported_mkfifo():
    d = svc("mkfifo")
    refused("mkfifo", os.path.join(d, "p"), os.mkfifo, os.path.join(d, "p"))


@R.check("unsupported/O_TMPFILE-refused-not-ENOSYS")
def unsupported_tmpfile():
    d = svc("tmpfile")
    got, fd = outcome(os.open, d, os.O_TMPFILE | os.O_RDWR, 0o600)
    if got == "OK":
        os.close(fd)  # ext4 supports it; an anonymous file here is fine as long as nothing is listed
    elif got == "ENOSYS":
        raise Fail("O_TMPFILE -> ENOSYS")
    expect_eq("listing", listdir_b(d), [])


@R.check("mknod/regular-file")
def mknod_regular():
    """mknod(S_IFREG) creates an empty file on ext4: an empty item here, or a documented refusal."""
    d = svc("mknod")
    p = os.path.join(d, "n")
    got, _ = outcome(os.mknod, p, 0o600 | stat.S_IFREG)
    if got == "OK":
        expect_content(p, b"")
    elif got == "ENOSYS":
        raise Fail("mknod(S_IFREG) -> ENOSYS (an unimplemented operation, not a documented errno)")
    else:
        expect_absent(p, "refused mknod (%s)" % got)


@R.check("fallocate/grows-with-zeros")
def fallocate_grows():
    d = svc("fallocate")
    p = item(d, "f", b"abc")
    fd = os.open(p, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 100)
        expect_eq("fstat size after posix_fallocate(0, 100)", os.fstat(fd).st_size, 100)
    finally:
        os.close(fd)
    expect_content(p, b"abc" + b"\0" * 97)
