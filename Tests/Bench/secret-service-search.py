#!/usr/bin/python3
"""SearchItems by one custom attribute among N items, through two keychainfs binaries in one run.

    Tests/Bench/secret-service-search.py BEFORE_BIN AFTER_BIN [--items 2000] [--rounds 40]

A figure for docs/benchmarks.md, never a test. On a private `dbus-daemon --session`, BEFORE's
`keychainfs secret-service` makes a vault of N Secret Service items (CreateItem through python
secretstorage: a quarter of them git network passwords, the rest a custom schema; 4 carry
`needle=yes`, N/50 share `app=app7`); the file is copied, AFTER's provider migrates the copy at its
unlock (timed), and SearchItems is timed in alternating blocks (BEFORE on its file, AFTER on the
copy, BEFORE, …; one provider on the bus at a time), so a machine that slows down mid-run slows
both sides alike. Prints the median and p90 of each query and the before/after ratio. Pin with
`taskset -c 1` for steadier figures; compare the ratio, not the absolute times.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import secretstorage
from jeepney import DBusAddress, new_method_call

QUERIES = {
    "needle=yes (4 items)": {"needle": "yes"},
    "app=app7 (N/50 items)": {"app": "app7"},
    "xdg:schema+serial (1 item)": {"xdg:schema": "org.example.Bench", "serial": "1001"},
}


def wait_for(pred, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def start_provider(binary, vault, passfile, address, log, state=None):
    out = open(log, "w")
    env = dict(os.environ, XDG_STATE_HOME=state) if state else None
    started = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "secret-service", "--vault", vault, "--passphrase-file", passfile, "--address", address],
        stdout=out, stderr=subprocess.STDOUT, env=env)
    if not wait_for(lambda: "serving org.freedesktop.secrets" in open(log).read() or proc.poll() is not None):
        raise SystemExit(f"provider did not start: {open(log).read()}")
    if proc.poll() is not None:
        raise SystemExit(f"provider exited: {open(log).read()}")
    return proc, time.perf_counter() - started


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(address, rounds, into):
    """Adds `rounds` timings of each query to `into[name]` (found, [seconds])."""
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
    conn = secretstorage.dbus_init()
    service = DBusAddress("/org/freedesktop/secrets", "org.freedesktop.secrets", "org.freedesktop.Secret.Service")
    for name, query in QUERIES.items():
        # The raw call (the provider's own time plus one round trip), then what a client sees
        # (secretstorage makes an Item per path it gets back).
        message = new_method_call(service, "SearchItems", "a{ss}", (query,))
        unlocked, locked = conn.send_and_get_reply(message).body
        raw = into.setdefault(name + " [raw call]", (len(unlocked) + len(locked), []))[1]
        found = len(list(secretstorage.search_items(conn, query)))  # warm-up, and the answer
        times = into.setdefault(name, (found, []))[1]
        for _ in range(rounds):
            t = time.perf_counter()
            conn.send_and_get_reply(message)
            raw.append(time.perf_counter() - t)
            t = time.perf_counter()
            list(secretstorage.search_items(conn, query))
            times.append(time.perf_counter() - t)
    conn.close()


def summary(found_times):
    found, times = found_times
    times = sorted(times)
    return found, statistics.median(times), times[int(len(times) * 0.9) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=20, help="per query and block")
    ap.add_argument("--blocks", type=int, default=3, help="alternating blocks per side")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="kcfs-ss-bench-")
    env = {"HOME": root, "XDG_STATE_HOME": root + "/state", "XDG_DATA_HOME": root + "/data",
           "XDG_RUNTIME_DIR": root}
    os.environ.update(env)
    vault, passfile = root + "/bench.vault", root + "/pass"
    with open(passfile, "w") as f:
        f.write("bench passphrase\n")
    subprocess.run([args.before, "init", "--kdf", "interactive", "--vault", vault, "--passphrase-file", passfile],
                   check=True, capture_output=True)
    bus = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1",
                            f"--address=unix:path={root}/bus"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    address = bus.stdout.readline().decode().strip()
    try:
        provider, _ = start_provider(args.before, vault, passfile, address, root + "/before.log")
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
        conn = secretstorage.dbus_init()
        collection = secretstorage.get_default_collection(conn)
        t = time.perf_counter()
        for n in range(args.items):
            if n % 4 == 0:
                attrs = {"xdg:schema": "org.git.Password", "protocol": "https", "host": f"git{n}.example.com",
                         "user": f"u{n}", "app": f"app{n % 50}"}
            else:
                attrs = {"xdg:schema": "org.example.Bench", "serial": str(n), "app": f"app{n % 50}"}
            if n in (3, 777, 1001, 1999):
                attrs["needle"] = "yes"
            collection.create_item(f"item {n}", attrs, f"secret {n}".encode())
        made = time.perf_counter() - t
        conn.close()
        print(f"{args.items} items made through CreateItem by BEFORE in {made:.1f} s")
        stop(provider)
        copy = root + "/after.vault"
        subprocess.run(["sqlite3", vault, f".backup {copy}"], check=True)
        # The copy is the same vault (same id): its own device state, or the migrated copy's
        # higher commit counter would make the original look rolled back.
        subprocess.run(["cp", "-a", root + "/state", root + "/state-after"], check=True)
        before, after = {}, {}
        sides = (("before", args.before, vault, before, root + "/state"),
                 ("after", args.after, copy, after, root + "/state-after"))
        for block in range(args.blocks):
            for side, binary, path, into, state in sides:
                provider, start_time = start_provider(
                    binary, path, passfile, address, f"{root}/{side}{block}.log", state)
                if block == 0 and side == "after":
                    print(f"AFTER's provider started (unlock, migration included) in {start_time:.2f} s")
                measure(address, args.rounds, into)
                stop(provider)
        for side, path in (("before", vault), ("after", copy)):
            subprocess.run(["sqlite3", path, "PRAGMA wal_checkpoint(TRUNCATE);"], check=True, capture_output=True)
            print(f"vault file {side}: {os.path.getsize(path) / args.items:.0f} bytes/item")
    finally:
        bus.terminate()
        bus.wait()
    n = args.rounds * args.blocks
    print(f"\nSearchItems among {args.items} items, {n} calls per query and side (median / p90, ms):")
    print(f"{'query':42} {'found':>5} {'before':>16} {'after':>16} {'ratio':>7}")
    for name in sorted(after):
        fb, mb, pb = summary(before[name])
        fa, ma, pa = summary(after[name])
        if fb != fa:
            print(f"MISMATCH: {name}: before found {fb}, after {fa}")
        print(f"{name:42} {fa:5d} {mb * 1e3:7.2f} / {pb * 1e3:6.2f} {ma * 1e3:7.2f} / {pa * 1e3:6.2f} {mb / ma:6.1f}x")
    subprocess.run(["rm", "-rf", root])


if __name__ == "__main__":
    main()
