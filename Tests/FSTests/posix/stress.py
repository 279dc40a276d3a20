#!/usr/bin/env python3
"""Multi-process stress run of issue 14 (item 10): N processes for a bounded time do random
create / overwrite / append / ftruncate / rename / unlink / setxattr(user.keychain.comment) / read
in one service directory.

- Private names (p<worker>-<k>): only their worker touches them, so it keeps a model of its
  acknowledged operations: every call's outcome (errno) and every read (bytes, size, comment) must
  equal the model. Zero unexpected errno, zero mismatches.
- Shared names: "trunc-<k>" are overwritten in place (O_TRUNC, write, close) and "swap-<k>" are
  replaced by renaming a worker's temp file onto them; all workers read them in 4 KiB reads. Every
  read must equal SOME value whose write was acknowledged (or the initial value; for trunc-* also
  the empty value an O_TRUNC open commits): never a torn mix, never bytes whose writer got an error.
  A swap-* name must never be missing.
- At the end (at once, and again 1.5 s later) the directory lists exactly the model's names and
  every private name reads its model value, in this process and in another one.

usage: stress.py MOUNTPOINT [--procs 8] [--seconds 15] [--seed N]
Prints one JSON object: named checks ("ok" | "FAIL: ..."), plus "_summary".
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import en, finish  # noqa: E402

from stress_worker import Worker, digest  # noqa: E402

SHARED_TRUNC = ["trunc-0", "trunc-1"]
SHARED_SWAP = ["swap-0", "swap-1"]

HASH_ALL = r"""
import hashlib, json, os, sys
d = sys.argv[1]
out = {}
for n in sorted(os.listdir(d)):
    try:
        with open(os.path.join(d, n), 'rb') as f:
            b = f.read()
        out[n] = [hashlib.sha1(b).hexdigest()[:16], len(b)]
    except OSError as e:
        out[n] = e.errno
print(json.dumps(out))
"""


def initial_value(name):
    return ("initial %s;" % name).encode() * 50


def run_workers(d, procs, seconds, seed, tmp):
    deadline = time.time() + seconds
    pids = {}
    for i in range(procs):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                os.setpgid(0, 0)
                w = Worker(i, d, random.Random(seed * 1000 + i), SHARED_TRUNC, SHARED_SWAP)
                w.run(deadline)
                with open(os.path.join(tmp, "w%d.json" % i), "w") as f:
                    json.dump(w.report(), f)
            except BaseException as e:  # noqa: a crashed worker is reported by the parent
                with open(os.path.join(tmp, "w%d.crash" % i), "w") as f:
                    f.write("%s: %s" % (type(e).__name__, e))
                code = 1
            os._exit(code)
        pids[pid] = i
    hung = []
    limit = deadline + 30
    while pids and time.time() < limit:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            time.sleep(0.05)
            continue
        pids.pop(pid, None)
    for pid, i in pids.items():  # still running 30 s after the deadline: hung in a call
        hung.append(i)
        for target in (-pid, pid):
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
        os.waitpid(pid, 0)
    reports, crashed = [], []
    for i in range(procs):
        p = os.path.join(tmp, "w%d.json" % i)
        if os.path.exists(p):
            with open(p) as f:
                reports.append(json.load(f))
        elif i not in hung:
            c = os.path.join(tmp, "w%d.crash" % i)
            crashed.append("worker %d: %s" % (i, open(c).read() if os.path.exists(c) else "no report"))
    return reports, hung, crashed


def check_final(d, reports, label):
    """The directory against the union of the models: names, bytes, sizes; here and in another process."""
    want = {}
    for r in reports:
        for name, state in r["final"].items():
            if state is not None:
                want[name] = state  # [hash, len]
    problems = []
    try:
        listed = set(os.listdir(d))
    except OSError as e:
        return "FAIL: %s: listdir %s" % (label, en(e.errno))
    expected_names = set(want) | set(SHARED_TRUNC) | set(SHARED_SWAP)
    extra, missing = sorted(listed - expected_names), sorted(expected_names - listed)
    if extra or missing:
        problems.append("listing: extra %s, missing %s" % (extra[:5], missing[:5]))
    for name, (h, n) in sorted(want.items()):
        try:
            with open(os.path.join(d, name), "rb") as f:
                b = f.read()
            if [digest(b), len(b)] != [h, n]:
                problems.append("%s: %d bytes %s, model %d bytes %s" % (name, len(b), digest(b), n, h))
        except OSError as e:
            problems.append("%s: %s, model %d bytes" % (name, en(e.errno), n))
    r = subprocess.run([sys.executable, "-c", HASH_ALL, d], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    if r.returncode != 0:
        problems.append("another process: %s" % r.stderr.decode(errors="replace")[-200:])
    else:
        seen = json.loads(r.stdout)
        for name, state in sorted(want.items()):
            if seen.get(name) != state:
                problems.append("another process: %s is %s, model %s" % (name, seen.get(name, "unlisted"), state))
    if problems:
        return "FAIL: %s: %d problems: %s" % (label, len(problems), "; ".join(problems[:5]))
    return "ok"


def check_shared(reports):
    acked, failed = {}, {}
    for n in SHARED_TRUNC + SHARED_SWAP:
        acked[n] = {digest(initial_value(n))}
    for n in SHARED_TRUNC:
        acked[n].add(digest(b""))
    for r in reports:
        for name, h, ok in r["shared_writes"]:
            (acked if ok else failed).setdefault(name, set()).add(h)
    bad, reads = [], 0
    for r in reports:
        for name, h, head in r["shared_reads"]:
            reads += 1
            if h not in acked[name]:
                kind = "bytes of a failed write" if h in failed.get(name, ()) else "torn or never written"
                bad.append("%s read %s (%s, starts %r)" % (name, h, kind, head))
    if bad:
        return "FAIL: %d of %d shared reads were not an acknowledged value: %s" % (len(bad), reads, "; ".join(bad[:4]))
    return "ok"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mountpoint")
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    a = ap.parse_args()
    d = os.path.join(os.path.abspath(a.mountpoint), "genp", "stress-%d-%d" % (os.getpid(), a.seed))
    os.mkdir(d)
    for n in SHARED_TRUNC + SHARED_SWAP:
        with open(os.path.join(d, n), "wb") as f:
            f.write(initial_value(n))
    tmp = tempfile.mkdtemp(prefix="keychainfs-stress-")
    started = time.time()
    reports, hung, crashed = run_workers(d, a.procs, a.seconds, a.seed, tmp)
    elapsed = round(time.time() - started, 1)
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)

    results = {}
    problems = ["worker %d hung (killed 30 s after the deadline)" % i for i in hung] + crashed
    results["stress/workers-finish"] = "ok" if not problems else "FAIL: " + "; ".join(problems)
    for kind, label in (("private", "private"), ("shared", "shared")):
        errs = [e for r in reports for e in r["unexpected"] if e["kind"] == kind]
        results["stress/%s-no-unexpected-errno" % label] = "ok" if not errs else \
            "FAIL: %d unexpected errno: %s" % (len(errs), "; ".join(e["text"] for e in errs[:5]))
    mism = [m for r in reports for m in r["mismatches"]]
    results["stress/private-reads-match-model"] = "ok" if not mism else \
        "FAIL: %d mismatches: %s" % (len(mism), "; ".join(mism[:5]))
    results["stress/shared-reads-acknowledged-values"] = check_shared(reports)
    results["stress/final-state-at-once"] = check_final(d, reports, "at once")
    time.sleep(1.5)  # nothing may change once every call has returned
    results["stress/final-state-1.5s-later"] = check_final(d, reports, "1.5 s later")

    ops = {}
    for r in reports:
        for k, v in r["ops"].items():
            ops[k] = ops.get(k, 0) + v
    errnos = {}
    for r in reports:
        for e in r["unexpected"]:
            key = "%s %s: %s" % (e["kind"], e["op"], e["errno"])
            errnos[key] = errnos.get(key, 0) + 1
    summary = {"procs": a.procs, "seconds": a.seconds, "elapsed": elapsed, "seed": a.seed, "directory": d,
               "ops": ops, "total_ops": sum(ops.values()), "unexpected_outcomes": errnos,
               "mismatches": len(mism)}
    finish(results, {"_summary": summary})


if __name__ == "__main__":
    main()
