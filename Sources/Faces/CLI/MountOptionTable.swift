import KeychainAPI
import KeychainFS

/// One `-o` mount option: its name, whether it takes a value (and that value's name), its help
/// text, and what it does to the parsed options. `MountOption.table` is the only list of them:
/// parsing, the error for an unknown or malformed option, `keychainfs mount --help` and the
/// table in docs/cli.md (checked by a test) all come from it.
struct MountOption: Sendable {
    enum Effect: Sendable {
        /// `name` alone.
        case flag(@Sendable (inout ParsedMountOptions) -> Void)
        /// `name=VALUE`; the closure checks the value and applies it.
        case value(String, @Sendable (inout ParsedMountOptions, String) throws -> Void)
    }

    let name: String
    let help: String
    let effect: Effect

    /// The value's name (`SECONDS`, `PATH`), nil for an option that takes none.
    var valueName: String? {
        if case .value(let valueName, _) = effect { return valueName }
        return nil
    }

    /// How the option is written: `locked`, `cache=SECONDS`.
    var syntax: String { valueName.map { "\(name)=\($0)" } ?? name }

    // MARK: - The table

    static let table: [MountOption] = [
        .flag("allow_other", "Let other users use the mount; refused without default_permissions.") {
            $0.fuse.allowOther = true
        },
        .flag("default_permissions", "Let the kernel check the mode bits of every node.") {
            $0.fuse.defaultPermissions = true
        },
        .number(
            "cache", "SECONDS", "Kernel cache lifetime of names and attributes (default 1).",
            range: 0...60, takes: "a number from 0 to 60"
        ) { $0.fuse.cacheSeconds = $1 },
        .text("passphrase_file", "PATH", "Read the passphrase from this file, as --passphrase-file.") {
            $0.passphraseFile = $1
        },
        .text(
            "passphrase_program", "COMMAND", "Read the passphrase from this command's output, as --passphrase-program."
        ) {
            $0.passphraseProgram = $1
        },
        .flag("nonempty", "Mount over a directory that is not empty (its files hidden while mounted).") {
            $0.nonempty = true
        },
        .text("log", "PATH", "The daemon's log (default $XDG_STATE_HOME/keychainfs/daemon.log).") { $0.log = $1 },
        .flag("locked", "Mount without unlocking: nothing is readable before 'keychainfs unlock'.") {
            $0.fuse.startLocked = true
        },
        .number(
            "lock_after", "SECONDS", "Lock after this many seconds without a request.",
            range: 1...Double.infinity, takes: "a number of seconds, at least 1"
        ) { $0.fuse.lockAfter = $1 },
        .text("pinentry", "PATH", "The program that asks for user presence (default: the first pinentry on PATH).") {
            $0.pinentry = $1
        },
        .number(
            "presence_reuse", "SECONDS", "Reuse a presence approval for the same process and item (default 0).",
            range: 0...300, takes: "0 to 300 seconds"
        ) { $0.presenceReuse = $1 },
        .number(
            "presence_timeout", "SECONDS", "Give up on an unanswered presence prompt (default 60).",
            range: 1...600, takes: "1 to 600 seconds"
        ) { (options: inout ParsedMountOptions, seconds: Int) in
            options.presenceTimeout = seconds
        },
        .text("audit", "PATH", "The audit log (default $XDG_STATE_HOME/keychainfs/audit.log).") { $0.audit = $1 },
        .flag(
            "secret_service",
            "Also serve the vault as org.freedesktop.secrets on the session bus (docs/secret-service.md)."
        ) { $0.secretService = true },
        .text(
            "secret_service_address", "ADDRESS",
            "Serve the Secret Service on this D-Bus address (implies secret_service; write each comma in it as \\,)."
        ) {
            $0.secretService = true
            $0.secretServiceAddress = $1
        },
        .flag(
            "secret_service_trust_pid",
            "Serve group items to a D-Bus client on its pid alone, without the identity prompt (implies secret_service; gives up the protection in docs/secret-service.md, Access control)."
        ) {
            $0.secretService = true
            $0.secretServiceTrustPid = true
        },
        .flag(
            "ssh_agent",
            "Also serve the vault's keys as an ssh agent on $XDG_RUNTIME_DIR/keychainfs/ssh-agent.sock (docs/ssh.md)."
        ) { $0.sshAgentSocket = $0.sshAgentSocket ?? ParsedMountOptions.defaultAgentSocket },
        .text("ssh_agent_socket", "PATH", "Serve the ssh agent on this socket (implies ssh_agent).") {
            $0.sshAgentSocket = $1
        },
        .flag("debug", "Log every FUSE request (libfuse's -d).") { $0.fuse.debug = true },
    ]

    /// Options mount(8) and fstab pass that mean nothing to a FUSE filesystem of one user:
    /// accepted and ignored.
    static let ignored: [String] = [
        "rw", "defaults", "auto", "noauto", "user", "nouser", "users", "_netdev",
        "nofail", "nosuid", "suid", "nodev", "dev", "noexec", "exec", "atime",
        "noatime", "relatime", "async", "sync",
    ]

    /// Options about the mount alone (not the service behind it): `serve` refuses them, and a
    /// `mount` that joins a running service sends only these (docs/service.md).
    static let aboutTheMount: Set<String> = ["allow_other", "default_permissions", "cache", "debug", "nonempty"]

    /// The option names of `-o` arguments (each comma-separated, a value after `=` dropped).
    static func names(_ groups: [String]) -> [String] {
        groups.flatMap { ParsedMountOptions.split($0) }.map { String($0.prefix { $0 != "=" }) }
    }

    /// Options that are understood and refused, with the reason.
    static let refused: [String: String] = ["ro": "-o ro is not supported: a keychain mount is read-write"]

    static func named(_ name: String) -> MountOption? { table.first { $0.name == name } }

    /// The valid options, for error messages: `allow_other, default_permissions, cache=SECONDS, …`.
    static var known: String { table.map(\.syntax).joined(separator: ", ") }

    /// The table as `mount --help` prints it: two columns, wrapped here to 78 columns with a
    /// hanging indent (ArgumentParser wraps any line of 80 columns or more back to the margin,
    /// which broke rows in the middle).
    static var helpText: String {
        let indent = 2 + table.map(\.syntax.count).max()! + 2
        let rows = table.flatMap { option in
            wrap(option.help, width: 78 - indent).enumerated().map { i, line in
                let head = i == 0 ? "  " + option.syntax : ""
                return head + String(repeating: " ", count: indent - head.count) + line
            }
        }
        return
            (["Mount options (-o, comma-separated):"] + rows + [
                "",
                "mount(8)'s generic options (\(ignored.joined(separator: ", "))) are accepted and ignored; "
                    + "\(refused.keys.sorted().joined(separator: ", ")) is refused.",
            ]).joined(separator: "\n")
    }

    /// Greedy word wrap.
    static func wrap(_ text: String, width: Int) -> [String] {
        var lines: [String] = []
        var line = ""
        for word in text.split(separator: " ") {
            if !line.isEmpty && line.count + 1 + word.count > width {
                lines.append(line)
                line = ""
            }
            line += (line.isEmpty ? "" : " ") + word
        }
        return lines + [line]
    }

    // MARK: - Kinds of option

    static func flag(
        _ name: String, _ help: String,
        _ set: @escaping @Sendable (inout ParsedMountOptions) -> Void
    ) -> MountOption {
        MountOption(name: name, help: help, effect: .flag(set))
    }

    /// A value taken as it is (a path); empty is malformed.
    static func text(
        _ name: String, _ valueName: String, _ help: String,
        _ set: @escaping @Sendable (inout ParsedMountOptions, String) -> Void
    ) -> MountOption {
        MountOption(name: name, help: help, effect: .value(valueName) { options, value in set(&options, value) })
    }

    /// A number within `range`; anything else is a usage error saying what the option takes.
    static func number<N: LosslessStringConvertible & Comparable & Sendable>(
        _ name: String, _ valueName: String, _ help: String, range: ClosedRange<N>, takes: String,
        _ set: @escaping @Sendable (inout ParsedMountOptions, N) -> Void
    ) -> MountOption {
        MountOption(
            name: name, help: help,
            effect: .value(valueName) { options, value in
                guard let n = N(value), range.contains(n) else {
                    throw CLIError.usage("-o \(name)=\(valueName) takes \(takes)")
                }
                set(&options, n)
            })
    }
}

/// Mount options from `-o`, as given on the command line, by mount(8) or by fstab.
struct ParsedMountOptions {
    var fuse = MountOptions()
    var passphraseFile: String?
    var passphraseProgram: String?
    var log: String?
    var audit: String?
    var pinentry: String?
    var presenceReuse: Double = 0
    var presenceTimeout = 60
    /// Serve org.freedesktop.secrets beside the mount, on the session bus or this address.
    var secretService = false
    var secretServiceAddress: String?
    /// Trust a D-Bus client's pid where the bus gives no process handle (`secret_service_trust_pid`).
    var secretServiceTrustPid = false
    /// Serve the ssh agent from the mount's service, on this socket.
    var sshAgentSocket: String?
    /// Mount over a directory that has entries (refused otherwise: they would vanish from view).
    var nonempty = false

    /// Where `-o ssh_agent` listens: beside the service's API socket.
    static var defaultAgentSocket: String { ServiceLocator.directory() + "/ssh-agent.sock" }

    /// Parses `-o` arguments (each a comma-separated list) through `MountOption.table`.
    /// Only option names are ever repeated in errors: a value could be something private.
    init(_ groups: [String]) throws {
        for group in groups {
            for raw in Self.split(group) {
                let (name, value): (String, String?) = {
                    guard let eq = raw.firstIndex(of: "=") else { return (String(raw), nil) }
                    return (String(raw[..<eq]), String(raw[raw.index(after: eq)...]))
                }()
                if let reason = MountOption.refused[name] { throw CLIError.usage(reason) }
                if MountOption.ignored.contains(name) { continue }
                guard let option = MountOption.named(name) else {
                    throw CLIError.usage("unknown mount option '\(name)'; known: \(MountOption.known)")
                }
                switch (option.effect, value) {
                case (.flag(let set), nil):
                    set(&self)
                case (.value(_, let set), let value?) where !value.isEmpty:
                    try set(&self, value)
                case (.flag, _?):
                    throw CLIError.usage(
                        "malformed mount option '\(name)=…': \(name) takes no value; known: \(MountOption.known)")
                case (.value, _):
                    throw CLIError.usage(
                        "malformed mount option '\(name)': write \(option.syntax); known: \(MountOption.known)")
                }
            }
        }
        if passphraseFile != nil && passphraseProgram != nil {
            throw CLIError.usage("give -o passphrase_file or -o passphrase_program, not both")
        }
        if fuse.allowOther && !fuse.defaultPermissions {
            throw CLIError.usage(
                "-o allow_other needs -o default_permissions too: without it, other users could read the secrets")
        }
    }

    /// A comma-separated option list, where `\,` is a comma inside a value (as libfuse's
    /// option parser reads it): D-Bus addresses have commas (`unix:path=…,guid=…`).
    static func split(_ group: String) -> [Substring] {
        var out: [Substring] = []
        var current = ""
        var chars = group[...]
        while let c = chars.popFirst() {
            if c == "\\", chars.first == "," {
                current.append(",")
                chars.removeFirst()
            } else if c == "," {
                if !current.isEmpty { out.append(Substring(current)) }
                current = ""
            } else {
                current.append(c)
            }
        }
        if !current.isEmpty { out.append(Substring(current)) }
        return out
    }
}
