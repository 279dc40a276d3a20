"""catalog.py, part two: the races of issue 14 (each repeated), names as bytes, hidden names that
must be items (and persist across a remount), a service directory kept as a cwd, and a refused
certificate that must leave no ghost."""

import json
import os
import shutil
import subprocess
import tempfile
import time

from common import (Fail, expect_absent, expect_content, expect_eq, listdir_b, outcome, read_all,
                    reader_process, show, stat_process, step, write_file)

PERSIST = {}  # check name -> (service, leaf, secret): looked at again after the remount


def register(R, CTX, svc, item):
    loops = lambda: CTX["loops"]  # noqa: E731

    # --- races: each is one iteration of a create followed at once by another call -------------

    @R.check("race/touch-then-echo-shell", timeout=60)
    def race_touch_echo():
        d = svc("race-touch-echo")
        bad = []
        for i in range(loops()):
            p = os.path.join(d, "f%d" % i)
            r = subprocess.run(["sh", "-c", 'touch "$1" && echo secret > "$1" && cat "$1"', "sh", p],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
            got, data = outcome(read_all, p)
            if r.returncode != 0 or r.stdout != b"secret\n" or data != b"secret\n":
                bad.append("%d: sh exit %d, cat %s, read %s %s" % (i, r.returncode, show(r.stdout), got,
                                                                   show(data)))
        if bad:
            raise Fail("%d of %d runs: %s" % (len(bad), loops(), "; ".join(bad[:3])))

    @R.check("race/create-empty-then-write-python", timeout=60)
    def race_create_write_py():
        d = svc("race-create-write")
        bad = []
        for i in range(loops()):
            p = os.path.join(d, "f%d" % i)
            steps = []
            for what, fn in (("create", lambda: os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))),
                             ("write", lambda: write_file(p, b"secret\n"))):
                got, _ = outcome(fn)
                if got != "OK":
                    steps.append("%s %s" % (what, got))
            got, data = outcome(read_all, p)
            if steps or data != b"secret\n":
                bad.append("%d: %s read %s %s" % (i, " ".join(steps), got, show(data)))
        if bad:
            raise Fail("%d of %d runs: %s" % (len(bad), loops(), "; ".join(bad[:3])))

    @R.check("race/create-empty-then-unlink", timeout=60)
    def race_create_unlink():
        d = svc("race-create-unlink")
        bad = []
        for i in range(loops()):
            p = os.path.join(d, "f%d" % i)
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
            os.unlink(p)
            got, _ = outcome(os.stat, p)
            if got != "ENOENT":
                bad.append("%d: stat at once %s" % (i, got))
        time.sleep(1.2)  # the deleted name must not come back later either
        names = listdir_b(d)
        if names:
            bad.append("listed 1.2 s later: %s" % show(b",".join(names)))
        back = [p for p, v in stat_process(*[os.path.join(d, "f%d" % i) for i in range(loops())]).items()
                if v != "ENOENT"]
        if back:
            bad.append("%d names exist again 1.2 s later (another process)" % len(back))
        if bad:
            raise Fail("; ".join(bad[:4]))

    @R.check("race/create-empty-then-rename", timeout=60)
    def race_create_rename():
        d = svc("race-create-rename")
        bad = []
        for i in range(loops()):
            p, q = os.path.join(d, "f%d" % i), os.path.join(d, "g%d" % i)
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
            os.rename(p, q)
            a, _ = outcome(os.stat, p)
            b, st = outcome(os.stat, q)
            if a != "ENOENT" or b != "OK":
                bad.append("%d: old name %s, new name %s" % (i, a, b))
        time.sleep(1.2)
        want = sorted(os.fsencode("g%d" % i) for i in range(loops()))
        names = listdir_b(d)
        if names != want:
            extra = sorted(set(names) - set(want))
            missing = sorted(set(want) - set(names))
            bad.append("1.2 s later: extra %s, missing %s" % (show(b",".join(extra)), show(b",".join(missing))))
        if bad:
            raise Fail("; ".join(bad[:4]))

    @R.check("race/create-then-ftruncate-567", timeout=60)
    def race_create_ftruncate():
        d = svc("race-ftruncate")
        bad = []
        for i in range(loops()):
            p = os.path.join(d, "f%d" % i)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.ftruncate(fd, 567)
            os.close(fd)
            got, st = outcome(os.stat, p)
            if got != "OK" or st.st_size != 567:
                bad.append("%d: stat at once %s" % (i, got if got != "OK" else st.st_size))
        time.sleep(1.2)
        sizes = stat_process(*[os.path.join(d, "f%d" % i) for i in range(loops())])
        wrong = {os.path.basename(p): v for p, v in sizes.items() if v != 567}
        if wrong:
            bad.append("1.2 s later (another process): %d wrong, e.g. %s" % (len(wrong), sorted(wrong.items())[:3]))
        p0 = os.path.join(d, "f0")
        if read_all(p0) != b"\0" * 567:
            bad.append("f0 does not read 567 NULs")
        if bad:
            raise Fail("; ".join(bad[:4]))

    # --- names are bytes ---------------------------------------------------------------------

    @R.check("names/NFC-NFD-pair")
    def names_nfc_nfd():
        d = svc("nfc-nfd")
        nfc, nfd = b"\xc3\xa9", b"e\xcc\x81"  # U+00E9; U+0065 U+0301
        pc, pd = os.path.join(os.fsencode(d), nfc), os.path.join(os.fsencode(d), nfd)
        write_file(pc, b"nfc secret")
        write_file(pd, b"nfd secret")

        def both(when):
            expect_eq("%s: NFC reads" % when, read_all(pc), b"nfc secret")
            expect_eq("%s: NFD reads" % when, read_all(pd), b"nfd secret")
            expect_eq("%s: listing" % when, listdir_b(d), sorted([nfc, nfd]))
            expect_eq("%s: NFC from cat" % when, reader_process(os.fsdecode(pc)), b"nfc secret")
            expect_eq("%s: NFD from cat" % when, reader_process(os.fsdecode(pd)), b"nfd secret")
            expect_eq("%s: NFD account xattr" % when, os.getxattr(pd, "user.keychain.account"), nfd)

        both("at once")
        subprocess.run(["ls", "-l", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
        both("after ls")
        time.sleep(1.2)  # past the kernel's entry cache: the daemon's lookup decides now
        both("1.2 s later")
        os.unlink(pc)
        expect_eq("NFD after unlinking NFC", read_all(pd), b"nfd secret")
        expect_eq("listing after unlinking NFC", listdir_b(d), [nfd])

    @R.check("names/U+037E-is-not-semicolon")
    def names_greek_question_mark():
        d = os.fsencode(svc("u037e"))
        leaf = "a\u037esynchronizable=true".encode()
        p = os.path.join(d, leaf)
        write_file(p, b"greek")
        expect_eq("listing", listdir_b(d), [leaf])
        expect_eq("read", read_all(p), b"greek")
        expect_eq("account xattr", os.getxattr(p, "user.keychain.account"), leaf)

    if CTX.get("cli"):
        register_cli(R, CTX, svc)

    # --- hidden names: items, not scratch --------------------------------------------------------

    for leaf in (".env", ".npmrc", ".token"):
        def hidden(leaf=leaf, name="hidden/%s-is-an-item" % leaf):
            d = svc("hidden-" + leaf[1:])
            p = os.path.join(d, leaf)
            secret = ("%s secret\n" % leaf).encode()
            write_file(p, secret)
            expect_content(p, secret)
            expect_eq("listing", listdir_b(d), [os.fsencode(leaf)])
            got, acct = outcome(os.getxattr, p, "user.keychain.account")
            if got != "OK" or acct != os.fsencode(leaf):
                raise Fail("user.keychain.account -> %s %s (want %r: an item, not a memory file)" % (got, show(acct),
                                                                                                      leaf))
        R.check("hidden/%s-is-an-item" % leaf)(hidden)
        PERSIST["hidden/%s-is-an-item" % leaf] = ("hidden-" + leaf[1:], leaf, ("%s secret\n" % leaf).encode())

    @R.check("hidden/editor-scratch-stays-in-memory")
    def hidden_scratch():
        d = svc("scratch")
        for leaf in (".f.swp", "f~", "4913"):
            write_file(os.path.join(d, leaf), b"scratch")
            expect_content(os.path.join(d, leaf), b"scratch", other=False)

    PERSIST["hidden/editor-scratch-stays-in-memory"] = ("scratch", None, None)

    # --- directories -------------------------------------------------------------------------

    @R.check("dir/service-stays-while-cwd")
    def dir_cwd():
        d = svc("cwd")
        item(d, "only", b"1")
        os.chdir(d)
        os.unlink("only")
        for when in ("at once", "1.2 s later"):
            expect_eq("%s: listdir('.') after the last item went" % when, os.listdir("."), [])
            got, _ = outcome(os.stat, d)
            seen = stat_process(d)[d]
            if got != "OK" or seen == "ENOENT":
                raise Fail("%s: stat of the cwd service directory -> %s, from another process %s" % (when, got, seen))
            if when == "at once":
                time.sleep(1.2)  # past the kernel's entry cache: the daemon's lookup decides now
        write_file("again", b"2")
        expect_content(os.path.join(d, "again"), b"2")
        r = subprocess.run(["ls", "."], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        expect_eq("ls in it from another process", (r.returncode, r.stdout), (0, b"again\n"))
        os.chdir("/")

    @R.check("dir/mkdir-rmdir")
    def dir_mkdir_rmdir():
        d = svc("mkdir")
        expect_eq("listing of a new directory", listdir_b(d), [])
        if os.fsencode(os.path.basename(d)) not in listdir_b(os.path.dirname(d)):
            raise Fail("a mkdir'd directory is not listed in /genp")
        os.rmdir(d)
        expect_absent(d)

    # --- certificates ------------------------------------------------------------------------

    @R.check("cert/junk-fails-at-close-no-ghost")
    def cert_junk():
        p = os.path.join(CTX["mnt"], "cert", "c-junk-" + CTX["run"])
        for attempt in (1, 2):
            fd = step("attempt %d: open(O_CREAT)" % attempt, os.open, p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            wrote, _ = outcome(os.write, fd, b"junk\n")  # refusing already here is better still
            got, _ = outcome(os.close, fd)
            if (wrote, got) not in (("OK", "EINVAL"), ("EINVAL", "EINVAL"), ("EINVAL", "OK")):
                raise Fail("attempt %d: write -> %s, close -> %s (want EINVAL from one of them)" % (attempt, wrote, got))
            expect_absent(p, "attempt %d: the refused name" % attempt)
        # The shell ignores the failing close (exit 0): the name must still not stay behind.
        subprocess.run(["sh", "-c", 'printf junk > "$1"', "sh", p], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=20)
        expect_absent(p, "after `printf junk > %s`" % os.path.basename(p))
        tmp = tempfile.mkdtemp(prefix="catalog-cert-")
        try:
            pem = os.path.join(tmp, "c.pem")
            r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                "-nodes", "-keyout", os.path.join(tmp, "k.pem"), "-out", pem, "-subj", "/CN=catalog",
                                "-days", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
            if r.returncode != 0:
                raise Fail("openssl req failed: %s" % r.stderr.decode(errors="replace")[-200:])
            data = open(pem, "rb").read()
            step("writing a real certificate under the refused name", write_file, p, data)
            expect_content(p, data)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def register_cli(R, CTX, svc):
    """Checks whose items are made with the CLI while mounted (names the mount did not make)."""

    def add(service, account, secret, *extra):
        r = cli(CTX, "add-generic-password", "--vault", CTX["vault"], "--passphrase-file", CTX["passfile"],
                "-s", service, "-a", account, *extra, stdin=secret)
        if r.returncode != 0:
            raise Fail("add-generic-password -a %r: %s" % (account, r.stderr.decode(errors="replace")[-200:]))

    @R.check("names/NFC-NFD-pair-added-by-cli")
    def names_nfc_nfd_cli():
        d = os.fsencode(CTX["svc_path"]("nfc-nfd-cli"))
        nfc, nfd = b"\xc3\xa9", b"e\xcc\x81"
        add(os.path.basename(d), nfc, b"nfc secret")
        add(os.path.basename(d), nfd, b"nfd secret")
        subprocess.run(["ls", "-l", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
        expect_eq("listing", listdir_b(d), sorted([nfc, nfd]))
        expect_eq("NFD from cat", reader_process(os.fsdecode(os.path.join(d, nfd))), b"nfd secret")
        expect_eq("NFC from cat", reader_process(os.fsdecode(os.path.join(d, nfc))), b"nfc secret")
        expect_eq("NFD read", read_all(os.path.join(d, nfd)), b"nfd secret")

    @R.check("names/synchronizable-item-opens")
    def names_sync():
        d = CTX["svc_path"]("sync")
        add(os.path.basename(d), b"acct", b"synced", "--synchronizable")
        expect_eq("listing", listdir_b(d), [b"acct;synchronizable=true"])
        p = os.path.join(d, "acct;synchronizable=true")
        step("stat of the listed name", os.stat, p)
        step("getxattr of the listed name", os.getxattr, p, "user.keychain.account")
        expect_content(p, b"synced")

    @R.check("names/setxattr-synchronizable-renames-at-once")
    def names_set_sync():
        d = svc("set-sync")
        p = os.path.join(d, "acct")
        write_file(p, b"to sync")
        step("setxattr synchronizable yes", os.setxattr, p, "user.keychain.synchronizable", b"yes")
        q = p + ";synchronizable=true"
        expect_eq("listing", listdir_b(d), [os.fsencode(os.path.basename(q))])
        expect_content(q, b"to sync")
        expect_absent(p)


def cli(CTX, *args, stdin=None):
    return subprocess.run([CTX["cli"]] + list(args), input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=60)


def remount(CTX):
    """Unmounts the mount this script was given and mounts the vault again (its own binary)."""
    m = CTX["mnt"]
    r = cli(CTX, "unmount", m)
    if r.returncode != 0:
        return "unmount failed: %s" % r.stderr.decode(errors="replace")[-300:]
    deadline = time.time() + 10
    while time.time() < deadline:
        r = cli(CTX, "mount", CTX["vault"], m, "--passphrase-file", CTX["passfile"])
        if r.returncode == 0:
            return None
        time.sleep(0.3)  # the old daemon may still hold the vault lock for a moment
    return "mount again failed: %s" % r.stderr.decode(errors="replace")[-300:]


def after_remount(R, CTX, selected):
    """The persist half of the hidden-name checks: after unmount + mount, and in dump-keychain."""
    names = [n for n in PERSIST if n in R.results and (not selected or n in selected)]
    if not names or not (CTX.get("cli") and CTX.get("vault") and CTX.get("passfile")):
        return {}
    out = {}
    try:
        problem = remount(CTX)
        dump = cli(CTX, "dump-keychain", "--json", "--vault", CTX["vault"], "--passphrase-file", CTX["passfile"])
        items = json.loads(dump.stdout) if dump.returncode == 0 else []
    except (subprocess.TimeoutExpired, ValueError) as e:
        problem, dump, items = "remount or dump-keychain: %s" % e, None, []
    pairs = {(i.get("attributes", {}).get("service"), i.get("attributes", {}).get("account")) for i in items}
    for name in names:
        if R.results[name] != "ok":
            continue
        check_dir, leaf, secret = PERSIST[name]
        d = CTX["svc_path"](check_dir)
        service = os.path.basename(d)
        if problem:
            out[name] = "FAIL: " + problem
        elif leaf is None:  # scratch files: gone after the remount, never in the dump
            got, listing = outcome(listdir_b, d)
            stored = sorted(a for s, a in pairs if s == service)
            out[name] = "ok" if got in ("ENOENT", "OK") and not listing and not stored else \
                "FAIL: after remount: listing %s %s, dump accounts %s" % (got, show(listing), stored)
        else:
            p = os.path.join(d, leaf)
            got, data = outcome(read_all, p)
            if got != "OK" or data != secret:
                out[name] = "FAIL: after remount: read %s %s" % (got, show(data))
            elif (service, leaf) not in pairs:
                out[name] = "FAIL: not in dump-keychain --json (exit %s)" % (dump.returncode if dump else "?")
            else:
                out[name] = "ok"
    R.results.update(out)
    return out
