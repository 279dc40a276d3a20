import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// `/views`: read-only files generated from the items for tools that read a file of their own
/// format. `ln -s MOUNT/views/netrc ~/.netrc`.
struct ViewsDirectory: TopLevelDirectory, NodeLookuper, NodeReaddirer {
    var name: String { "views" }

    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        guard let file = ViewFiles.all.first(where: { $0.name == name }) else { throw Errno.noSuchFileOrDirectory }
        return try file.stat(in: fs, caller: caller)
    }

    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry] {
        ViewFiles.all.map { DirectoryEntry(name: $0.name, ino: $0.ino, isDirectory: false) }
    }
}

/// A generated file of `/views`: its content is made for each open (and stat), for the caller.
protocol ViewFile: NodeOpener {
    var name: String { get }
    /// `opening`: for an open (the one audited read of the view), not a stat.
    func content(in fs: KeychainFileSystem, caller: Caller, opening: Bool) -> [UInt8]
}

extension ViewFile {
    var isDirectory: Bool { false }

    func stat(in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        NodeStat(
            ino: ino, isDirectory: false, size: content(in: fs, caller: caller, opening: false).count, modified: Date(),
            created: fs.mountTime)
    }

    /// Read-only (EPERM for writing); what the handle reads is fixed at open.
    func open(flags: Int32, in fs: KeychainFileSystem, caller: Caller) throws -> OpenFile {
        try Self.refuseWriting(flags)
        let bytes = content(in: fs, caller: caller, opening: true)
        return OpenFile(ino: ino, target: .generated(bytes), caller: caller, append: false)
    }
}

extension ViewFile {
    /// Every file of /views is read-only: an open for writing or truncating is EPERM.
    static func refuseWriting(_ flags: Int32) throws {
        let access = flags & O_ACCMODE
        if access == O_WRONLY || access == O_RDWR || flags & O_TRUNC != 0 { throw Errno.notPermitted }
    }
}

/// The view files by inode (`Inode.viewFile(n)`, n their place here).
enum ViewFiles {
    static let all: [any ViewFile] = [NetrcFile(), ChangesFile()]

    static func file(_ ino: UInt64) -> (any ViewFile)? { all.first { $0.ino == ino } }
}

/// `/views/netrc`: a `machine … login … password …` entry for each internet password that opts
/// in (its kind, kSecAttrDescription, is `netrc`: `add-internet-password -D netrc`) and that the
/// caller may see, oldest first. Items that need user presence are left out (a netrc read never
/// prompts); so is everything while the keychain is locked, with a line in the daemon log.
struct NetrcFile: ViewFile {
    var name: String { "netrc" }
    var ino: UInt64 { Inode.viewFile(0) }
    static let optIn = "netrc"

    func content(in fs: KeychainFileSystem, caller: Caller, opening: Bool) -> [UInt8] {
        let query = Query(
            .internetPassword, [Schema.named("description"): .string(Self.optIn)], matchLimit: .all,
            returnData: true, authenticationUI: .skip)
        do {
            return try fs.session(caller).view(opening ? .openRead : nil, query, Self.entries)
        } catch let e as KeychainError {
            Log.warning("views/netrc is empty: \(e.message) (\(e.status.name))")
        } catch {
            Log.warning("views/netrc is empty: \(error)")
        }
        return []
    }

    /// The entries of `items`, oldest first. The data is the password alone, as through every
    /// face (git's extras are their own field, never part of it).
    static func entries(_ items: [KeychainItem]) -> [UInt8] {
        var out: [UInt8] = []
        for item in items.sorted(by: { $0.id < $1.id }) {
            let server = item.string(Schema.server) ?? ""
            let account = item.string(Schema.account) ?? ""
            guard let entry = Self.entry(machine: server, login: account, password: item.data ?? []) else {
                Log.warning("views/netrc leaves out \(item.summary): a value holds a line break or NUL or is not UTF-8")
                continue
            }
            out += entry
        }
        return out
    }

    /// One entry; nil when a value cannot be written in netrc (a line break, a NUL, not UTF-8).
    static func entry(machine: String, login: String, password: [UInt8]) -> [UInt8]? {
        guard let password = String(validating: password, as: UTF8.self),
            let machineToken = quoted(machine), let loginToken = quoted(login), let secret = quoted(password)
        else { return nil }
        var text = "machine \(machineToken)\n"
        if !login.isEmpty { text += "\tlogin \(loginToken)\n" }
        text += "\tpassword \(secret)\n"
        return Array(text.utf8)
    }

    /// A netrc token: as is when plain, else in double quotes with `"` and `\` escaped (curl
    /// ≥ 7.84 and Python's netrc read both).
    static func quoted(_ value: String) -> String? {
        // curl and Python read a token up to a NUL: "github.com\0.x" would be read as the machine
        // github.com. Such an entry is left out, like one holding a line break.
        if value.contains(where: { $0.isNewline || $0 == "\u{0}" }) { return nil }
        let plain = !value.isEmpty && !value.contains { $0.isWhitespace || $0 == "\"" || $0 == "\\" || $0 == "#" }
        if plain { return value }
        return "\"" + value.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"")
            + "\""
    }
}
