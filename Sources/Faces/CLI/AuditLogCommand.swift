import ArgumentParser
import Dispatch
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess

/// `keychainfs log`: the audit log (docs/security.md, "Audit"), filtered, as JSON, or followed.
struct AuditLogCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "log",
        abstract: "Show the audit log: one line per access decision of the keychain services and commands.")
    @Option(name: .customShort("n"), help: ArgumentHelp("Only the last N lines.", valueName: "lines")) var lines: Int?
    @Option(
        name: .long,
        help: ArgumentHelp("The log file (default: $XDG_STATE_HOME/keychainfs/audit.log).", valueName: "path"))
    var file: String?
    @Flag(name: .shortAndLong, help: "Keep printing lines as they are written (across rotations), until interrupted.")
    var follow = false
    @Flag(name: .long, help: "One JSON object per line: time, process, item, op, decision, detail, why.")
    var json = false
    @Option(name: .long, help: ArgumentHelp("Only lines about this item id.", valueName: "id")) var item: Int64?
    @Option(
        name: .long, help: ArgumentHelp("Only lines whose caller runs this executable (a path).", valueName: "path"))
    var executable: String?
    @Option(
        name: .long,
        help: ArgumentHelp("Only this operation (open-read, read, ssh-sign, dbus-get-secret, …).", valueName: "op"))
    var operation: String?
    @Option(name: .long, help: ArgumentHelp("Only lines about this vault (as the line names it).", valueName: "path"))
    var vault: String?
    @Flag(name: .long, help: "Only refusals.") var denied = false
    @Option(
        name: .long,
        help: ArgumentHelp("Only lines at or after this time (RFC 3339, UTC: 2026-11-27T10:00:00Z).", valueName: "time")
    )
    var since: String?

    func validate() throws {
        if let since, AttributeText.parseDate(since) == nil {
            throw ValidationError("--since takes an RFC 3339 time such as 2026-11-27T10:00:00Z")
        }
    }

    func run() throws {
        let path = file ?? (KeychainPaths.stateDirectory() + "/audit.log")
        syncServices()
        // The rotated files first (oldest first), then the current one.
        let files = AuditLog.files(of: path)
        guard !files.isEmpty || follow else {
            throw CLIError.failure("no audit log at \(path) (nothing has been mounted yet)")
        }
        var data = Data()
        for file in files { data += FileManager.default.contents(atPath: file) ?? Data() }
        var all = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: true)
            .filter(matches)
        if let lines { all = Array(all.suffix(max(0, lines))) }
        for line in all { print(line) }
        if follow { try AuditFollower(path: path).follow { if matches($0) { print($0) } } }
    }

    private func print(_ line: Substring) {
        guard json else { return Output.line(String(line)) }
        Output.line(AuditLine(line).map(\.json) ?? #"{"unparsed":\#(AuditLine.quote(String(line)))}"#)
    }

    private func matches(_ line: Substring) -> Bool {
        if !denied && item == nil && executable == nil && operation == nil && vault == nil && since == nil {
            return true
        }
        guard let parsed = AuditLine(line) else { return false }
        if denied && parsed.allowed { return false }
        if let item, parsed.item != String(item) { return false }
        if let operation, parsed.operation != operation { return false }
        if let executable, !parsed.process.contains(" " + AuditLog.spelled(executable)) { return false }
        if let vault, !parsed.detail.contains("vault=" + AuditLog.spelled(vault)) { return false }
        // Lines are stamped in UTC to the millisecond (`2026-11-27T10:00:00.123Z`): to the second,
        // text order is time order.
        if let since, let time = AttributeText.parseDate(since),
            parsed.time.prefix(19) < AttributeText.iso8601(time).prefix(19)
        {
            return false
        }
        return true
    }

    /// A service buffers its audit lines for up to a second; asking each of this user's mounts
    /// for its status (answered once its lines are written) makes the log complete up to now.
    /// Mounts that do not answer within two seconds (wedged, another user's, stale) are not
    /// waited for: the log is printed as it is.
    private func syncServices() {
        let mounts = MountTable.keychainMounts()
        guard !mounts.isEmpty else { return }
        let group = DispatchGroup()
        for mount in mounts {
            group.enter()
            Threads.detach {
                _ = try? control(mount.mountpoint, "status")
                group.leave()
            }
        }
        _ = group.wait(timeout: .now() + 2)
    }
}

/// One audit line read back: `TIME PROCESS item=ID op=OP allow|deny [DETAIL…] [why=REASON]`.
struct AuditLine {
    var time: String
    var process: String
    var item: String
    var operation: String
    var allowed: Bool
    var detail: String
    var why: String?

    init?(_ line: Substring) {
        guard let space = line.firstIndex(of: " "), let itemAt = line.firstRange(of: " item=") else { return nil }
        time = String(line[..<space])
        process = String(line[line.index(after: space)..<itemAt.lowerBound])
        var rest = line[itemAt.upperBound...]
        if let whyAt = rest.firstRange(of: " why=") {
            why = String(rest[whyAt.upperBound...])
            rest = rest[..<whyAt.lowerBound]
        }
        let words = rest.split(separator: " ", maxSplits: 3)
        guard words.count >= 3, words[1].hasPrefix("op="), words[2] == "allow" || words[2] == "deny" else {
            return nil
        }
        item = String(words[0])
        operation = String(words[1].dropFirst(3))
        allowed = words[2] == "allow"
        detail = words.count > 3 ? String(words[3]) : ""
    }

    var json: String {
        var fields = [
            ("time", Self.quote(time)), ("process", Self.quote(process)),
            ("item", item == "-" ? "null" : item), ("op", Self.quote(operation)),
            ("decision", Self.quote(allowed ? "allow" : "deny")),
        ]
        var details: [(String, String)] = []
        for word in detail.split(separator: " ") {
            let parts = word.split(separator: "=", maxSplits: 1)
            details.append((String(parts[0]), Self.quote(parts.count == 2 ? String(parts[1]) : "")))
        }
        fields.append(("detail", "{" + details.map { "\(Self.quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"))
        fields.append(("why", why.map(Self.quote) ?? "null"))
        return "{" + fields.map { "\(Self.quote($0.0)):\($0.1)" }.joined(separator: ",") + "}"
    }

    static func quote(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += "\\u" + AttributeText.hex(scalar.value, width: 4)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}

/// `log --follow`: new lines as they are written, and on into the new file when the log rotates
/// (its inode changes), polling twice a second while nothing comes.
struct AuditFollower {
    let path: String

    func follow(_ emit: (Substring) -> Void) throws -> Never {
        var fd: Int32 = -1
        var inode: ino_t = 0
        var pending = [UInt8]()
        var st = stat()
        if stat(path, &st) == 0 {
            fd = open(path, O_RDONLY | O_CLOEXEC)
            inode = st.st_ino
            lseek(fd, 0, SEEK_END)
        }
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            var n = 0
            if fd >= 0 { n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
            if n > 0 {
                pending += buffer[0..<n]
                while let newline = pending.firstIndex(of: 10) {
                    emit(Substring(String(decoding: pending[..<newline], as: UTF8.self)))
                    pending.removeSubrange(...newline)
                }
                continue
            }
            // At the end: a rotated log is a new file at the path; read it from its start.
            if stat(path, &st) == 0 && st.st_ino != inode {
                if fd >= 0 { close(fd) }
                fd = open(path, O_RDONLY | O_CLOEXEC)
                inode = st.st_ino
                continue
            }
            usleep(500_000)
        }
    }
}
