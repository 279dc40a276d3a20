#!/usr/bin/env python3
"""The tool matrix of issue 14 (item 10): ordinary tools editing items through the mount, each
result read back at once (this process and `cat` from another), the directory listing exact (no
stray temp files, no `?????????`), the tool's exit status 0 and its stderr empty.

usage: tools.py MOUNTPOINT [--only NAME,...] [--list] [--loops N]

Each check works in its own service directory /genp/t-<name>-<run>. A tool that is not installed
is a failure ("FAIL: rsync not installed"), so a CI image that lacks it is noticed.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Fail, Runner, expect_content, expect_eq, finish, listdir_b, show, write_file  # noqa: E402

R = Runner(default_timeout=60)
CTX = {}


def svc(name):
    d = os.path.join(CTX["mnt"], "genp", "t-%s-%s" % (name, CTX["run"]))
    os.mkdir(d)
    return d


def local(name):
    """A fresh directory outside the mount."""
    d = os.path.join(CTX["work"], name)
    os.makedirs(d)
    return d


def sh(script, *args, cwd=None, ok_stderr=False):
    """Runs `sh -c script sh args...`; fails unless exit 0 and (unless ok_stderr) stderr empty."""
    r = subprocess.run(["sh", "-c", script, "sh"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       cwd=cwd, timeout=40)
    if r.returncode != 0 or (r.stderr and not ok_stderr):
        raise Fail("`%s` exit %d, stderr %s" % (script, r.returncode, show(r.stderr, 300)))
    return r.stdout


def need(tool):
    if shutil.which(tool) is None:
        raise Fail("%s not installed" % tool)


def listing(d, want):
    expect_eq("listing of %s" % os.path.basename(d), listdir_b(d), sorted(os.fsencode(n) for n in want))
    r = subprocess.run(["ls", "-l", d], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    if r.returncode != 0 or b"?????????" in r.stdout or r.stderr:
        raise Fail("ls -l %s: exit %d %s %s" % (d, r.returncode, show(r.stdout, 200), show(r.stderr, 200)))


@R.check("sed-i-twice-then-cat")
def sed_twice():
    d = svc("sed")
    for i in range(CTX["loops"]):
        f = os.path.join(d, "f%d" % i)
        write_file(f, b"a b c\n")
        out = sh('sed -i s/a/A/ "$1" && sed -i s/b/B/ "$1" && cat "$1"', f)
        expect_eq("run %d: cat right after two sed -i" % i, out, b"A B c\n")
        expect_content(f, b"A B c\n", "run %d" % i)
    listing(d, ["f%d" % i for i in range(CTX["loops"])])


@R.check("perl-pi")
def perl_pi():
    need("perl")
    d = svc("perl")
    f = os.path.join(d, "f")
    write_file(f, b"token=old\n")
    out = sh('perl -pi -e s/old/new/ "$1" && cat "$1"', f)
    expect_eq("cat right after perl -pi", out, b"token=new\n")
    expect_content(f, b"token=new\n")
    listing(d, ["f"])


PY_ATOMIC = r"""
import os, sys, tempfile
path, data = sys.argv[1], sys.argv[2].encode()
fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
os.write(fd, data); os.fsync(fd); os.close(fd)
os.replace(tmp, path)
sys.stdout.buffer.write(open(path, 'rb').read())
"""


@R.check("python-tempfile-os-replace")
def python_atomic():
    d = svc("pyatomic")
    f = os.path.join(d, "f")
    write_file(f, b"v0")
    for i in range(1, 6):
        r = subprocess.run([sys.executable, "-c", PY_ATOMIC, f, "v%d" % i], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        if r.returncode != 0:
            raise Fail("write %d: exit %d %s" % (i, r.returncode, show(r.stderr[-300:], 300)))
        expect_eq("write %d: read by the writer right after os.replace" % i, r.stdout, b"v%d" % i)
        expect_content(f, b"v%d" % i, "write %d" % i)
    listing(d, ["f"])


@R.check("mv-onto-item")
def mv_onto():
    d = svc("mv")
    f, t = os.path.join(d, "f"), os.path.join(d, "t")
    write_file(f, b"old")
    write_file(t, b"new from t")
    out = sh('mv "$1" "$2" && cat "$2"', t, f)
    expect_eq("cat right after mv", out, b"new from t")
    expect_content(f, b"new from t")
    listing(d, ["f"])
    src = os.path.join(local("mv-src"), "outside")
    write_file(src, b"from outside")
    out = sh('mv "$1" "$2" && cat "$2"', src, f)
    expect_eq("cat right after mv from outside the mount", out, b"from outside")
    expect_content(f, b"from outside")
    listing(d, ["f"])


@R.check("touch-then-echo")
def touch_echo():
    d = svc("touch")
    for i in range(CTX["loops"]):
        f = os.path.join(d, "f%d" % i)
        out = sh('touch "$1" && echo secret > "$1" && cat "$1"', f)
        expect_eq("run %d: cat" % i, out, b"secret\n")
        expect_content(f, b"secret\n", "run %d" % i)


@R.check("install-m600")
def install():
    d = svc("install")
    src = os.path.join(local("install"), "src")
    write_file(src, b"installed\n")
    f = os.path.join(d, "f")
    out = sh('install -m600 "$1" "$2" && cat "$2"', src, f)
    expect_eq("cat after install onto a new name", out, b"installed\n")
    write_file(src, b"installed again\n")
    out = sh('install -m600 "$1" "$2" && cat "$2"', src, f)
    expect_eq("cat after install onto an item", out, b"installed again\n")
    expect_content(f, b"installed again\n")
    listing(d, ["f"])


FILES = {"one": b"first secret\n", "two": b"\x00binary\xff\n", "three": b""}


def fill(dirpath):
    for name, data in FILES.items():
        write_file(os.path.join(dirpath, name), data)


def same_files(d, label):
    for name, data in FILES.items():
        expect_content(os.path.join(d, name), data, "%s: %s" % (label, name))
    listing(d, FILES)


@R.check("cp-a-in-and-out")
def cp_a():
    src = local("cp-src")
    fill(src)
    d = svc("cp")
    sh('cp -a "$1"/. "$2"/ && cat "$2"/one', src, d)
    same_files(d, "cp -a in")
    sh('cp -a "$1"/. "$2"/', src, d)
    same_files(d, "cp -a in again (onto items)")
    out = os.path.join(local("cp-out"), "x")
    sh('cp -a "$1" "$2"', d, out)
    for name, data in FILES.items():
        expect_eq("cp -a out: %s" % name, open(os.path.join(out, name), "rb").read(), data)


@R.check("rsync-aX-in-and-out")
def rsync():
    need("rsync")
    src = local("rsync-src")
    fill(src)
    d = svc("rsync")
    sh('rsync -aX "$1"/ "$2"/', src, d)
    same_files(d, "rsync -aX in")
    write_file(os.path.join(src, "one"), b"changed secret\n")
    os.utime(os.path.join(src, "one"), (1, 1))
    sh('rsync -aX "$1"/ "$2"/', src, d)
    expect_content(os.path.join(d, "one"), b"changed secret\n", "rsync -aX in again")
    FILES_AFTER = dict(FILES, one=b"changed secret\n")
    out = local("rsync-out")
    sh('rsync -aX "$1"/ "$2"/', d, out)
    for name, data in FILES_AFTER.items():
        expect_eq("rsync -aX out: %s" % name, open(os.path.join(out, name), "rb").read(), data)


@R.check("rsync-aX-round-trip")
def rsync_round_trip():
    """A backup made with rsync -aX (it carries the user.keychain.* xattrs) restored onto the items
    without them (docs/xattrs.md: the bytes alone): the items keep their own attributes.
    CrossClassToolTests restores one with its xattrs."""
    need("rsync")
    d = svc("rsync-rt")
    for name, data in FILES.items():
        write_file(os.path.join(d, name), data)
    backup = local("rsync-backup")
    sh('rsync -aX "$1"/ "$2"/', d, backup)
    write_file(os.path.join(backup, "one"), b"restored secret\n")
    os.utime(os.path.join(backup, "one"), (2, 2))
    sh('rsync -aX --filter="-x user.keychain.*" "$1"/ "$2"/', backup, d)
    expect_content(os.path.join(d, "one"), b"restored secret\n", "restored")
    expect_content(os.path.join(d, "two"), FILES["two"], "untouched")
    listing(d, FILES)


@R.check("tar-in-and-out")
def tar():
    src = local("tar-src")
    fill(src)
    archive = os.path.join(CTX["work"], "in.tar")
    with tarfile.open(archive, "w") as t:
        for name in FILES:
            t.add(os.path.join(src, name), arcname=name)
    d = svc("tar")
    sh('tar -xf "$1" -C "$2"', archive, d)
    same_files(d, "tar -x in")
    sh('tar -xf "$1" -C "$2"', archive, d)
    same_files(d, "tar -x in again (onto items)")
    out_archive = os.path.join(CTX["work"], "out.tar")
    sh('tar -cf "$1" -C "$2" .', out_archive, d)
    with tarfile.open(out_archive) as t:
        got = {m.name.lstrip("./"): t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
    expect_eq("tar -c out", got, FILES)


@R.check("truncate-s")
def truncate_s():
    d = svc("truncate")
    f = os.path.join(d, "f")
    write_file(f, b"hello world")
    expect_eq("after truncate -s 5", sh('truncate -s 5 "$1" && cat "$1"', f), b"hello")
    expect_eq("after truncate -s 8", sh('truncate -s 8 "$1" && cat "$1"', f), b"hello\0\0\0")
    expect_content(f, b"hello\0\0\0")
    expect_eq("after truncate -s 0", sh('truncate -s 0 "$1" && cat "$1"', f), b"")
    g = os.path.join(d, "new")
    expect_eq("truncate -s 3 of a new name", sh('truncate -s 3 "$1" && cat "$1"', g), b"\0\0\0")
    expect_content(g, b"\0\0\0")


@R.check("dd-conv-notrunc")
def dd_notrunc():
    d = svc("dd")
    f = os.path.join(d, "f")
    write_file(f, b"abcdef")
    out = sh('printf XY | dd of="$1" bs=1 seek=2 conv=notrunc status=none && cat "$1"', f)
    expect_eq("cat after dd conv=notrunc", out, b"abXYef")
    expect_content(f, b"abXYef")
    out = sh('printf Z | dd of="$1" bs=1 seek=8 conv=notrunc status=none && cat "$1"', f)
    expect_eq("cat after dd past the end", out, b"abXYef\0\0Z")


def vim_edit(binary, name):
    need(binary)
    d = svc(name)
    f = os.path.join(d, "notes")
    write_file(f, b"line one\n")
    out = sh('%s -es -u NONE -i NONE -c "%%s/one/two/" -c wq "$1" && cat "$1"' % binary, f)
    expect_eq("cat after %s -es" % binary, out, b"line two\n")
    out = sh('%s -es -u NONE -i NONE -c "set nocompatible backup writebackup" -c "normal Goline three" '
             '-c wq "$1" && cat "$1"' % binary, f)
    expect_eq("cat after %s -es with backup" % binary, out, b"line two\nline three\n")
    expect_content(f, b"line two\nline three\n")
    listing(d, ["notes"])


@R.check("vim-es")
def vim():
    vim_edit("vim" if shutil.which("vim") else "vim.tiny", "vim")  # a CI image may have vim-tiny only


@R.check("vim.tiny-es")
def vim_tiny():
    vim_edit("vim.tiny", "vimtiny")


@R.check("ex")
def ex():
    need("ex")
    d = svc("ex")
    f = os.path.join(d, "notes")
    write_file(f, b"alpha\n")
    out = sh('printf "%s\\n" "s/alpha/beta/" "wq" | ex -s "$1" && cat "$1"', f)
    expect_eq("cat after ex", out, b"beta\n")
    expect_content(f, b"beta\n")
    listing(d, ["notes"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("--only", default="")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--loops", type=int, default=5)
    a = ap.parse_args()
    if a.list:
        print("\n".join(name for name, _, _ in R.checks))
        return
    work = tempfile.mkdtemp(prefix="keychainfs-tools-")
    CTX.update(mnt=os.path.abspath(a.mountpoint), work=work, loops=a.loops, run="%04x" % (os.getpid() % 0x10000))
    try:
        results = R.run(set(filter(None, a.only.split(","))))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish(results, {"_seconds": R.times})


if __name__ == "__main__":
    main()
