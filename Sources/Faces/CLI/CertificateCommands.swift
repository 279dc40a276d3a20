import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import SystemPackage

/// Reads a file given on the command line (certificates, keys: not secrets on argv).
func readInputFile(_ path: String) throws -> [UInt8] {
    if path == "-" { return try SecretInput.readAll(fd: 0, limit: Keychain.maxDataSize, what: "standard input") }
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { throw CLIError.system("cannot open \(path)", Errno(rawValue: errno)) }
    defer { close(fd) }
    return try SecretInput.readAll(fd: fd, limit: Keychain.maxDataSize, what: path)
}

func certificates(_ door: any KeychainDoor) throws -> [KeychainItem] {
    do {
        return try door.copyMatching(Query(.certificate, matchLimit: .all, returnData: true))
    } catch KeychainStatus.itemNotFound { return [] }
}

struct AddCertificates: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add-certificates",
        abstract: "Add certificates from PEM or DER files (every CERTIFICATE block of a PEM bundle).")
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .customShort("l"),
        help: ArgumentHelp("Label (default: the subject's common name). Only with one certificate.", valueName: "label")
    )
    var label: String?
    @Argument(help: ArgumentHelp("Certificate files (PEM or DER); - for standard input.", valueName: "file")) var files:
        [String]

    func validate() throws { if files.isEmpty { throw ValidationError("give at least one certificate file") } }

    func run() throws {
        var ders: [(String, [UInt8])] = []
        for file in files {
            let bytes = try readInputFile(file)
            let blocks =
                String(validating: bytes, as: UTF8.self).map(PEMBlocks.parse)?.filter { $0.label == "CERTIFICATE" }
                ?? []
            if blocks.isEmpty {
                ders.append((file, try CertificateData.der(from: bytes)))
            } else {
                ders += blocks.map { (file, $0.der) }
            }
        }
        if label != nil && ders.count != 1 {
            throw CLIError.usage("-l names one certificate, but \(ders.count) were given")
        }
        let door = try vault.openDoor()
        for (file, der) in ders {
            var attributes = Attributes()
            if let label { attributes[Schema.label] = .string(label) }
            do {
                let item = try door.add(.certificate, attributes, data: der)
                Output.line("added \(item.string(Schema.label).map { "\"\($0)\"" } ?? "certificate") from \(file)")
            }
        }
    }
}

struct FindCertificate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-certificate",
        abstract: "Find certificates (by label / common name substring) and print them.")
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .customShort("c"),
        help: ArgumentHelp("Match certificates whose label contains this string.", valueName: "name")) var name: String?
    @Flag(name: .customShort("a"), help: "All matches, not only the first.") var all = false
    @Flag(name: .customShort("p"), help: "Print as PEM.") var pem = false
    @Flag(name: .customShort("Z"), help: "Print the SHA-1 hash before each certificate.") var sha1 = false
    @Flag(name: .long, help: "Write the certificate's DER (Apple's stored value) to stdout; with one match only.")
    var der = false

    func run() throws {
        let door = try vault.openDoor()
        var found = try certificates(door).filter { item in
            guard let name else { return true }
            return (item.string(Schema.label) ?? "").containsIgnoringCase(name)
        }
        guard !found.isEmpty else {
            throw KeychainError(.itemNotFound, "certificate \(name.map { "matching \"\($0)\"" } ?? "") not found")
        }
        if !all { found = [found[0]] }
        if der {
            guard found.count == 1 else { throw CLIError.usage("--der writes one certificate; drop -a") }
            Output.write(found[0].data ?? [])
            return
        }
        for item in found {
            let der = item.data ?? []
            // As `security`: the hash line first, then the certificate's attributes (its label
            // among them), or with -p its PEM instead of the attributes.
            if sha1 { Output.line("SHA-1 hash: \(AttributeText.hex(CertificateData.fingerprint(der)).uppercased())") }
            if pem {
                Output.write(CertificateData.pem(der))
            } else {
                Output.write(Array(ItemPrinter.text(item, vault: door.vaultPath).utf8))
            }
        }
    }
}

struct FindIdentity: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "find-identity",
        abstract: "List identities: certificates that have their private key in the vault.")
    @OptionGroup var vault: VaultOptions
    @Option(
        name: .customShort("s"),
        help: ArgumentHelp("Match identities whose label contains this string.", valueName: "name")) var name: String?

    func run() throws {
        let door = try vault.openDoor()
        let found = try door.identities().filter { id in
            name.map { id.label.containsIgnoringCase($0) } ?? true
        }
        for (i, identity) in found.enumerated() {
            let cert = try door.item(id: identity.certificate.id, itemClass: .certificate, withData: true)
            let hash = AttributeText.hex(CertificateData.fingerprint(cert.data ?? [])).uppercased()
            Output.line("  \(i + 1)) \(hash) \"\(identity.label)\"")
        }
        Output.line("     \(found.count) identities found")
        if found.isEmpty, name != nil { throw KeychainError(.itemNotFound, "no identity matching \"\(name!)\"") }
    }
}

struct Import: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Import certificates and private keys from a PEM bundle (or one DER certificate).",
        discussion:
            "Each CERTIFICATE block becomes a certificate item; each private key block (PRIVATE KEY, RSA/EC PRIVATE KEY, OPENSSH PRIVATE KEY) a key item labelled after the file (and its index when there are several). .p12/.pfx files are read through the system's openssl."
    )
    @OptionGroup var vault: VaultOptions
    @Argument(help: ArgumentHelp("The file to import; - for standard input.", valueName: "inputfile")) var file: String
    @Option(
        name: .customShort("l"),
        help: ArgumentHelp("Label for the imported key(s) (default: the file name).", valueName: "label")) var label:
        String?
    @Option(
        name: .long,
        help: ArgumentHelp(
            "PKCS#12 (.p12/.pfx): read its password from this file (else a prompt; empty for none).", valueName: "path")
    )
    var p12PassphraseFile: String?

    func run() throws {
        var bytes = try readInputFile(file)
        let lower = file.lowercased()
        if lower.hasSuffix(".p12") || lower.hasSuffix(".pfx") {
            bytes = try pkcs12ToPEM(file)
        }
        guard let text = String(validating: bytes, as: UTF8.self), text.contains("-----BEGIN") else {
            let der = try CertificateData.der(from: bytes)
            let item = try vault.openDoor().add(.certificate, [:], data: der)
            Output.line("1 certificate imported (\(item.string(Schema.label) ?? "unnamed"))")
            return
        }
        let blocks = PEMBlocks.parse(text)
        let certs = blocks.filter { $0.label == "CERTIFICATE" }
        let keys = blocks.filter { $0.label.hasSuffix("PRIVATE KEY") }
        if certs.isEmpty && keys.isEmpty { throw CLIError.failure("\(file) holds no certificate or private key") }
        // An encrypted key would be stored as bytes nothing here can use: refused before
        // anything of the file is added.
        // (A legacy encrypted PEM says so in a header line that the parsed block no longer has.)
        if text.contains("Proc-Type: 4,ENCRYPTED"), let why = encryptedPrivateKeyRefusal(bytes) {
            throw CLIError.failure("\(file == "-" ? "standard input" : file): a private key \(why); nothing imported")
        }
        for (i, key) in keys.enumerated() {
            if let why = encryptedPrivateKeyRefusal(PEMBlocks.encode(label: key.label, der: key.der)) {
                let which = keys.count == 1 ? "its private key" : "private key \(i + 1)"
                throw CLIError.failure("\(file == "-" ? "standard input" : file): \(which) \(why); nothing imported")
            }
        }
        let door = try vault.openDoor()
        let base = label ?? (file == "-" ? "imported" : KeychainPaths.lastComponent(of: file))
        for cert in certs { try door.add(.certificate, [:], data: cert.der) }
        for (i, key) in keys.enumerated() {
            let name = keys.count == 1 ? base : "\(base)-\(i + 1)"
            // The core tags a key with its label, so keys imported under different names stay apart.
            try door.add(.key, [Schema.label: .string(name)], data: PEMBlocks.encode(label: key.label, der: key.der))
        }
        Output.line("\(certs.count) certificate(s) and \(keys.count) key(s) imported")
    }
}

extension Import {
    /// PKCS#12 through the system's openssl (`openssl pkcs12 -nodes`), the password on its
    /// stdin (never argv); the PEM it prints is then imported like any bundle.
    func pkcs12ToPEM(_ path: String) throws -> [UInt8] {
        var password: [UInt8]
        if let p12PassphraseFile {
            password = try readInputFile(p12PassphraseFile)
            SecretInput.chomp(&password)
        } else {
            password = try SecretInput.prompt("password for \(path): ") ?? []
        }
        defer { Sodium.wipe(&password) }
        // openssl's errors are dropped: the message below says what went wrong.
        let pid: pid_t
        var pipes: [(read: Int32, write: Int32)] = []
        do {
            for _ in 0..<2 { pipes.append(try ChildProcess.pipe()) }
            pid = try ChildProcess.spawn(
                "/usr/bin/openssl", arguments: ["openssl", "pkcs12", "-in", path, "-nodes", "-passin", "stdin"],
                descriptors: [
                    (0, .duplicate(pipes[0].read)), (1, .duplicate(pipes[1].write)), (2, .appending("/dev/null")),
                ])
        } catch {
            for p in pipes { (close(p.read), close(p.write)) }
            throw CLIError.failure("cannot run openssl to read \(path): \(error)")
        }
        let (input, output) = (pipes[0], pipes[1])
        close(input.read)
        close(output.write)
        // The password and a newline (a few bytes: they fit the pipe), then its output to the end.
        var line = password + [10]
        defer { Sodium.wipe(&line) }
        // An openssl that exits early must make the write fail (EPIPE), not kill us.
        let previous = signal(SIGPIPE, SIG_IGN)
        var offset = 0
        while offset < line.count {
            let n = line.withUnsafeBytes { write(input.write, $0.baseAddress! + offset, $0.count - offset) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            offset += n
        }
        signal(SIGPIPE, previous)
        close(input.write)
        var pem: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(output.read, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            pem += chunk[0..<n]
        }
        Sodium.wipe(&chunk)
        close(output.read)
        guard ChildProcess.wait(pid) == .exited(0) else {
            Sodium.wipe(&pem)
            throw CLIError.failure("cannot read PKCS#12 file \(path): wrong password or not a PKCS#12 file")
        }
        return pem
    }
}

struct Export: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Export certificates, keys or identities as PEM, or an identity as PKCS#12, on stdout or to a file (0600).")
    enum ItemType: String, ExpressibleByArgument, CaseIterable { case certs, privKeys, identities, all }
    enum Format: String, ExpressibleByArgument, CaseIterable { case pemseq, pkcs12 }
    @OptionGroup var vault: VaultOptions
    @Option(name: .customShort("t"), help: ArgumentHelp("What to export.", valueName: "type")) var type: ItemType = .all
    @Option(
        name: .customShort("f"),
        help: ArgumentHelp("Format: pemseq (PEM bundle, the default) or pkcs12 (one identity).", valueName: "format"))
    var format: Format = .pemseq
    @Option(
        name: .long,
        help: ArgumentHelp("-f pkcs12: read the file's passphrase from this file (else a prompt).", valueName: "path"))
    var p12PassphraseFile: String?
    @Option(
        name: .customShort("o"),
        help: ArgumentHelp("Output file, created 0600 (default: stdout).", valueName: "outfile")) var output: String?
    @Option(
        name: .customShort("l"), help: ArgumentHelp("Only items whose label contains this string.", valueName: "name"))
    var name: String?

    func validate() throws {
        if format == .pkcs12 && (type == .certs || type == .privKeys) {
            throw ValidationError("-f pkcs12 exports an identity: use -t identities")
        }
        if format == .pemseq && p12PassphraseFile != nil {
            throw ValidationError("--p12-passphrase-file is for -f pkcs12")
        }
        if format == .pkcs12 && output == nil && isatty(1) == 1 {
            throw ValidationError("-f pkcs12 writes binary data: give -o FILE or redirect stdout")
        }
    }

    func run() throws {
        if format == .pkcs12 { return try exportPKCS12() }
        let door = try vault.openDoor()
        func matches(_ item: KeychainItem) -> Bool {
            name.map { (item.string(Schema.label) ?? "").contains($0) } ?? true
        }
        var out = [UInt8]()
        if type == .certs || type == .all {
            for cert in try certificates(door) where matches(cert) { out += CertificateData.pem(cert.data ?? []) }
        }
        if type == .privKeys || type == .all {
            let keys = (try? door.copyMatching(Query(.key, matchLimit: .all, returnData: true))) ?? []
            for key in keys where matches(key) {
                guard case .number(1)? = key[Schema.named("keyClass")] else { continue }
                // Nothing is written when a matching key may not leave: a partial bundle
                // would look like a complete one.
                guard key.isExtractable else {
                    throw KeychainError(
                        .dataNotAvailable,
                        "key \"\(key.string(Schema.label) ?? "")\" is not extractable: its private key never leaves the vault (use the ssh agent, or -l to export other keys)"
                    )
                }
                out += key.data ?? []
            }
        }
        if type == .identities {
            for identity in try door.identities() where matches(identity.certificate) {
                out += try door.identityBundle(identity)
            }
        }
        guard !out.isEmpty else { throw KeychainError(.itemNotFound, "nothing to export") }
        if let output {
            try writePrivateFile(output, out)
        } else {
            Output.write(out)
        }
    }
}

extension Export {
    /// The one identity `-l` names (or the only one) as PKCS#12, protected by a passphrase from
    /// --p12-passphrase-file or typed twice; several matching identities export nothing.
    func exportPKCS12() throws {
        let door = try vault.openDoor()
        let found = try door.identities().filter { id in name.map { id.label.contains($0) } ?? true }
        guard !found.isEmpty else {
            throw KeychainError(.itemNotFound, "no identity \(name.map { "matching \"\($0)\" " } ?? "")to export")
        }
        guard found.count == 1 else {
            throw CLIError.failure(
                "\(found.count) identities match; a PKCS#12 file holds one: name it with -l (find-identity lists them)")
        }
        var passphrase = try PKCS12Export.passphrase(file: p12PassphraseFile)
        defer { Sodium.wipe(&passphrase) }
        let certificate = try door.item(id: found[0].certificate.id, itemClass: .certificate, withData: true)
        var key = try door.item(id: found[0].key.id, itemClass: .key, withData: true).data ?? []
        defer { Sodium.wipe(&key) }
        let p12 = try PKCS12Export.make(
            certificate: CertificateData.pem(certificate.data ?? []), key: key, label: found[0].label,
            passphrase: passphrase)
        if let output { try writePrivateFile(output, p12) } else { Output.write(p12) }
    }
}

/// Writes private material to a new file that is 0600 from its first byte: a temp file made
/// with O_EXCL|O_NOFOLLOW beside the target, then renamed over it. Opening the target itself
/// would keep the mode of a file that already exists (0644) and follow a planted symlink.
func writePrivateFile(_ path: String, _ bytes: [UInt8]) throws {
    let temp = KeychainPaths.parent(of: path) + "/.keychainfs-export-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    let fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
    guard fd >= 0 else { throw CLIError.system("cannot create \(path)", Errno(rawValue: errno)) }
    // Each step's errno is taken at once: a later call may overwrite it.
    var failure: Errno?
    let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    if written < 0 { failure = Errno(rawValue: errno) } else if written != bytes.count { failure = .noSpace }
    if failure == nil, fsync(fd) != 0 || fchmod(fd, 0o600) != 0 { failure = Errno(rawValue: errno) }
    close(fd)
    if failure == nil, rename(temp, path) != 0 { failure = Errno(rawValue: errno) }
    if let failure {
        unlink(temp)
        throw CLIError.system("cannot write \(path)", failure)
    }
}
