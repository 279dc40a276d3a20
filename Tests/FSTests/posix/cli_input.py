#!/usr/bin/env python3
"""CLI input (issue 14, item 9): required attributes are required, invalid UTF-8 is refused with
a message naming the byte offset and never rewritten. Arguments go to the CLI as raw bytes.

usage: cli_input.py --cli BIN --vault VAULT --passphrase-file FILE
Prints one JSON object of named checks.
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import finish, show  # noqa: E402

A = None


def run(*args, stdin=b"secret"):
    argv = [os.fsencode(A.cli)] + [x if isinstance(x, bytes) else x.encode() for x in args]
    return subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)


def unlock():
    return ["--vault", A.vault, "--passphrase-file", A.passphrase_file]


def items():
    r = run("dump-keychain", "--json", *unlock(), stdin=b"")
    return json.loads(r.stdout) if r.returncode == 0 else None


def usage_check(verb, args):
    r = run(verb, *unlock(), *args)
    if r.returncode != 2:
        return "FAIL: exit %d (want 2, usage), stderr %s" % (r.returncode, show(r.stderr.strip(), 200))
    return "ok"


def utf8_check(verb, args, offset):
    r = run(verb, *unlock(), *args)
    text = r.stderr.decode(errors="replace")
    if r.returncode == 0:
        return "FAIL: accepted (exit 0)"
    if not re.search(r"\b%d\b" % offset, text):
        return "FAIL: refused (exit %d) without naming byte offset %d: %s" % (r.returncode, offset, text.strip()[:200])
    return "ok"


# Each check's command uses its own account, so that what it stored can be found in one dump.
CHECKS = [
    ("cli/add-generic-password-without-s-is-usage", usage_check, "add-generic-password", [b"-a", b"no-s-genp"], None),
    ("cli/add-internet-password-without-s-is-usage", usage_check, "add-internet-password", [b"-a", b"no-s-inet"],
     None),
    ("cli/invalid-utf8-account-refused-with-offset", utf8_check, "add-generic-password",
     [b"-s", b"svc", b"-a", b"bad\xffname"], 3),
    ("cli/invalid-utf8-service-refused-with-offset", utf8_check, "add-generic-password",
     [b"-s", b"servic\xc3", b"-a", b"utf8-service"], 6),
    ("cli/invalid-utf8-server-refused-with-offset", utf8_check, "add-internet-password",
     [b"-s", b"ex\x80ample.com", b"-a", b"utf8-server"], 2),
    ("cli/invalid-utf8-label-refused-with-offset", utf8_check, "add-generic-password",
     [b"-s", b"svc2", b"-a", b"utf8-label", b"-l", b"lab\xfe"], 3),
]


def main():
    global A
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--vault", required=True)
    ap.add_argument("--passphrase-file", required=True)
    A = ap.parse_args()
    before = {i["id"] for i in items() or []}
    results = {}
    for name, check, verb, args, offset in CHECKS:
        results[name] = check(verb, args) if offset is None else check(verb, args, offset)
    after = items()
    for name, _, _, args, _ in CHECKS:
        account = args[args.index(b"-a") + 1].decode(errors="replace")
        stored = [i["attributes"] for i in after or [] if i["id"] not in before
                  and i["attributes"].get("account") == account]
        if after is None:
            results[name] += " (and dump-keychain failed)"
        elif stored:
            verdict = "FAIL" if results[name] == "ok" else results[name]
            results[name] = "%s; stored %s" % (verdict, stored)
    finish(results)


if __name__ == "__main__":
    main()
