import Foundation
import Keychain
import SystemPackage

/// What an audit line says was decided (`op=…`). docs/security.md lists every one; a test
/// checks the two agree.
public enum AuditOperation: Sendable, Equatable {
    /// A name in an access group the caller is not in was looked up (always denied: ENOENT).
    case lookup
    case openRead
    case openWrite
    case openTruncate
    /// Buffered bytes committed to an existing item (flush, fsync, close).
    case write
    /// A file created through the mount added as an item.
    case create
    case delete
    case rename
    /// An item renamed to an editor scratch name (always denied: EPERM).
    case renameToScratch
    /// A temp file renamed over an item gave it its bytes (`sed -i`).
    case replaceData
    /// One attribute set through its xattr.
    case setAttribute(String)

    /// The word in the log line.
    public var text: String {
        switch self {
        case .lookup: "lookup"
        case .openRead: "open-read"
        case .openWrite: "open-write"
        case .openTruncate: "open-truncate"
        case .write: "write"
        case .create: "create"
        case .delete: "delete"
        case .rename: "rename"
        case .renameToScratch: "rename-to-scratch"
        case .replaceData: "replace-data"
        case .setAttribute(let name): "set-\(name)"
        }
    }

    /// Every spelling the log can show, as docs/security.md lists them (`set-<attr>` for the
    /// attribute family).
    public static let documentedSpellings: [String] =
        [
            lookup, openRead, openWrite, openTruncate, write, create, delete, rename, renameToScratch, replaceData,
        ].map(\.text) + ["set-<attr>"]
}

/// The audit log: one line per access decision — time, pid, executable, item id, operation,
/// allow/deny and why. Never a secret or a secret's length. A file the user owns (0600).
/// Sendable as it is: its state is a descriptor, and each line is one write(2) on O_APPEND,
/// which the kernel keeps whole against other writers.
public final class AuditLog: Sendable {
    public let path: String
    private let fd: Int32

    public init(path: String) throws {
        self.path = path
        try FileManager.default.createDirectory(
            atPath: KeychainPaths.parent(of: path),
            withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
    }

    deinit { close(fd) }

    public func record(_ caller: Caller, item: Int64?, _ operation: AuditOperation, allowed: Bool, why: String? = nil) {
        var line =
            "\(AttributeTextTime.now()) \(caller.processDescription.isEmpty ? "pid ?" : caller.processDescription)"
        line += " item=\(item.map(String.init) ?? "-") op=\(operation.text) \(allowed ? "allow" : "deny")"
        if let why { line += " why=\(why)" }
        line += "\n"
        _ = line.withCString { write(fd, $0, strlen($0)) }
    }
}
