import Foundation

/// Issue 26: the faces that ask for one credential per process, answered by the running mount's
/// API socket, against the tools users would otherwise run for the same answer. Every call is a
/// fresh process, as git, docker and a shell run them, timed from spawn to exit; its answer must
/// hold the secret (a quick "not found" is no figure). The calls of all faces alternate in rounds
/// (the order rotating each round), so drift hits every side alike.
enum Face: CaseIterable {
    // In the report's order: each start-alone row under the call it is part of.
    case gitService, gitDirect, gitStore, gitLibsecret, dockerService, dockerStart, dockerSecretService
    case findService, cliStart, secretTool

    var label: String {
        switch self {
        case .gitService: "git credential fill, keychainfs helper, the service answers"
        case .gitDirect: "git credential fill, keychainfs helper, no service (direct open)"
        case .gitStore: "git credential fill, git-credential-store (a file)"
        case .gitLibsecret: "git credential fill, git-credential-libsecret (gnome-keyring)"
        case .dockerService: "docker-credential-keychainfs get, the service answers"
        case .dockerSecretService: "docker-credential-secretservice get (gnome-keyring)"
        case .findService: "keychainfs find-generic-password -w, the service answers"
        case .secretTool: "secret-tool lookup (gnome-keyring)"
        case .dockerStart: "  docker-credential-keychainfs version (its start alone)"
        case .cliStart: "  keychainfs --version (the CLI's start alone)"
        }
    }
}

/// One way of asking for a credential: a program, its arguments, the file its stdin reads and
/// the secret its answer must contain.
struct FaceCall {
    let face: Face
    let program: String
    let args: [String]
    let request: String
    let expect: String
}

struct FacesFigures {
    var samples: [Face: Samples] = [:]
    /// Why a face has no figures.
    var skipped: [Face: String] = [:]
    var notes: [String] = []
    var kdf = "?"
    var vaultItems = 0
    var daemonIdleRSS = Double.nan, daemonAfterRSS = Double.nan, daemonPeakRSS = Double.nan
    var keyringIdleRSS = Double.nan, keyringAfterRSS = Double.nan, keyringPeakRSS = Double.nan
    var busRSS = Double.nan
    var rounds = 0
}

enum FacesBench {
    static let service = "faces-bench"
    static let account = "bench"
    static let host = "example.com"
    static let registry = "https://registry.example.com"
    static let gitSecret = "git-bench-secret"
    static let dockerSecret = "docker-bench-secret"
    static let findSecret = "find-bench-secret"

    static func run(_ o: Options, directory: String) throws {
        guard let cli = o.keychainfs else {
            Out.line()
            Out.line(
                "faces: skipped: no keychainfs binary beside the bench (build --product keychainfs) or --keychainfs")
            return
        }
        var f = FacesFigures()
        let bin = (cli as NSString).deletingLastPathComponent
        let gitHelper = bin + "/git-credential-keychainfs"
        let dockerHelper = bin + "/docker-credential-keychainfs"
        let git = "/usr/bin/git"

        let state = BenchVault.stateDirectory(directory)
        let home = directory + "/home"
        for d in [home, state, state + "/run"] {
            try FileManager.default.createDirectory(
                atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        // The run's own HOME, XDG directories and git configuration: nothing of the user's
        // keyring, git config or vault reaches a call, and nothing the calls write reaches them.
        let dropped = ["HOME=", "DBUS_SESSION_BUS_ADDRESS=", "GIT_", "DISPLAY=", "WAYLAND_DISPLAY=", "SSH_ASKPASS="]
        var environment =
            Daemon.cliEnvironment(state: state).filter { v in
                !dropped.contains { v.hasPrefix($0) } && !v.hasPrefix("KEYCHAINFS_")
            }
            + ["HOME=\(home)", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0"]

        Out.progress("faces: creating and populating a vault of 1,000 items")
        let vault = try BenchVault.create(size: 1_000, directory: directory)
        try vault.populate(upTo: 1_000)
        vault.close()
        f.vaultItems = 1_000
        f.kdf = "Argon2id INTERACTIVE, as every bench vault (`keychainfs create` defaults to MODERATE)"
        let passphraseFile = try BenchVault.writePassphraseFile(in: directory)

        // Requests, one file each: every call reads its stdin from one.
        func request(_ name: String, _ text: String) throws -> String {
            let path = directory + "/request-" + name
            guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8)) else {
                throw BenchError("cannot write \(path)")
            }
            return path
        }
        let gitRequest = try request("git", "protocol=https\nhost=\(host)\n\n")
        let dockerRequest = try request("docker", registry + "\n")
        let empty = try request("empty", "")
        let gitStoreRequest = "protocol=https\nhost=\(host)\nusername=\(account)\npassword=\(gitSecret)\n\n"
        let dockerStoreRequest =
            "{\"ServerURL\":\"\(registry)\",\"Username\":\"\(account)\",\"Secret\":\"\(dockerSecret)\"}"
        func fill(_ helper: String) -> [String] {
            ["-c", "credential.helper=", "-c", "credential.helper=\(helper)", "credential", "fill"]
        }

        // The vault's items, stored through the faces themselves (direct opens: no service yet).
        Out.progress("faces: storing the credentials in the vault and in the peers")
        var calls: [FaceCall] = []
        var direct: FaceCall?
        if access(gitHelper, X_OK) == 0 && access(git, X_OK) == 0 {
            try FacesSetup.feed(
                gitHelper, ["--vault", vault.path, "--passphrase-file", passphraseFile, "store"],
                input: gitStoreRequest,
                environment: environment, directory: directory)
            calls.append(
                FaceCall(
                    face: .gitService, program: git, args: fill("\(gitHelper) --vault \(vault.path)"),
                    request: gitRequest, expect: "password=\(gitSecret)"))
            direct = FaceCall(
                face: .gitDirect, program: git,
                args: fill("\(gitHelper) --vault \(vault.path) --passphrase-file \(passphraseFile)"),
                request: gitRequest, expect: "password=\(gitSecret)")
        } else {
            for face in [Face.gitService, .gitDirect] { f.skipped[face] = "\(gitHelper) or \(git) is not installed" }
        }
        if access(dockerHelper, X_OK) == 0 {
            try FacesSetup.feed(
                dockerHelper, ["--vault", vault.path, "--passphrase-file", passphraseFile, "store"],
                input: dockerStoreRequest, environment: environment, directory: directory)
            calls.append(
                FaceCall(
                    face: .dockerService, program: dockerHelper, args: ["--vault", vault.path, "get"],
                    request: dockerRequest, expect: dockerSecret))
        } else {
            f.skipped[.dockerService] = "\(dockerHelper) is not built (--product docker-credential-keychainfs)"
        }
        try FacesSetup.feed(
            cli,
            [
                "add-generic-password", "--vault", vault.path, "--passphrase-file", passphraseFile, "-s", service, "-a",
                account, "-w", findSecret,
            ], input: "", environment: environment, directory: directory)
        calls.append(
            FaceCall(
                face: .findService, program: cli,
                args: ["find-generic-password", "--vault", vault.path, "-s", service, "-a", account, "-w"],
                request: empty, expect: findSecret))
        // What starting the process costs before any vault work: the floor of each face's time.
        calls.append(FaceCall(face: .cliStart, program: cli, args: ["--version"], request: empty, expect: "keychainfs"))
        if access(dockerHelper, X_OK) == 0 {
            calls.append(
                FaceCall(
                    face: .dockerStart, program: dockerHelper, args: ["version"], request: empty, expect: "keychainfs"))
        }

        if access(git, X_OK) == 0 {
            let file = directory + "/git-credentials"
            try "https://\(account):\(gitSecret)@\(host)\n".write(toFile: file, atomically: true, encoding: .utf8)
            calls.append(
                FaceCall(
                    face: .gitStore, program: git, args: fill("store --file \(file)"), request: gitRequest,
                    expect: "password=\(gitSecret)"))
        } else {
            f.skipped[.gitStore] = "\(git) is not installed"
        }

        var keyring: GnomeKeyring?
        let keyringMissing = GnomeKeyring.missing
        if keyringMissing.isEmpty {
            keyring = try GnomeKeyring.start(directory: directory, environment: environment)
            environment.append("DBUS_SESSION_BUS_ADDRESS=\(keyring!.address)")
        }
        let onKeyring: [Face] = [.gitLibsecret, .dockerSecretService, .secretTool]
        if keyring != nil {
            calls += try keyringCalls(
                o, &f, git: git, directory: directory, environment: environment,
                requests: (gitRequest, dockerRequest, empty), stores: (gitStoreRequest, dockerStoreRequest), fill: fill)
        } else {
            for face in onKeyring { f.skipped[face] = "not installed: \(keyringMissing.joined(separator: ", "))" }
        }

        // No service: each call opens the vault and runs Argon2id; fewer calls, one warm-up.
        if let direct {
            Out.progress("faces: \(o.directCalls) calls of git credential fill with no service (Argon2id each)")
            var s = Samples()
            _ = try time(direct, environment: environment, scratch: directory)
            for _ in 0..<o.directCalls { s.add(try time(direct, environment: environment, scratch: directory)) }
            f.samples[.gitDirect] = s
        }

        let mountpoint = directory + "/mnt"
        try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
        Out.progress("faces: mounting the vault (its service answers the calls)")
        let daemon = try Daemon.start(
            .keychainfs(vault, cli: cli, stateDirectory: state), mountpoint: mountpoint,
            log: directory + "/keychainfs.log")
        _ = daemon.waitUntilIdle()
        f.daemonIdleRSS = daemon.rss
        f.keyringIdleRSS = keyring?.keyringRSS ?? .nan

        // One untimed call each: every answer checked before any is timed, caches warm.
        for call in calls { _ = try time(call, environment: environment, scratch: directory) }
        Out.progress("faces: \(o.calls) rounds of \(calls.count) calls")
        for round in 0..<o.calls {
            for k in 0..<calls.count {
                let call = calls[(round + k) % calls.count]
                f.samples[call.face, default: Samples()].add(
                    try time(call, environment: environment, scratch: directory))
            }
        }
        f.rounds = o.calls
        f.daemonAfterRSS = daemon.rss
        f.daemonPeakRSS = daemon.peakRSS
        if let keyring {
            f.keyringAfterRSS = keyring.keyringRSS
            f.keyringPeakRSS = keyring.keyringPeakRSS
            f.busRSS = keyring.busRSS
        }
        try daemon.stop()
        keyring?.stop()
        FacesReport.print(f)
    }

    /// Stores the credentials in gnome-keyring through each peer and returns the peers' calls.
    private static func keyringCalls(
        _ o: Options, _ f: inout FacesFigures, git: String, directory: String, environment: [String],
        requests: (git: String, docker: String, empty: String), stores: (git: String, docker: String),
        fill: (String) -> [String]
    ) throws -> [FaceCall] {
        var calls: [FaceCall] = []
        let libsecret = o.gitLibsecretSource.map { FacesSetup.buildLibsecretHelper(source: $0, directory: directory) }
        if let helper = libsecret?.path, access(git, X_OK) == 0 {
            try FacesSetup.feed(helper, ["store"], input: stores.git, environment: environment, directory: directory)
            calls.append(
                FaceCall(
                    face: .gitLibsecret, program: git, args: fill(helper), request: requests.git,
                    expect: "password=\(gitSecret)"))
        } else {
            f.skipped[.gitLibsecret] =
                libsecret?.note ?? "no git-credential-libsecret.c (give --git-libsecret-source FILE)"
        }
        let secretservice = "/usr/bin/docker-credential-secretservice"
        if access(secretservice, X_OK) == 0 {
            try FacesSetup.feed(
                secretservice, ["store"], input: stores.docker, environment: environment, directory: directory)
            calls.append(
                FaceCall(
                    face: .dockerSecretService, program: secretservice, args: ["get"], request: requests.docker,
                    expect: dockerSecret))
        } else {
            f.skipped[.dockerSecretService] = "\(secretservice) is not installed (golang-docker-credential-helpers)"
        }
        let secretTool = "/usr/bin/secret-tool"
        if access(secretTool, X_OK) == 0 {
            try FacesSetup.feed(
                secretTool, ["store", "--label=keychainfs-bench", "service", service, "account", account],
                input: findSecret, environment: environment, directory: directory)
            calls.append(
                FaceCall(
                    face: .secretTool, program: secretTool, args: ["lookup", "service", service, "account", account],
                    request: requests.empty, expect: findSecret))
        } else {
            f.skipped[.secretTool] = "\(secretTool) is not installed (libsecret-tools)"
        }
        return calls
    }

    /// One call, spawn to exit; throws unless it exits 0 with the secret in its answer.
    static func time(_ call: FaceCall, environment: [String], scratch: String) throws -> Double {
        let input = open(call.request, O_RDONLY | O_CLOEXEC)
        guard input >= 0 else { throw BenchError("cannot open \(call.request)") }
        defer { close(input) }
        let out = scratch + "/answer"
        let err = scratch + "/answer.err"
        unlink(out)
        unlink(err)
        let t = Clock.now()
        let pid = try Spawn.start(
            call.program, call.args, stdout: out, stderr: err, fds: [(input, 0)], environment: environment)
        let status = Spawn.wait(pid)
        let seconds = Clock.since(t)
        let answer = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        guard status == 0, answer.contains(call.expect) else {
            throw BenchError(
                "\(call.face.label): exit status \(status), no secret in the answer; it said: \(GnomeKeyring.tail(err))"
            )
        }
        return seconds
    }
}
