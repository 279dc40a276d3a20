import FoundationEssentials
import Glibc
import KeychainAccess
import SystemPackage

/// /proc/self/mountinfo, for telling live, stale and absent mounts apart.
enum MountTable {
    struct Entry { let mountpoint: String; let fstype: String }

    static func entries() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ").map(String.init)
            guard let dash = fields.firstIndex(of: "-"), fields.count > dash + 1, fields.count > 4 else { return nil }
            return Entry(mountpoint: unescape(fields[4]), fstype: fields[dash + 1])
        }
    }

    /// mountinfo escapes space, tab, newline and backslash as octal.
    static func unescape(_ s: String) -> String {
        var out = [UInt8]()
        let b = Array(s.utf8)
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\"), i + 3 < b.count + 0,
                let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8)
            {
                out.append(v); i += 4
            } else {
                out.append(b[i]); i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Every keychainfs mount the system lists (of any user).
    static func keychainMounts() -> [Entry] {
        entries().filter { $0.fstype.hasPrefix("fuse") && $0.fstype.contains("keychainfs") }
    }

    static func isKeychainMount(_ path: String) -> Bool { keychainMounts().contains { $0.mountpoint == path } }

    /// A mount whose daemon died: the kernel answers ENOTCONN.
    static func isStale(_ path: String) -> Bool {
        // statvfs, not stat: the kernel answers stat from its attribute cache for up to a
        // second after the daemon died; statfs always asks the (dead) connection.
        var st = statvfs()
        return statvfs(path, &st) != 0 && Errno(rawValue: errno) == .socketNotConnected
    }

    static func fusermount(_ args: [String]) -> Int32 {
        do {
            return try ChildProcess.runQuietly("/usr/bin/fusermount3", arguments: ["fusermount3"] + args).status
        } catch { return 127 }
    }
}

/// `mkdir -p`: creates `path` and any missing parents with `mode` (less the umask).
func makeDirectories(_ path: String, mode: mode_t) throws {
    var current = path.hasPrefix("/") ? "" : "."
    for part in path.split(separator: "/") {
        current += "/" + part
        guard mkdir(current, mode) != 0 else { continue }
        let cause = Errno(rawValue: errno)
        var st = stat()
        // EEXIST, or EROFS/EACCES for a directory that exists on a read-only or closed parent.
        if stat(current, &st) == 0 && (st.st_mode & S_IFMT) == S_IFDIR { continue }
        throw CLIError.system("cannot create directory \(current)", cause)
    }
}

/// Makes a path absolute and removes `.`, `..` and repeated slashes, lexically: it must
/// never touch the filesystem, because the daemon calls it after its own mount is live and
/// a stat of the mountpoint would then wait on itself.
func absolutePath(_ path: String) -> String {
    let full = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    var parts: [Substring] = []
    for part in full.split(separator: "/") {
        if part == "." { continue }
        if part == ".." { _ = parts.popLast(); continue }
        parts.append(part)
    }
    return "/" + parts.joined(separator: "/")
}
