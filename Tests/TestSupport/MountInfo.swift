import Foundation

/// The mount table as /proc/self/mountinfo states it (proc(5)): the one parser of the tests.
public enum MountInfo {
    public struct Entry: Sendable {
        public let mountpoint: String
        public let fstype: String
        public let source: String
        public let options: String
    }

    /// Parses mountinfo text: field 5 is the mount point, and after the lone `-` come the
    /// filesystem type, the source and the superblock options. Spaces, tabs, newlines and
    /// backslashes in paths are octal escapes (`\040`).
    public static func parse(_ text: String) -> [Entry] {
        text.split(separator: "\n").compactMap { line in
            let f = line.split(separator: " ").map(String.init)
            guard let dash = f.firstIndex(of: "-"), dash >= 5, f.count > dash + 2 else { return nil }
            return Entry(
                mountpoint: unescape(f[4]), fstype: f[dash + 1], source: unescape(f[dash + 2]),
                options: f.count > dash + 3 ? f[dash + 3] : "")
        }
    }

    public static func entries() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        return parse(text)
    }

    public static func unescape(_ s: String) -> String {
        var out = [UInt8]()
        let b = Array(s.utf8)
        var i = 0
        while i < b.count {
            if b[i] == UInt8(ascii: "\\"), i + 3 < b.count,
                let v = UInt8(String(decoding: b[(i + 1)...(i + 3)], as: UTF8.self), radix: 8)
            {
                out.append(v); i += 4
            } else {
                out.append(b[i]); i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// keychainfs mounts (`fuse.keychainfs`) on `path`.
    public static func keychainMounts(at path: String) -> [Entry] {
        entries().filter { $0.mountpoint == path && $0.fstype == "fuse.keychainfs" }
    }

    public static func isKeychainMount(_ path: String) -> Bool { !keychainMounts(at: path).isEmpty }
}
