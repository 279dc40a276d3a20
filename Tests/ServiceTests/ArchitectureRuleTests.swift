import Foundation
import Testing

/// docs/architecture.md's rules that the compiler does not check by itself: no source file over
/// 400 lines, and a `Caller` made only by the door's owner (issue 26: faces keep their protocol
/// and their error table, and only narrow the caller they are given).
@Suite("architecture rules")
struct ArchitectureRuleTests {
    static let repository: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().path
    }()
    static let sources = repository + "/Sources"

    static func swiftFiles(under root: String = sources) -> [(path: String, text: String)] {
        let walker = FileManager.default.enumerator(atPath: root)
        var out: [(String, String)] = []
        while let relative = walker?.nextObject() as? String {
            guard relative.hasSuffix(".swift"),
                let text = try? String(contentsOfFile: root + "/" + relative, encoding: .utf8)
            else { continue }
            out.append((relative, text))
        }
        return out
    }

    @Test("no source or test file is over 400 lines")
    func fileLength() {
        let files = Self.swiftFiles() + Self.swiftFiles(under: Self.repository + "/Tests")
        #expect(files.count > 200, "found \(files.count) files under \(Self.repository)")
        let long = files.filter { $0.text.split(separator: "\n", omittingEmptySubsequences: false).count > 401 }
        #expect(long.isEmpty, "over 400 lines: \(long.map(\.path))")
    }

    @Test("only the core and KeychainAccess use the Caller's SPI; no face or service file makes a Caller")
    func callerIsMadeByTheDoorsOwner() {
        for (path, text) in Self.swiftFiles() {
            let owner = path.hasPrefix("Keychain/") || path.hasPrefix("KeychainAccess/")
            #expect(owner || !text.contains("@_spi(CallerRule)"), "\(path) imports the Caller's SPI")
            #expect(
                owner || text.range(of: #"\bCaller\("#, options: .regularExpression) == nil, "\(path) makes a Caller")
        }
    }

    /// The faces a service hosts reach the keychain through a `KeychainSession` only (issue 26,
    /// point 1: "the only way a face reaches `Keychain`"): none holds a `Keychain`, calls one,
    /// or makes a session itself (the access layer hands each request its door).
    @Test("the mount, the ssh agent and the Secret Service hold no Keychain and make no session")
    func hostedFacesGoThroughTheDoor() {
        let faces = ["Faces/FUSE/", "Faces/SSHAgent/", "Faces/SecretService/"]
        let files = Self.swiftFiles().filter { file in faces.contains { file.path.hasPrefix($0) } }
        #expect(files.count > 40, "found \(files.count) face files")
        for (path, text) in files {
            let code = text.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("//") }
                .joined(separator: "\n")
            #expect(
                code.range(of: #":\s*Keychain\b(?![A-Za-z.])"#, options: .regularExpression) == nil,
                "\(path) holds a Keychain")
            #expect(
                code.range(of: #"\bkeychain\.[a-z]"#, options: .regularExpression) == nil, "\(path) calls the Keychain")
            #expect(!code.contains("KeychainSession("), "\(path) makes a KeychainSession")
        }
    }

    /// Each face keeps its own error table (issue 26, point 1): the core and the door name no
    /// D-Bus error, and the errno table is the FUSE face's.
    @Test("the D-Bus error names and the errno table are the faces' own, not the core's")
    func errorTablesAreTheFaces() {
        for (path, text) in Self.swiftFiles() where path.hasPrefix("Keychain/") || path.hasPrefix("KeychainAccess/") {
            #expect(!text.contains(".Error."), "\(path) names a D-Bus error")
            #expect(!text.contains("var errno: Int32"), "\(path) maps statuses to errno")
        }
        let faces = Self.swiftFiles().filter { $0.path.hasPrefix("Faces/") }
        #expect(
            faces.contains { $0.path.hasSuffix("SecretService/ErrorTable.swift") && $0.text.contains("Error.IsLocked") }
        )
        #expect(
            faces.contains {
                $0.path.hasSuffix("FUSE/Session/ErrnoConversion.swift") && $0.text.contains("var errno: Int32")
            })
    }

    /// Issue 28: Foundation's ICU data is most of a static keychainfs, and what the product needs
    /// is in FoundationEssentials. A file of a product module (every target under Sources but
    /// the benchmarks) that imports Foundation, or FoundationInternationalization, links ICU back
    /// in; the test targets may import Foundation.
    @Test("product modules import FoundationEssentials, never Foundation")
    func productModulesImportFoundationEssentialsOnly() {
        let files = Self.swiftFiles().filter { !$0.path.hasPrefix("keychainfs-bench/") }
        #expect(files.count > 200, "found \(files.count) product files")
        let pattern =
            #"(?m)^\s*(@\w+(\([^)]*\))?\s+)*((public|package|internal|fileprivate|private)\s+)?import\s+((struct|class|enum|protocol|typealias|func|var|let)\s+)?(Foundation|FoundationInternationalization|FoundationNetworking|FoundationXML|_FoundationICU)\s*($|\.|//)"#
        for (path, text) in files {
            #expect(text.range(of: pattern, options: .regularExpression) == nil, "\(path) imports Foundation")
        }
    }
}
