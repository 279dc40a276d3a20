import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto

#if canImport(Glibc)
    import Glibc
#endif

/// A `pass` store (https://www.passwordstore.org): one gpg-encrypted file per entry,
/// `~/.password-store/<path>.gpg` (or under `$PASSWORD_STORE_DIR`). Entries are decrypted as
/// `pass show` does it, with `gpg --decrypt --batch` through the user's gpg-agent, which asks
/// for the key's passphrase (pinentry) if it must.
///
/// An entry's plaintext follows pass's convention: the first line is the password; the rest
/// are notes, where `login:`, `username:` or `user:` (the first such line) is the account and
/// `url:` the site, as browserpass and pass-import read them. Other lines are kept, in order,
/// as the notes; an `otpauth://` line (pass-otp) is a TOTP seed and is not imported.
public enum PassStore {
    /// `$PASSWORD_STORE_DIR`, else `~/.password-store`, as pass finds its store.
    public static func defaultDirectory(_ environment: [String: String] = ProcessInfo.processInfo.environment)
        -> String
    {
        if let dir = environment["PASSWORD_STORE_DIR"], !dir.isEmpty { return dir }
        return (environment["HOME"] ?? KeychainPaths.homeDirectory()) + "/.password-store"
    }

    /// The entries under `subfolder` of the store (all when nil; one entry when it names one),
    /// sorted, as pass names them: paths relative to the store without `.gpg`. Hidden files
    /// and directories (`.git`, `.gpg-id`, `.extensions`) are not entries.
    public static func entries(in store: String, under subfolder: String? = nil) throws(ImportError) -> [String] {
        var isDirectory = false
        guard FileManager.default.fileExists(atPath: store, isDirectory: &isDirectory), isDirectory else {
            throw ImportError(
                "no password store at \(store) (pass keeps it in $PASSWORD_STORE_DIR or ~/.password-store; give --store DIR)",
                exitCode: 1)
        }
        let prefix = subfolder.map { folder in folder.trimming { $0 == "/" } } ?? ""
        // Nothing outside the store is read: a symlink (or `..`) leading out of it is refused by
        // name, never followed to gpg.
        let storeRoot = resolved(store) ?? store
        func inside(_ path: String) -> Bool {
            guard let real = resolved(path) else { return false }
            return real == storeRoot || real.hasPrefix(storeRoot + "/")
        }
        if !prefix.isEmpty, FileManager.default.fileExists(atPath: store + "/" + prefix + ".gpg") {
            guard inside(store + "/" + prefix + ".gpg") else {
                throw ImportError("\(prefix) leads out of the password store \(store); not imported", exitCode: 1)
            }
            return [prefix]
        }
        let root = prefix.isEmpty ? store : store + "/" + prefix
        guard FileManager.default.fileExists(atPath: root, isDirectory: &isDirectory), isDirectory,
            inside(root)
        else {
            throw ImportError("\(prefix) is neither an entry nor a folder of the password store \(store)", exitCode: 1)
        }
        guard let files = files(under: root) else {
            throw ImportError("cannot list the password store \(root)", exitCode: 1)
        }
        var out: [String] = []
        var outside: [String] = []
        for relative in files where relative.hasSuffix(".gpg") {
            let name = String(relative.dropLast(4))
            let entry = prefix.isEmpty ? name : prefix + "/" + name
            guard inside(store + "/" + entry + ".gpg") else {
                outside.append(entry)
                continue
            }
            out.append(entry)
        }
        if !outside.isEmpty {
            throw ImportError(
                "\(outside.count) entr\(outside.count == 1 ? "y leads" : "ies lead") out of the password store \(store) through a symlink (\(outside.prefix(5).joined(separator: ", "))); nothing imported",
                exitCode: 1)
        }
        return out.sorted()
    }

    /// Every file (and symlink) under `root`, relative to it, in name order; hidden files and
    /// directories are left out and symlinks not followed. Nil when `root` cannot be listed.
    static func files(under root: String) -> [String]? {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: root) else { return nil }
        var out: [String] = []
        for name in names.sorted() where !name.hasPrefix(".") {
            var st = stat()
            guard lstat(root + "/" + name, &st) == 0 else { continue }
            if st.st_mode & S_IFMT == S_IFDIR {
                out += (files(under: root + "/" + name) ?? []).map { name + "/" + $0 }
            } else {
                out.append(name)
            }
        }
        return out
    }

    /// The path with every symlink resolved, or nil when it does not exist.
    static func resolved(_ path: String) -> String? {
        guard let real = realpath(path, nil) else { return nil }
        defer { free(real) }
        return String(cString: real)
    }

    /// Decrypts one entry with gpg and reads it as pass's convention says.
    public static func read(entry: String, in store: String, gpgOptions: [String] = []) throws(ImportError)
        -> ImportRecord
    {
        var plaintext = try decrypt(store + "/" + entry + ".gpg", entry: entry, options: gpgOptions)
        defer { Sodium.wipe(&plaintext) }
        return try record(entry: entry, plaintext: plaintext)
    }

    /// pass's convention applied to a decrypted entry.
    public static func record(entry: String, plaintext: [UInt8]) throws(ImportError) -> ImportRecord {
        let newline = UInt8(ascii: "\n")
        let firstEnd = plaintext.firstIndex(of: newline) ?? plaintext.endIndex
        var password = Array(plaintext[..<firstEnd])
        if password.last == UInt8(ascii: "\r") { password.removeLast() }
        var record = ImportRecord(origin: "pass entry \(entry)", title: entry, password: password)
        let rest = firstEnd < plaintext.endIndex ? Array(plaintext[(firstEnd + 1)...]) : []
        guard let text = String(validating: rest, as: UTF8.self) else {
            throw ImportError("pass entry \(entry): the lines after the first are not valid UTF-8")
        }
        var notes: [Substring] = []
        for var line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasSuffix("\r") { line = line.dropLast() }
            if line.lowercased().hasPrefix("otpauth://") {
                record.dropped.append("its otpauth:// line (a TOTP seed)")
                continue
            }
            if let colon = line.firstIndex(of: ":") {
                let key = line[..<colon].trimmingWhitespace().lowercased()
                let value = line[line.index(after: colon)...].trimmingWhitespace()
                if ["login", "username", "user"].contains(key) && record.account.isEmpty && !value.isEmpty {
                    record.account = value
                    continue
                }
                if key == "url" && record.url.isEmpty && !value.isEmpty {
                    record.url = value
                    continue
                }
            }
            notes.append(line)
        }
        while notes.last?.allSatisfy(\.isWhitespace) == true { notes.removeLast() }
        while notes.first?.allSatisfy(\.isWhitespace) == true { notes.removeFirst() }
        record.notes = notes.joined(separator: "\n")
        return record
    }

    /// The gpg pass itself would use: `gpg2` when on PATH, else `gpg`.
    static func gpgExecutable() -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for name in ["gpg2", "gpg"] {
            for directory in path.split(separator: ":") where access("\(directory)/\(name)", X_OK) == 0 {
                return "\(directory)/\(name)"
            }
        }
        return nil
    }

    /// `gpg --decrypt --batch --quiet FILE`, the plaintext read from a pipe (never a file), up
    /// to 1 MiB and a line. Its standard input is /dev/null; gpg-agent asks through pinentry.
    static func decrypt(_ file: String, entry: String, options: [String]) throws(ImportError) -> [UInt8] {
        guard let gpg = gpgExecutable() else {
            throw ImportError("gpg is not installed (pass entries are decrypted with gpg)", exitCode: 1)
        }
        var pipes: [(read: Int32, write: Int32)] = []
        let pid: pid_t
        do {
            for _ in 0..<2 { pipes.append(try ChildProcess.pipe()) }
            pid = try ChildProcess.spawn(
                gpg, arguments: [gpg] + options + ["--decrypt", "--batch", "--quiet", "--", file],
                descriptors: [(0, .null), (1, .duplicate(pipes[0].write)), (2, .duplicate(pipes[1].write))])
        } catch {
            for p in pipes { (close(p.read), close(p.write)) }
            throw ImportError("cannot start \(gpg): \(error)", exitCode: 1)
        }
        let (output, errors) = (pipes[0], pipes[1])
        close(output.write)
        close(errors.write)
        var plaintext = readAll(output.read, limit: (1 << 20) + 65536)
        let diagnostics = readAll(errors.read, limit: 65536)
        close(output.read)
        close(errors.read)
        let termination = ChildProcess.wait(pid)
        guard let bytes = plaintext, termination == .exited(0) else {
            if plaintext != nil { Sodium.wipe(&plaintext!) }
            // gpg's own last line ("gpg: decryption failed: No secret key") names the problem;
            // it never holds plaintext.
            let last =
                String(decoding: diagnostics ?? [], as: UTF8.self).split(separator: "\n").last.map { ": \($0)" } ?? ""
            let how =
                plaintext == nil
                ? "its plaintext is over 1 MiB"
                : termination == .signaled(termination.status)
                    ? "gpg was killed by signal \(termination.status)"
                    : "gpg exited with status \(termination.status)"
            throw ImportError("pass entry \(entry): cannot decrypt it (\(how))\(last)", exitCode: 1)
        }
        return bytes
    }

    /// All of `fd`, or nil past `limit` bytes (what was read is wiped).
    static func readAll(_ fd: Int32, limit: Int) -> [UInt8]? {
        var out = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 65536)
        defer { Sodium.wipe(&chunk) }
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return out }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit {
                Sodium.wipe(&out)
                // Drain, so gpg is not left blocked on a full pipe.
                while chunk.withUnsafeMutableBytes({ Glibc.read(fd, $0.baseAddress, $0.count) }) > 0 {}
                return nil
            }
        }
    }
}
