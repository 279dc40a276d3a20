import Dispatch
import FoundationEssentials
import Glibc
import KeychainStore
import Keychain
import SystemPackage
import Synchronization

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
    /// A signature asked of the ssh agent (the host key and forwarding in the line's detail).
    case sshSign
    /// Secret Service (D-Bus) calls: a search (item `-`: the line says who searched), a secret
    /// read (GetSecret, GetSecrets), an item created, its secret replaced, deleted, its label or
    /// attributes set, and an item object asked for that the caller may not see.
    case dbusSearch
    case dbusGetSecret
    case dbusCreate
    case dbusSetSecret
    case dbusDelete
    case dbusSetProperty
    case dbusLookup
    /// A Secret Service presence prompt's answer (allowed once, always allowed, or denied).
    case dbusPresence
    /// Through the door (`KeychainSession`: the service's API socket, the CLI, the credential
    /// helpers, `run`, `inject`): a secret handed out (one line per item), a search without
    /// secrets, an item's attributes or data changed. `create` and `delete` as above; the face
    /// is the line's `via=` detail.
    case read
    case search
    case update
    /// The keychain locked or unlocked through a face (`ssh-add -x`/`-X`, `keychainfs
    /// lock|unlock --vault`).
    case lock
    case unlock
    /// Sync (docs/sync.md): a page of records pulled from the group applied (`count=N`), and
    /// each pulled record refused (altered, moved, replayed, rolled back), with why.
    case syncApply
    case syncRefuse

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
        case .sshSign: "ssh-sign"
        case .dbusSearch: "dbus-search"
        case .dbusGetSecret: "dbus-get-secret"
        case .dbusCreate: "dbus-create"
        case .dbusSetSecret: "dbus-set-secret"
        case .dbusDelete: "dbus-delete"
        case .dbusSetProperty: "dbus-set-property"
        case .dbusLookup: "dbus-lookup"
        case .dbusPresence: "dbus-presence"
        case .read: "read"
        case .search: "search"
        case .update: "update"
        case .lock: "lock"
        case .unlock: "unlock"
        case .syncApply: "sync-apply"
        case .syncRefuse: "sync-refuse"
        }
    }

    /// Every spelling the log can show, as docs/security.md lists them (`set-<attr>` for the
    /// attribute family).
    public static let documentedSpellings: [String] =
        [
            lookup, openRead, openWrite, openTruncate, write, create, delete, rename, renameToScratch, replaceData,
            sshSign,
            dbusSearch, dbusGetSecret, dbusCreate, dbusSetSecret, dbusDelete, dbusSetProperty, dbusLookup,
            dbusPresence, read, search, update, lock, unlock, syncApply, syncRefuse,
        ].map(\.text) + ["set-<attr>"]
}

/// The audit log: one line per access decision — time, pid, executable, item id, operation,
/// allow/deny and why. Never a secret or a secret's length. A file the user owns (0600).
///
/// Rotated by size: when the file reaches `maxBytes` (8 MiB) it becomes `PATH.1` (`.1` becomes
/// `.2`, …) and a new file is started; `keep` (4) rotated files are kept and the oldest beyond
/// them is removed. No line is lost to a rotation: each line is one write(2) on O_APPEND, and a
/// writer switches files only under the state lock, so a line lands whole in the old file or the
/// new one. Several processes may share the file (two mounts, one default path): rotation runs
/// under `flock` on `PATH.lock` and re-checks the size there, and a writer whose file was rotated
/// by another process notices (its descriptor no longer names PATH, looked at once a second, or
/// the file it still writes fills) and reopens; meanwhile its lines land whole in `PATH.1`.
///
/// **Buffered** (`buffered: true`, the mount daemon): lines collect in memory and are written
/// together, one `write(2)` for all of them, at the latest one second after the first of them
/// (`flushDelay`), at once when 64 KiB are waiting, and by `flush()`, which the daemon calls when
/// its loop ends (SIGTERM, SIGINT, SIGHUP, unmount) and the control socket calls before answering
/// `status` or `lock`. So nothing is lost at a clean stop, and at most the last second of lines at
/// `kill -9` or a crash (docs/security.md). The lines of one flush still land whole in one file.
public final class AuditLog: Sendable {
    /// A path as an audit line may hold it: control characters and `\\` as `\\xHH`, spaces as
    /// `\\x20`, so that it is one word and can neither end the line nor forge the next.
    public static func spelled(_ path: String) -> String {
        String(decoding: Log.printable(path, escapingBackslash: true), as: UTF8.self)
            .replacing(" ", with: "\\x20")
    }

    public let path: String
    public let maxBytes: Int
    public let keep: Int
    public let buffered: Bool
    /// The longest a buffered line waits for its write, in seconds. The delayed flush runs on
    /// `SerialWorker.deferred`, not on a DispatchQueue: that would wake the daemon every second
    /// for good (SerialWorker).
    public static let flushDelay = 1.0
    /// Buffered bytes that are written at once, without waiting for the delay.
    static let flushBytes = 64 << 10
    private struct State {
        var fd: Int32
        /// When (CLOCK_MONOTONIC, ns) PATH was last compared with the descriptor.
        var pathCheckedAt: UInt64 = 0
        /// Buffered lines not yet written (whole lines only).
        var pending: [UInt8] = []
        /// Whether a delayed flush of `pending` is on its way.
        var flushScheduled = false
        /// The lines' time up to the second, spelled once a second.
        var timePrefix = AttributeTextTime.SecondPrefix()
    }
    private let state: Mutex<State>

    public init(path: String, maxBytes: Int = 8 << 20, keep: Int = 4, buffered: Bool = false) throws {
        self.path = path
        self.maxBytes = maxBytes
        self.keep = max(1, keep)
        self.buffered = buffered
        try FileManager.default.createDirectory(
            atPath: KeychainPaths.parent(of: path),
            withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        state = Mutex(State(fd: try Self.openLog(path)))
    }

    deinit {
        state.withLock { s in
            writeOut(&s)
            close(s.fd)
        }
    }

    /// Writes every buffered line now.
    public func flush() { state.withLock { writeOut(&$0) } }

    /// The log's files, oldest first: `PATH.keep` … `PATH.1`, `PATH` (those that exist).
    public static func files(of path: String, keep: Int = 4) -> [String] {
        ((1...max(1, keep)).reversed().map { "\(path).\($0)" } + [path]).filter {
            FileManager.default.fileExists(atPath: $0)
        }
    }

    /// `detail`: words after the decision that say more about the request (never a secret):
    /// the ssh agent's `host=SHA256:… forwarded=yes|no`.
    public func record(
        _ caller: Caller, item: Int64?, _ operation: AuditOperation, allowed: Bool, why: String? = nil,
        detail: String? = nil
    ) {
        // Spelled into bytes directly: the Foundation time format and string interpolation were
        // half of this function's cost, which every open pays. Spelled where the line is kept
        // until its write, under the log's lock: no array of its own to make, copy and free.
        append { s in
            AttributeTextTime.append(to: &s.pending, reusing: &s.timePrefix)
            s.pending.append(UInt8(ascii: " "))
            if caller.processDescription.isEmpty {
                s.pending += "pid ?".utf8
            } else {
                s.pending += caller.processDescription.utf8
            }
            s.pending += " item=".utf8
            if let item { DecimalText.append(item, to: &s.pending) } else { s.pending.append(UInt8(ascii: "-")) }
            s.pending += " op=".utf8
            s.pending += operation.text.utf8
            s.pending += allowed ? " allow".utf8 : " deny".utf8
            if let detail {
                s.pending.append(UInt8(ascii: " "))
                s.pending += detail.utf8
            }
            if let why {
                s.pending += " why=".utf8
                s.pending += why.utf8
            }
            s.pending.append(UInt8(ascii: "\n"))
        }
    }

    /// Appends one whole line, which `spell` adds to the end of the buffered bytes (`pending`):
    /// written now, or buffered (see the type's comment).
    private func append(_ spell: (inout State) -> Void) {
        guard buffered else {
            state.withLock { s in
                spell(&s)
                writeOut(&s)
            }
            return
        }
        let scheduleFlush = state.withLock { s -> Bool in
            spell(&s)
            if s.pending.count >= min(Self.flushBytes, maxBytes / 4) {
                writeOut(&s)
                return false
            }
            if s.flushScheduled { return false }
            s.flushScheduled = true
            return true
        }
        if scheduleFlush {
            SerialWorker.deferred.after(seconds: Self.flushDelay) { [weak self] in self?.flush() }
        }
    }

    /// Writes the buffered lines in one write(2), rotating first if the file is full.
    private func writeOut(_ state: inout State) {
        state.flushScheduled = false
        guard !state.pending.isEmpty else { return }
        // The buffer is kept for the next lines unless an unusual burst made it larger than a
        // flush's worth and a line: lines arriving fast are written once `flushBytes` are
        // waiting, and a buffer given up at each of those writes was grown again line by line
        // (a dozen reallocations, copies and fresh pages per 64 KiB of lines).
        defer { state.pending.removeAll(keepingCapacity: state.pending.count <= 2 * Self.flushBytes) }
        var st = stat()
        var rotatedElsewhere = fstat(state.fd, &st) != 0
        // Whether another process rotated PATH away from this descriptor, looked at once a
        // second (a path lookup per line was 3% of an open): meanwhile lines go on landing
        // whole in the file now called PATH.1, and a full file is rotated or reopened below.
        let now = MonotonicClock.nanoseconds()
        if !rotatedElsewhere && now &- state.pathCheckedAt >= 1_000_000_000 {
            state.pathCheckedAt = now
            var current = stat()
            rotatedElsewhere =
                stat(path, &current) != 0 || st.st_ino != current.st_ino || st.st_dev != current.st_dev
        }
        if rotatedElsewhere || Int(st.st_size) + state.pending.count > maxBytes {
            if !rotatedElsewhere { rotate() }
            if let fd = try? Self.openLog(path) {
                close(state.fd)
                state.fd = fd
            }
        }
        _ = state.pending.withUnsafeBytes { write(state.fd, $0.baseAddress, $0.count) }
    }

    /// Shifts the files by one under the cross-process lock, unless another process did already
    /// (the file at PATH is no longer full).
    private func rotate() {
        let lock = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        if lock >= 0 { flock(lock, LOCK_EX) }
        defer { if lock >= 0 { close(lock) } }
        var st = stat()
        guard stat(path, &st) == 0, Int(st.st_size) > 0,
            Int(st.st_size) >= maxBytes / 2
        else { return }
        unlink("\(path).\(keep)")
        for n in stride(from: keep - 1, through: 1, by: -1) { rename("\(path).\(n)", "\(path).\(n + 1)") }
        rename(path, path + ".1")
    }

    private static func openLog(_ path: String) throws -> Int32 {
        let fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Errno(rawValue: errno) }
        return fd
    }
}
