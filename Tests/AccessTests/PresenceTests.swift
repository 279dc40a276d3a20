import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

// Issue 5, part 3: user presence through pinentry. A scripted Assuan peer (`-o pinentry=`)
// answers CONFIRM / GETPIN as a file says (allow, deny, cancel, silent, a PIN); the readers run
// on a pseudo-terminal of their own so the daemon has a terminal to ask on. One test drives
// the real pinentry-tty through tmux.

/// A scripted pinentry: greets, answers OK to everything, and to CONFIRM / GETPIN what the
/// file `pinentry.mode` says. Every start and every prompt is appended to `pinentry.log`.
let scriptedPinentry = """
    #!/usr/bin/python3
    import sys, os, time
    D = os.path.dirname(os.path.abspath(__file__))
    def log(s):
        with open(os.path.join(D, 'pinentry.log'), 'a') as f:
            f.write(s + '\\n')
    def mode():
        try:
            with open(os.path.join(D, 'pinentry.mode')) as f: return f.read().strip()
        except OSError:
            return 'allow'
    def send(s):
        sys.stdout.write(s + '\\n'); sys.stdout.flush()
    def esc(s):
        return s.replace('%', '%25').replace('\\n', '%0A').replace('\\r', '%0D')
    log('START ' + ' '.join(sys.argv[1:]))
    send('OK Pleased to meet you')
    desc = ''
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        line = line.rstrip('\\n')
        cmd = line.split(' ', 1)[0]
        if cmd == 'SETDESC':
            desc = line[8:]
        if cmd in ('CONFIRM', 'GETPIN'):
            m = mode()
            log('PROMPT ' + cmd + ' ' + desc)
            if m == 'silent':
                while True: time.sleep(60)
            if m == 'cancel':
                send('ERR 83886179 Operation cancelled <Pinentry>'); continue
            if cmd == 'GETPIN':
                if m.startswith('pin:'):
                    send('D ' + esc(m[4:]))
                    send('OK')
                else:
                    send('ERR 83886179 Operation cancelled <Pinentry>')
                continue
            if m == 'deny':
                send('ERR 83886194 Not confirmed <Pinentry>'); continue
            send('OK')
            continue
        if cmd == 'BYE':
            send('OK closing connection'); break
        send('OK')
    """

extension Sandbox {
    var pinentryScript: String { root + "/pinentry.py" }
    var pinentryLogPath: String { root + "/pinentry.log" }
    var pinentryLog: [String] {
        ((try? String(contentsOfFile: pinentryLogPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }
    var prompts: [String] { pinentryLog.filter { $0.hasPrefix("PROMPT ") } }
    var pinentryStarts: [String] { pinentryLog.filter { $0.hasPrefix("START ") } }

    func installPinentry(mode: String = "allow") throws {
        try Data(scriptedPinentry.utf8).write(to: URL(fileURLWithPath: pinentryScript))
        chmod(pinentryScript, 0o755)
        try setPinentryMode(mode)
    }

    func setPinentryMode(_ mode: String) throws {
        try Data((mode + "\n").utf8).write(to: URL(fileURLWithPath: root + "/pinentry.mode"))
    }
}

extension AccessSuite {
    @Suite("user presence") struct PresenceTests {
        /// Sets up a sandbox mounted with the scripted pinentry, then runs `body`.
        func presence(
            _ label: String = #function, options: [String] = [], mode: String = "allow",
            sourceLocation: SourceLocation = #_sourceLocation, _ body: (Sandbox) throws -> Void
        ) throws {
            _ = try #require(
                keychainfsBinary, "keychainfs binary not found; set KEYCHAINFS_BIN", sourceLocation: sourceLocation)
            let box = try Sandbox(label)
            defer { box.teardown() }
            try box.initVault(sourceLocation: sourceLocation)
            try box.installPinentry(mode: mode)
            try box.addGeneric(
                "presence", "p", "presence-secret", extra: ["--access-control", "userPresence"],
                sourceLocation: sourceLocation)
            try box.addGeneric("plain", "x", "plain-secret", sourceLocation: sourceLocation)
            try box.addGeneric(
                "passcode", "d", "passcode-secret", extra: ["--access-control", "devicePasscode"],
                sourceLocation: sourceLocation)
            try box.mount(["pinentry=" + box.pinentryScript] + options, sourceLocation: sourceLocation)
            try body(box)
        }

        @Test("O_NONBLOCK open of an identity whose key needs user presence: EAGAIN at once, no prompt")
        func nonBlockingIdentity() throws {
            // The scripted pinentry allows: had the open prompted, it would have read the identity.
            try presence { box in
                try makePKI(box)
                let m = box.mnt
                let cp = try box.sh("cp leaf.pem \(q(m + "/cert/leaf")) && cp leaf.key \(q(m + "/keys/leaf"))")
                try #require(cp.status == 0, "cp: \(cp.summary)")
                let set = try box.run(
                    "/usr/bin/setfattr", ["-n", "user.keychain.accessControl", "-v", "userPresence", m + "/keys/leaf"],
                    timeout: 10)
                try #require(set.status == 0, "setfattr accessControl: \(set.summary)")
                let r = try box.readerOnPty(["nb:" + m + "/idnt/leaf"])
                #expect(r.tty != nil, "the reader has no terminal: \(r.summary)")
                #expect(r.results.first?.outcome == "EAGAIN", "O_NONBLOCK open of /idnt/leaf: \(r.summary)")
                #expect(
                    (r.results.first?.seconds ?? 99) < 1.5,
                    "the O_NONBLOCK open took \(r.results.first?.seconds ?? -1) s")
            }
        }

        @Test("O_NONBLOCK open of a userPresence item: EAGAIN at once, no prompt; ls, stat, xattrs never prompt")
        func nonBlocking() throws {
            try presence { box in
                let p = box.mnt + "/genp/presence/p"
                let r = try box.readerOnPty([
                    "nb:" + p, "nb:" + box.mnt + "/genp/passcode/d", "read:" + box.mnt + "/genp/plain/x",
                ])
                #expect(r.tty != nil, "the reader has no terminal: \(r.summary)")
                let results = r.results
                #expect(results.first?.outcome == "EAGAIN", "O_NONBLOCK open of a userPresence item: \(r.summary)")
                #expect(
                    (results.first?.seconds ?? 99) < 1.5, "the O_NONBLOCK open took \(results.first?.seconds ?? -1) s")
                #expect(
                    results.count == 3 && results[1].outcome == "EAGAIN",
                    "O_NONBLOCK open of a devicePasscode item: \(r.summary)")
                #expect(
                    results.last?.outcome == "OK" && results.last?.secret == "plain-secret", "plain read: \(r.summary)")

                let meta = try box.run(
                    "/usr/bin/python3",
                    [
                        box.ptyRunnerPath, "20", "/bin/sh", "-c",
                        "ls -l \(q(box.mnt + "/genp/presence")) && stat \(q(p)) && getfattr -d \(q(p)) && echo META-DONE",
                    ], timeout: 25)
                #expect(
                    meta.status == 0 && meta.stdout.contains("META-DONE")
                        && meta.stdout.contains("user.keychain.accessControl"),
                    "ls/stat/getfattr of a userPresence item: \(meta.summary)")
                #expect(box.pinentryStarts.isEmpty && box.prompts.isEmpty, "a prompt was started: \(box.pinentryLog)")
            }
        }

        @Test("userPresence read from a process without a terminal: EACCES at once")
        func noTerminal() throws {
            try presence { box in
                let r = try box.reader(["read:" + box.mnt + "/genp/presence/p", "read:" + box.mnt + "/genp/plain/x"])
                #expect(r.tty == nil)
                let results = r.results
                #expect(results.first?.outcome == "EACCES", "userPresence read without a terminal: \(r.summary)")
                #expect(
                    (results.first?.seconds ?? 99) < 2,
                    "it took \(results.first?.seconds ?? -1) s: it must fail at once")
                #expect(results.last?.outcome == "OK", "plain read: \(r.summary)")
                #expect(
                    box.pinentryStarts.isEmpty, "pinentry was started with no terminal to ask on: \(box.pinentryLog)")
                // The refusal is audited.
                if let pid = r.pid {
                    #expect(
                        box.audit.split(separator: "\n").contains {
                            $0.contains("pid \(pid) ") && $0.contains(" deny")
                        },
                        "no deny line for pid \(pid):\n\(box.audit)")
                }
            }
        }

        @Test("scripted pinentry: allow reads the secret, prompting once per open, naming the process and the item")
        func allow() throws {
            try presence(mode: "allow") { box in
                let r = try box.readerOnPty(["read:" + box.mnt + "/genp/presence/p"])
                let tty = try #require(r.tty, "the reader has no terminal: \(r.summary)")
                #expect(
                    r.results.first?.outcome == "OK" && r.results.first?.secret == "presence-secret",
                    "allowed read: \(r.summary)")
                #expect(
                    box.pinentryStarts.first?.contains("--ttyname \(tty)") ?? false,
                    "pinentry not started on the reader's terminal \(tty): \(box.pinentryLog)")
                let prompt = box.prompts.first ?? ""
                #expect(prompt.hasPrefix("PROMPT CONFIRM"), "no CONFIRM: \(box.pinentryLog)")
                if let pid = r.pid {
                    #expect(
                        prompt.contains("pid \(pid)") && prompt.contains("python3"),
                        "the prompt does not name the process: \(prompt)")
                }
                #expect(prompt.contains("presence"), "the prompt does not name the item: \(prompt)")
                // One open + read of the whole file is one read of the secret: one prompt.
                #expect(
                    box.prompts.count == 1,
                    "one open()+read() to EOF of a userPresence item prompted \(box.prompts.count) times (reuse window 0): \(box.prompts)"
                )
                if let pid = r.pid {
                    #expect(
                        box.audit.split(separator: "\n").contains {
                            $0.contains("pid \(pid) ") && $0.contains(" allow")
                        },
                        "no allow line for pid \(pid):\n\(box.audit)")
                }
                #expect(!box.audit.contains("presence-secret"))
            }
        }

        @Test("scripted pinentry: deny is EACCES, cancel is ECANCELED")
        func denyAndCancel() throws {
            try presence(mode: "deny") { box in
                let p = box.mnt + "/genp/presence/p"
                let denied = try box.readerOnPty(["read:" + p])
                #expect(denied.results.first?.outcome == "EACCES", "denied: \(denied.summary)")
                #expect(box.prompts.count >= 1, "no prompt: \(box.pinentryLog)")
                if let pid = denied.pid {
                    #expect(
                        box.audit.split(separator: "\n").contains {
                            $0.contains("pid \(pid) ") && $0.contains(" deny")
                        },
                        "no deny line for pid \(pid):\n\(box.audit)")
                }
                try box.setPinentryMode("cancel")
                let cancelled = try box.readerOnPty(["read:" + p])
                #expect(cancelled.results.first?.outcome == "ECANCELED", "cancelled: \(cancelled.summary)")
                // cat reports it too.
                let cat = try box.run("/usr/bin/python3", [box.ptyRunnerPath, "20", "/usr/bin/cat", p], timeout: 25)
                #expect(cat.status == 1 && cat.stdout.contains("Operation canceled"), "cat, cancelled: \(cat.summary)")
                #expect(
                    !denied.run.stdout.contains("presence-secret") && !cancelled.run.stdout.contains("presence-secret"))
            }
        }

        @Test("presence_timeout=2 with a silent pinentry: fails within ~10 s, other reads go on meanwhile")
        func timeoutDoesNotStall() throws {
            try presence(options: ["presence_timeout=2"], mode: "silent") { box in
                let started = Date()
                let waiting = try box.spawnReaderOnPty(["read:" + box.mnt + "/genp/presence/p"], timeout: 40)
                // Wait until the peer holds the prompt.
                let prompted = waitUntil(10) { !box.prompts.isEmpty }
                #expect(prompted, "the silent pinentry was never asked: \(box.pinentryLog) \(waiting.stdoutSoFar)")
                // Meanwhile: another item, a listing and an xattr, all at once.
                let other = try box.py(
                    """
                    t0 = time.time()
                    t('read', lambda: read(sys.argv[1] + '/genp/plain/x').decode())
                    t('ls', lambda: ','.join(sorted(os.listdir(sys.argv[1] + '/genp'))))
                    t('xattr', lambda: os.getxattr(sys.argv[1] + '/genp/presence/p', 'user.keychain.service').decode())
                    print('elapsed %.2f' % (time.time() - t0))
                    """, [box.mnt], timeout: 15)
                let out = labelled(other)
                #expect(out["read"] == "OK plain-secret", "read during the prompt: \(other.summary)")
                #expect(out["ls"] == "OK passcode,plain,presence", "ls during the prompt: \(other.summary)")
                #expect(out["xattr"] == "OK presence", "getxattr during the prompt: \(other.summary)")
                #expect(
                    (Double(out["elapsed"] ?? "") ?? 99) < 3,
                    "other requests stalled behind the prompt: \(other.summary)")
                #expect(
                    waiting.isRunning,
                    "the prompted read ended before the other reads were done: \(waiting.stdoutSoFar)")

                let r = ReaderResult(waiting.wait(timeout: 30))
                let elapsed = Date().timeIntervalSince(started)
                #expect(r.results.first?.outcome == "EACCES", "the unanswered prompt: \(r.summary)")
                #expect(elapsed < 12, "the unanswered prompt (presence_timeout=2) took \(elapsed) s")
                #expect(
                    (r.results.first?.seconds ?? 0) >= 1.5,
                    "the read failed before the prompt could time out: \(r.summary)")
                // The silent peer was ended.
                let gone = waitUntil(5) {
                    let daemons = Set(box.daemons())
                    return !box.ownProcesses().contains { pid in
                        Sandbox.parent(of: pid).map { daemons.contains($0) } ?? false
                    }
                }
                #expect(gone, "the timed-out pinentry is still running")
            }
        }

        @Test(
            "presence_reuse=3: one prompt per process and item within the window, again after it, again for another process"
        )
        func reuseWindow() throws {
            try presence(options: ["presence_reuse=3"], mode: "allow") { box in
                let p = box.mnt + "/genp/presence/p"
                // Same process: two reads at once, then one after the window.
                let r = try box.readerOnPty(["read:" + p, "read:" + p, "sleep:4", "read:" + p])
                #expect(r.results.map(\.outcome) == ["OK", "OK", "OK"], "reads: \(r.summary)")
                #expect(
                    box.prompts.count == 2,
                    "expected 2 prompts (one for the two reads within 3 s, one after expiry), got \(box.prompts.count): \(box.prompts)"
                )
                // Another process within the window of the first: its own prompt.
                let before = box.prompts.count
                let other = try box.readerOnPty(["read:" + p])
                #expect(other.results.first?.outcome == "OK")
                #expect(
                    box.prompts.count == before + 1, "a second process reused the first one's grant: \(box.prompts)")
            }
        }

        @Test("devicePasscode: the vault passphrase through GETPIN allows, a wrong one is EACCES")
        func devicePasscode() throws {
            try presence(mode: "allow") { box in
                let d = box.mnt + "/genp/passcode/d"
                try box.setPinentryMode("pin:" + box.passphrase)
                let ok = try box.readerOnPty(["read:" + d])
                #expect(
                    ok.results.first?.outcome == "OK" && ok.results.first?.secret == "passcode-secret",
                    "right passphrase: \(ok.summary)")
                #expect(box.prompts.first?.hasPrefix("PROMPT GETPIN") ?? false, "no GETPIN: \(box.pinentryLog)")
                #expect(
                    box.prompts.first?.contains("passphrase") ?? false,
                    "the prompt does not ask for the passphrase: \(box.prompts)")

                try box.setPinentryMode("pin:wrong-" + box.passphrase)
                let bad = try box.readerOnPty(["read:" + d])
                #expect(bad.results.first?.outcome == "EACCES", "wrong passphrase: \(bad.summary)")
                #expect(
                    !box.audit.contains(box.passphrase) && !box.daemonLog.contains(box.passphrase),
                    "the passphrase was logged")
            }
        }

        @Test("real pinentry-tty in tmux: the prompt appears on the reader's terminal, 'a' allows")
        func realPinentryTTY() throws {
            _ = try #require(keychainfsBinary, "keychainfs binary not found; set KEYCHAINFS_BIN")
            let box = try Sandbox("pinentry-tty")
            defer { box.teardown() }
            try box.initVault()
            try box.addGeneric("presence", "p", "tty-secret-42", extra: ["--access-control", "userPresence"])
            try box.mount(["pinentry=/usr/bin/pinentry-tty", "presence_timeout=30"])
            let p = box.mnt + "/genp/presence/p"
            let command = "cat \(q(p)); rc=$?; echo; echo EXIT=$rc; sleep 120"
            let started = try box.tmux(["new-session", "-d", "-x", "160", "-y", "45", command])
            try #require(started.status == 0, "tmux new-session: \(started.summary)")

            func pane() -> String {
                (try? box.tmux(["capture-pane", "-p", "-J"]).stdout) ?? ""
            }
            // The confirmation names the process and the item, and offers [ad].
            let prompted = waitUntil(20) { pane().contains("[ad]") }
            let screen = pane()
            #expect(prompted, "no pinentry-tty prompt in the pane:\n\(screen)")
            #expect(
                screen.contains("Allow pid") && screen.contains("/usr/bin/cat") && screen.contains("presence"),
                "the prompt does not name the process and item:\n\(screen)")
            // Answer every prompt with 'a' until cat is done (one expected; more are answered too).
            var answered = 0
            var lastPromptCount = 0
            let deadline = Date().addingTimeInterval(40)
            while Date() < deadline {
                let text = pane()
                if text.contains("EXIT=") { break }
                let count = text.components(separatedBy: "[ad]").count - 1
                if count > lastPromptCount {
                    _ = try box.tmux(["send-keys", "a"])
                    answered += 1
                    lastPromptCount = count
                }
                Thread.sleep(forTimeInterval: 0.3)
            }
            let final = pane()
            #expect(final.contains("tty-secret-42"), "the secret is not in the pane:\n\(final)")
            #expect(final.contains("EXIT=0"), "cat did not succeed:\n\(final)")
            #expect(answered == 1, "pinentry-tty asked \(answered) times for one cat:\n\(final)")
        }
    }
}
