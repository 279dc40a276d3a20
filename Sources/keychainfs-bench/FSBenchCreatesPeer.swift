import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The peer of the create rows (issue 29, item 6): gocryptfs, an encrypting FUSE file system a
/// user would pick instead, on the same disk, pinned like everything else, when `gocryptfs` is
/// installed (`.ci/run` does not need it). Its file system is initialised here with a low scrypt
/// cost (the KDF runs once, at mount, and is no part of a figure), started in the foreground as
/// a child of the bench (so its CPU is counted per close as the keychainfs daemon's is), and
/// unmounted and stopped by pid. gocryptfs makes a file durable only at its writer's fsync:
/// the create + fsync rows compare like with like (a keychainfs close is durable either way).
struct GocryptfsPeer {
    let process: Process
    let plain: String

    static func binary() -> String? {
        ["/usr/bin/gocryptfs", "/usr/local/bin/gocryptfs"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func start(_ binary: String, directory: String) throws -> GocryptfsPeer {
        let cipher = directory + "/gocryptfs-cipher", plain = directory + "/gocryptfs-plain"
        let passfile = directory + "/gocryptfs-pass"
        for dir in [cipher, plain] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        try Data("bench passphrase\n".utf8).write(to: URL(fileURLWithPath: passfile))
        chmod(passfile, 0o600)
        let initialise = Process()
        initialise.executableURL = URL(fileURLWithPath: binary)
        initialise.arguments = ["-init", "-q", "-scryptn", "10", "-passfile", passfile, cipher]
        initialise.standardOutput = FileHandle.nullDevice
        try initialise.run()
        initialise.waitUntilExit()
        guard initialise.terminationStatus == 0 else {
            throw BenchError("gocryptfs -init failed (\(initialise.terminationStatus))")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["-fg", "-q", "-passfile", passfile, cipher, plain]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Stopped and unmounted on any exit of the run (a signal, an error), as the daemons are.
        Cleanup.shared.addChild(process.processIdentifier)
        Cleanup.shared.addMountpoint(plain)
        let peer = GocryptfsPeer(process: process, plain: plain)
        let started = Clock.now()
        while !MountTable.isMounted(plain) {
            guard Clock.since(started) < 15, process.isRunning else {
                peer.stop()
                throw BenchError("gocryptfs did not mount \(plain)")
            }
            Clock.sleep(0.05)
        }
        return peer
    }

    /// utime + stime of the gocryptfs process, in clock ticks.
    var cpuTicks: Int { ProcStatus.cpuTicks(pid: process.processIdentifier) }

    /// The files the overwrite blocks write, as the keychainfs vault's layout names them.
    static func prepare(root: String, files: Int) throws {
        for i in 0..<files {
            let dir = root + "/genp/\(Layout.service(i))"
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try Data(Layout.secret(i, tag: "peer")).write(to: URL(fileURLWithPath: dir + "/\(Layout.account(i))"))
        }
        try FileManager.default.createDirectory(
            atPath: root + "/genp/\(Layout.service(0))", withIntermediateDirectories: true)
    }

    /// Unmounts (lazily) and stops the process it started, by pid.
    func stop() {
        if MountTable.isMounted(plain) { MountTable.lazyUnmount(plain) }
        if process.isRunning { kill(process.processIdentifier, SIGTERM) }
        process.waitUntilExit()
        Cleanup.shared.removeChild(process.processIdentifier)
    }
}

extension CreateBench {
    /// keychainfs against gocryptfs, block for block: closes/s (keychainfs ÷ gocryptfs: above
    /// 1 is faster) and each daemon's CPU per close.
    static func printPeer(_ rows: [Int: Row], _ peer: [Int: Row]) {
        Out.line()
        Out.line(
            "Against gocryptfs on the same disk (the same blocks; closes/s ratio keychainfs ÷ gocryptfs, above 1.00× is faster)"
        )
        var table = [["", "writers", "gocryptfs closes/s", "its CPU per close", "keychainfs ÷ gocryptfs (closes/s)"]]
        for kind in Kind.allCases {
            for count in [1, writers] {
                guard let mine = rows[key(kind, count)], let theirs = peer[key(kind, count)]
                else { continue }
                table.append([
                    kind.name, "\(count)", Fmt.rate(median(theirs.rate)), Fmt.duration(median(theirs.cpu)),
                    Fmt.ratio(median(mine.rate) / median(theirs.rate)),
                ])
            }
        }
        Out.table(table)
    }
}
