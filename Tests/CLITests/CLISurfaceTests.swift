import Foundation
import Testing
@testable import keychainfs

/// The CLI's declared surface: the version, value names in help, the `-o` table and its
/// documentation, and usage errors for unknown commands and mount options.
@Suite("CLI surface")
struct CLISurfaceTests {
    static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The rows of the option table in docs/cli.md's `## mount` section: (`cache=SECONDS`, meaning).
    static func documentedMountOptions() throws -> [(syntax: String, help: String)] {
        let text = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        let section = try #require(text.range(of: "\n## mount\n"), "docs/cli.md has no '## mount' section")
        let body = text[section.upperBound...]
        let end = body.range(of: "\n## ")?.lowerBound ?? body.endIndex
        return body[..<end].split(separator: "\n").compactMap { line -> (String, String)? in
            guard line.hasPrefix("| `") else { return nil }
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 2 else { return nil }
            return (cells[0].replacingOccurrences(of: "`", with: ""), cells[1].replacingOccurrences(of: "`", with: ""))
        }
    }

    @Test("docs/cli.md lists exactly the options of MountOption.table, with their help")
    func mountOptionsDocumented() throws {
        let documented = try Self.documentedMountOptions()
        #expect(documented.map(\.syntax) == MountOption.table.map(\.syntax))
        for option in MountOption.table {
            let row = documented.first { $0.syntax == option.syntax }
            #expect(row?.help == option.help, "docs/cli.md describes \(option.syntax) differently from the table")
        }
        let text = try String(contentsOf: Self.repositoryRoot.appendingPathComponent("docs/cli.md"), encoding: .utf8)
        for name in MountOption.ignored {
            #expect(text.contains("`\(name)`"), "docs/cli.md does not list the ignored option \(name)")
        }
    }

    @Test("-o takes a comma inside a value written \\, (a D-Bus address), as libfuse's option parser does")
    func escapedCommaInMountOption() throws {
        let parsed = try ParsedMountOptions(["secret_service_address=unix:path=/tmp/b\\,guid=12ab,cache=2", "locked"])
        #expect(parsed.secretService)
        #expect(parsed.secretServiceAddress == "unix:path=/tmp/b,guid=12ab")
        #expect(parsed.fuse.cacheSeconds == 2)
        #expect(parsed.fuse.startLocked)
        #expect(ParsedMountOptions.split("a,,b\\,c,").map(String.init) == ["a", "b,c"])
        #expect(try ParsedMountOptions(["secret_service"]).secretServiceAddress == nil)
    }

    @Test("an unknown -o option exits 2, names it, lists the valid ones and never echoes a value")
    func unknownMountOption() throws {
        let box = try Sandbox()
        let mnt = box.root + "/mnt"
        let r = try box.run([
            "mount", box.vault, mnt, "--passphrase-file", box.passphraseFile, "-o", "cache=1,bogus_opt",
        ])
        expectError(r, 2, mentions: ["unknown mount option 'bogus_opt'"])
        for option in MountOption.table { #expect(r.stderr.contains(option.syntax), "\(r.stderr)") }
        let valued = try box.run(["mount", box.vault, mnt, "-o", "bogus_opt=value-not-to-echo"])
        expectError(valued, 2, mentions: ["bogus_opt"])
        #expect(!valued.stderr.contains("value-not-to-echo"), "\(valued.stderr)")
    }

    @Test("a malformed -o option (value on a flag, none on a valued option, out of range) exits 2")
    func malformedMountOption() throws {
        let box = try Sandbox()
        let mnt = box.root + "/mnt"
        for (option, mention) in [
            ("debug=1", "malformed mount option 'debug=…'"), ("log", "log=PATH"),
            ("log=", "log=PATH"), ("cache=99", "-o cache=SECONDS takes"),
            ("presence_timeout=2.5", "presence_timeout=SECONDS"), ("ro", "-o ro is not supported"),
        ] {
            let r = try box.run(["mount", box.vault, mnt, "-o", option])
            expectError(r, 2, mentions: [mention])
        }
    }

    @Test("--version prints 'keychainfs <version>' and exits 0")
    func version() throws {
        let box = try Sandbox()
        let r = try box.run(["--version"])
        #expect(r.status == 0)
        #expect(r.stdoutString == "keychainfs \(keychainfsVersion)\n", "\(r.stdoutString)")
    }

    @Test("help shows value names the way macOS security does")
    func valueNames() throws {
        let box = try Sandbox()
        let generic = try box.run(["add-generic-password", "--help"])
        #expect(generic.status == 0)
        for name in [
            "-a <account>", "-s <service>", "-l <label>", "-j <comment>", "-c <creator>", "-C <type>",
            "-w <password>", "--vault <vault>",
        ] {
            #expect(generic.stdoutString.contains(name), "add-generic-password --help lacks \(name)")
        }
        let internet = try box.run(["add-internet-password", "--help"])
        for name in ["-s <server>", "-r <protocol>", "-P <port>", "-p <path>"] {
            #expect(internet.stdoutString.contains(name), "add-internet-password --help lacks \(name)")
        }
        let mount = try box.run(["mount", "--help"])
        #expect(mount.status == 0)
        for option in MountOption.table {
            #expect(mount.stdoutString.contains(option.syntax), "mount --help lacks \(option.syntax)")
        }
        // Issue 28, point 6: readable at 80 columns, no row broken back to the margin.
        let narrow = try box.run(["mount", "--help"], env: ["COLUMNS": "80"])
        let lines = narrow.stdoutString.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.allSatisfy { $0.count <= 80 }, "\(lines.filter { $0.count > 80 })")
        let table = lines.drop { !$0.hasPrefix("Mount options") }.dropFirst().prefix { !$0.isEmpty }
        #expect(table.count >= MountOption.table.count)
        #expect(
            table.allSatisfy { $0.hasPrefix("  ") },
            "a row wrapped to the margin: \(table.filter { !$0.hasPrefix("  ") })")
    }

    @Test("an unknown command is a usage error, with --help too")
    func unknownCommand() throws {
        let box = try Sandbox()
        for args in [
            ["nosuchcommand"], ["nosuchcommand", "--help"], ["nosuchcommand", "-h"], ["--help", "nosuchcommand"],
            ["help", "nosuchcommand"], ["access-group", "nosuch", "--help"],
        ] {
            let r = try box.run(args)
            #expect(r.status == 2, "\(args): \(r.status) \(r.stderr)")
        }
        #expect(try box.run(["access-group", "list", "--help"]).status == 0)
        #expect(try box.run(["help", "mount"]).status == 0)
    }

    @Test("a failed open reports the errno's description, exit 1")
    func errnoMessage() throws {
        let box = try Sandbox()
        let r = try box.run(["import", box.root + "/no-such-file.pem"] + box.unlock)
        expectError(r, 1, mentions: ["cannot open \(box.root)/no-such-file.pem: No such file or directory"])
    }
}
