import FoundationEssentials
import Glibc
import KeychainCrypto

/// Which executables belong to which access groups: the Linux stand-in for an app's
/// entitlements. Stored in the vault, encrypted with the metadata key and signed with a key
/// derived from the master key, so that changing it needs the passphrase; the daemon keeps
/// only the public half and cannot forge a policy.
///
/// Semantics (docs/security.md): with no policy, every process is in the `default` group.
/// With a policy, a process whose executable is listed is in those groups (in policy order,
/// the first receiving its new items) and then in `default`; a process listed nowhere is in
/// `default` only. Items of a group are invisible to processes outside it.
public struct AccessPolicy: Sendable, Equatable {
    /// Group name → executable paths, in the order they were added.
    public private(set) var groups: [(name: String, executables: [String])] = []
    /// Decisions the user told a presence prompt to remember ("Always allow"): executable →
    /// the ids of the userPresence items it may use without asking again. Item ids are never
    /// reused (the manifest's highest id), so a decision cannot pass to a later item.
    public private(set) var rememberedPresence: [String: Set<Int64>] = [:]

    public init() {}

    public static func == (a: AccessPolicy, b: AccessPolicy) -> Bool {
        a.groups.map(\.name) == b.groups.map(\.name) && a.groups.map(\.executables) == b.groups.map(\.executables)
            && a.rememberedPresence == b.rememberedPresence
    }

    /// No access groups (every process is in `default`); remembered presence decisions do not
    /// change who sees what.
    public var isEmpty: Bool { groups.isEmpty }

    private static let defaultGroupOnly = [Caller.defaultAccessGroup]

    /// Remembers that `executable` may use item `itemID` without a presence prompt.
    public mutating func remember(executable: String, itemID: Int64) {
        rememberedPresence[executable, default: []].insert(itemID)
    }

    /// Forgets remembered decisions: of one executable (nil: every executable), for one item
    /// (nil: every item). Returns whether anything was forgotten.
    @discardableResult
    public mutating func forget(executable: String?, itemID: Int64?) -> Bool {
        var changed = false
        for exe in rememberedPresence.keys where executable == nil || exe == executable {
            let before = rememberedPresence[exe]!.count
            if let itemID { rememberedPresence[exe]!.remove(itemID) } else { rememberedPresence[exe]!.removeAll() }
            changed = changed || rememberedPresence[exe]!.count != before
            if rememberedPresence[exe]!.isEmpty { rememberedPresence[exe] = nil }
        }
        return changed
    }

    public mutating func add(group: String, executable: String) {
        if let i = groups.firstIndex(where: { $0.name == group }) {
            if !groups[i].executables.contains(executable) { groups[i].executables.append(executable) }
        } else {
            groups.append((group, [executable]))
        }
    }

    /// Removes an executable from a group, or the whole group when `executable` is nil.
    /// Returns whether anything changed.
    @discardableResult
    public mutating func remove(group: String, executable: String?) -> Bool {
        guard let i = groups.firstIndex(where: { $0.name == group }) else { return false }
        guard let executable else { groups.remove(at: i); return true }
        guard let j = groups[i].executables.firstIndex(of: executable) else { return false }
        groups[i].executables.remove(at: j)
        if groups[i].executables.isEmpty { groups.remove(at: i) }
        return true
    }

    /// The access groups of a process running `executable`.
    public func accessGroups(forExecutable executable: String?) -> [String] {
        // No groups (no policy, the usual case): every caller's one group, without a new array
        // each time (every identified request asks).
        guard let executable, !groups.isEmpty else { return Self.defaultGroupOnly }
        var out = groups.filter { $0.executables.contains(executable) }.map(\.name)
        if !out.contains(Caller.defaultAccessGroup) { out.append(Caller.defaultAccessGroup) }
        return out
    }

    /// Remembered decisions travel in the policy as one more part shaped like a group, so
    /// that they are signed, encrypted, covered by the manifest (no replay of a forgotten
    /// decision) and re-signed by key rotation like the groups. Its name cannot be a group's
    /// (a NUL), and its entries are `executable NUL id`, which no process's executable can
    /// equal: a keychainfs from before remembered decisions reads the part as a group nobody
    /// is in, and simply asks every time.
    static let rememberedPart = "\u{0}remembered-presence"

    /// The policy's bytes (what is sealed in the vault, and what the API socket carries).
    public var encoded: [UInt8] {
        var parts: [[UInt8]] = []
        for (name, exes) in groups { parts.append(Framing.frame([Framing.text(name)] + exes.map(Framing.text))) }
        if !rememberedPresence.isEmpty {
            let entries = rememberedPresence.sorted { $0.key < $1.key }.flatMap { exe, ids in
                ids.sorted().map { Framing.text("\(exe)\u{0}\($0)") }
            }
            parts.append(Framing.frame([Framing.text(Self.rememberedPart)] + entries))
        }
        return Framing.frame(parts)
    }

    public init?(encoded: [UInt8]) {
        guard let parts = Framing.unframe(encoded) else { return nil }
        for part in parts {
            guard let fields = Framing.unframe(part), let first = fields.first,
                let name = String(validating: first, as: UTF8.self)
            else { return nil }
            let exes = fields.dropFirst().compactMap { String(validating: $0, as: UTF8.self) }
            guard exes.count == fields.count - 1 else { return nil }
            if name == Self.rememberedPart {
                for entry in exes {
                    let pieces = entry.split(separator: "\u{0}", omittingEmptySubsequences: false)
                    guard pieces.count == 2, !pieces[0].isEmpty, let id = Int64(pieces[1]) else { return nil }
                    remember(executable: String(pieces[0]), itemID: id)
                }
                continue
            }
            groups.append((name, Array(exes)))
        }
    }
}

extension Framing {
    static func unframe(_ bytes: [UInt8]) -> [[UInt8]]? {
        var out: [[UInt8]] = []
        var i = 0
        while i < bytes.count {
            guard i + 4 <= bytes.count else { return nil }
            let n = Int(bytes[i..<(i + 4)].reversed().reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
            i += 4
            guard i + n <= bytes.count else { return nil }
            out.append(Array(bytes[i..<(i + n)]))
            i += n
        }
        return out
    }
}
