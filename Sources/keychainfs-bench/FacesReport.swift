import Foundation

/// The `faces` section's lines: p50/p90 per call, keychainfs ÷ peer with the issue's targets,
/// then the daemons' memory.
enum FacesReport {
    /// keychainfs's face, the peer it is held against and the issue's target (p50 ratio at most).
    static let pairs: [(ours: Face, peer: Face, target: Double?)] = [
        (.gitService, .gitLibsecret, 1.0),
        (.gitService, .gitStore, nil),
        (.dockerService, .dockerSecretService, 1.0),
        (.findService, .secretTool, 1.5),
    ]

    static func print(_ f: FacesFigures) {
        Out.line()
        Out.line(
            "Faces through the one service (issue 26): a vault of \(Fmt.grouped(f.vaultItems)) items (\(f.kdf)); \(f.rounds) rounds, every call once a round in a rotating order; each call a fresh process, spawn to exit, its answer checked for the secret:"
        )
        var rows = [["call", "p50", "p90", "max", "keychainfs ÷ this (p50, p90)", "target"]]
        for face in Face.allCases {
            guard let s = f.samples[face] else { continue }
            var ratio = "", target = ""
            if face == .gitDirect, let ours = f.samples[.gitService] {
                ratio = "this ÷ the service's: \(Fmt.ratio(s.p50 / ours.p50)) (\(s.count) calls, Argon2id each)"
            }
            for (start, whole) in [(Face.cliStart, Face.findService), (.dockerStart, .dockerService)]
            where face == start {
                guard let w = f.samples[whole] else { continue }
                ratio = "\(Int((s.p50 / w.p50 * 100).rounded())) % of the call above (p50)"
            }
            for pair in pairs where pair.peer == face {
                guard let ours = f.samples[pair.ours] else { continue }
                ratio = "\(Fmt.ratio(ours.p50 / s.p50)), \(Fmt.ratio(ours.percentile(0.9) / s.percentile(0.9)))"
                if let t = pair.target {
                    target = "≤ \(Fmt.ratio(t)) \(ours.p50 / s.p50 <= t ? "(met)" : "(not met)")"
                }
            }
            rows.append([
                face.label, Fmt.duration(s.p50), Fmt.duration(s.percentile(0.9)), Fmt.duration(s.max), ratio, target,
            ])
        }
        Out.table(rows)
        for face in Face.allCases { if let why = f.skipped[face] { Out.line("  skipped: \(face.label): \(why)") } }
        for note in f.notes { Out.line("  note: \(note)") }

        Out.line()
        Out.line("Daemon memory (VmRSS; idle: before the first call, after: once every call is done):")
        var memory = [
            ["daemon", "idle", "after the calls", "peak (VmHWM)"],
            [
                "keychainfs mount (its service answers the faces)", Fmt.bytes(f.daemonIdleRSS),
                Fmt.bytes(f.daemonAfterRSS), Fmt.bytes(f.daemonPeakRSS),
            ],
        ]
        if !f.keyringAfterRSS.isNaN {
            memory += [
                [
                    "gnome-keyring-daemon --components=secrets", Fmt.bytes(f.keyringIdleRSS),
                    Fmt.bytes(f.keyringAfterRSS), Fmt.bytes(f.keyringPeakRSS),
                ],
                ["dbus-daemon (the session bus gnome-keyring answers on)", "", Fmt.bytes(f.busRSS), ""],
                [
                    "keychainfs ÷ gnome-keyring-daemon", Fmt.ratio(f.daemonIdleRSS / f.keyringIdleRSS),
                    Fmt.ratio(f.daemonAfterRSS / f.keyringAfterRSS), "",
                ],
            ]
        }
        Out.table(memory)
    }
}
