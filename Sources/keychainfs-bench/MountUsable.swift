import Foundation
import Keychain
import KeychainCrypto

/// Issue 9, item 4: `keychainfs mount VAULT MOUNTPOINT --passphrase-fd 3` — the background
/// mount users run, CLI and daemon — until the mount is usable: the command has returned and
/// the first `cat` of an item has succeeded. Beside it, in alternating blocks, Argon2id
/// INTERACTIVE alone (what the bench vaults use): the target is one KDF + 100 ms.
struct MountUsableFigures {
    var usable = Samples()  // spawn of `keychainfs mount` → its exit → `cat` of an item exits 0
    var commandReturned = Samples()  // spawn → `keychainfs mount` exits 0
    var kdf = Samples()  // Argon2id INTERACTIVE alone, alternated with the mounts
    /// The first readdir of the 10,000-entry directory once the mount is usable (from 11,000
    /// items): a listing made from the store by a daemon that has listed nothing yet, while the
    /// fresh mount's background integrity pass may still run beside it on the same CPU.
    var firstReaddir = Samples()
    /// The same figure for `--baseline-keychainfs` (another build, e.g. main's), alternated too.
    var baselineUsable = Samples()
    var baselineCommandReturned = Samples()
    var baselineFirstReaddir = Samples()
    var baseline: String?
    var rounds: Int { usable.count }
}

enum MountUsable {
    static let target = 0.100

    /// `rounds` mounts and as many KDFs (and as many mounts with `baseline`, another build's
    /// CLI), in an order that rotates each round, so drift hits every side alike. Each mount is
    /// unmounted and its daemon gone before the next.
    static func measure(
        _ vault: BenchVault, cli: String, baseline: String? = nil, directory: String, rounds: Int = 5
    ) throws -> MountUsableFigures {
        var f = MountUsableFigures()
        f.baseline = baseline
        let mp = directory + "/mnt-usable-\(vault.size)"
        try FileManager.default.createDirectory(atPath: mp, withIntermediateDirectories: true)
        Cleanup.shared.addMountpoint(mp)
        let passphrase = try BenchVault.passphrase()
        let item = mp + "/genp/\(Layout.service(42))/\(Layout.account(42))"
        let log = directory + "/usable-\(vault.size).log"
        let environment = Daemon.cliEnvironment(state: BenchVault.stateDirectory(directory))
        func kdf() throws {
            let salt = Sodium.randomBytes(PasswordHashParameters.saltBytes)
            f.kdf.add(
                try Clock.time {
                    _ = try KeyDerivation.passwordKey(passphrase: passphrase, salt: salt, parameters: .interactive)
                })
        }
        func mount(_ cli: String, isBaseline: Bool) throws {
            var secret: [Int32] = [0, 0]
            guard pipe(&secret) == 0 else { throw BenchError("pipe: \(String(cString: strerror(errno)))") }
            for fd in secret { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            let messages = directory + "/usable-\(vault.size).stderr"
            unlink(messages)
            let t = Clock.now()
            let pid: pid_t
            do {
                pid = try Spawn.start(
                    cli, ["mount", vault.path, mp, "--passphrase-fd", "3", "-o", "log=\(log)"], stdout: log,
                    stderr: messages, fds: [(secret[0], 3)], environment: environment)
            } catch {
                for fd in secret { close(fd) }
                throw error
            }
            close(secret[0])
            _ = Array(BenchVault.passphraseText.utf8).withUnsafeBytes { write(secret[1], $0.baseAddress, $0.count) }
            close(secret[1])
            let status = Spawn.wait(pid, timeout: 600)
            let returned = Clock.since(t)
            let said = (try? String(contentsOfFile: messages, encoding: .utf8)) ?? ""
            guard status == 0 else {
                MountTable.lazyUnmount(mp)
                throw BenchError("keychainfs mount exited \(status.map(String.init) ?? "late"): \(said)")
            }
            let cat = try Spawn.start("/usr/bin/cat", [item], stdout: "/dev/null", stderr: log)
            let catStatus = Spawn.wait(cat)
            let usable = Clock.since(t)
            // The daemon's pid, from "mounted … (daemon pid N, log …)".
            let daemon = said.range(of: "daemon pid ").flatMap { r in
                pid_t(said[r.upperBound...].prefix { $0.isNumber })
            }
            guard catStatus == 0 else {
                MountTable.lazyUnmount(mp)
                throw BenchError("cat \(item) on the fresh mount exited \(catStatus)")
            }
            if Layout.hasLargeDirectory(vault.size) {
                do {
                    let listed = try FSBench.readdirTimed(
                        mp + "/genp/" + Layout.largeDirectory, expect: Layout.largeCount)
                    if isBaseline { f.baselineFirstReaddir.add(listed) } else { f.firstReaddir.add(listed) }
                } catch {
                    MountTable.lazyUnmount(mp)
                    throw error
                }
            }
            if isBaseline {
                f.baselineCommandReturned.add(returned)
                f.baselineUsable.add(usable)
            } else {
                f.commandReturned.add(returned)
                f.usable.add(usable)
            }
            let u = try Spawn.start(cli, ["unmount", mp], stdout: nil, stderr: log, environment: environment)
            if Spawn.wait(u) != 0 { MountTable.lazyUnmount(mp) }
            // The next mount needs the vault's daemon lock: wait for this daemon to end.
            if let daemon {
                let deadline = Clock.now() + 15_000_000_000
                while kill(daemon, 0) == 0 && Clock.now() < deadline { Clock.sleep(0.005) }
            }
            if MountTable.isMounted(mp) { throw BenchError("\(mp) is still mounted after unmount") }
        }
        var steps: [() throws -> Void] = [kdf, { try mount(cli, isBaseline: false) }]
        if let baseline { steps.append { try mount(baseline, isBaseline: true) } }
        for round in 0..<rounds {
            for k in 0..<steps.count { try steps[(round + k) % steps.count]() }
        }
        return f
    }

    /// `floorReaddir`: the floor's readdir of the same directory in this run (p50), beside
    /// which the first readdir after a mount is printed.
    static func print(_ f: MountUsableFigures, size: Int, floorReaddir: Double? = nil) {
        let target = f.kdf.p50 + Self.target
        Out.line()
        Out.line(
            "Mount until usable at \(Fmt.grouped(size)) items (`keychainfs mount --passphrase-fd 3`, then the first `cat` of an item; \(f.rounds) mounts alternated with Argon2id INTERACTIVE alone):"
        )
        var rows = [
            ["figure", "p50", "p99", "max", "target"],
            [
                "mount until usable", Fmt.duration(f.usable.p50), Fmt.duration(f.usable.p99),
                Fmt.duration(f.usable.max),
                "KDF + 100 ms = \(Fmt.duration(target)) \(f.usable.p50 <= target ? "(within)" : "(over)")",
            ],
            [
                "  of which the command's return", Fmt.duration(f.commandReturned.p50),
                Fmt.duration(f.commandReturned.p99), Fmt.duration(f.commandReturned.max), "",
            ],
            [
                "Argon2id INTERACTIVE alone", Fmt.duration(f.kdf.p50), Fmt.duration(f.kdf.p99), Fmt.duration(f.kdf.max),
                "",
            ],
            [
                "mount until usable − KDF", Fmt.duration(f.usable.p50 - f.kdf.p50), "", "",
                "≤ 100 ms \(f.usable.p50 - f.kdf.p50 <= Self.target ? "(within)" : "(over)")",
            ],
        ]
        if f.firstReaddir.count > 0 {
            let floor = floorReaddir.map {
                "\(Fmt.ratio(f.firstReaddir.p50 / $0)) the floor's readdir (\(Fmt.duration($0)))"
            }
            rows.append([
                "first readdir of 10,000 after mounting", Fmt.duration(f.firstReaddir.p50),
                Fmt.duration(f.firstReaddir.p99),
                Fmt.duration(f.firstReaddir.max), floor ?? "",
            ])
        }
        if f.baseline != nil {
            rows += [
                [
                    "baseline: mount until usable", Fmt.duration(f.baselineUsable.p50),
                    Fmt.duration(f.baselineUsable.p99), Fmt.duration(f.baselineUsable.max),
                    "baseline ÷ this \(Fmt.ratio(f.baselineUsable.p50 / f.usable.p50))",
                ],
                [
                    "baseline: usable − KDF", Fmt.duration(f.baselineUsable.p50 - f.kdf.p50), "", "",
                    "baseline ÷ this \(Fmt.ratio((f.baselineUsable.p50 - f.kdf.p50) / (f.usable.p50 - f.kdf.p50)))",
                ],
            ]
            if f.baselineFirstReaddir.count > 0 && f.firstReaddir.count > 0 {
                rows.append([
                    "baseline: first readdir of 10,000 after mounting", Fmt.duration(f.baselineFirstReaddir.p50),
                    Fmt.duration(f.baselineFirstReaddir.p99), Fmt.duration(f.baselineFirstReaddir.max),
                    "baseline ÷ this \(Fmt.ratio(f.baselineFirstReaddir.p50 / f.firstReaddir.p50))",
                ])
            }
        }
        Out.table(rows)
        if let baseline = f.baseline { Out.line("  baseline: \(baseline)") }
    }
}
