#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import Keychain
import Testing

// The one conversion of keychain statuses to what the faces report (Sources/Keychain/
// StatusMapping.swift), checked against the table in docs/errors.md: every status the core
// throws gives the documented errno to the filesystem and exit code to the CLI.

@Suite("errno and exit codes of every status (docs/errors.md)")
struct ErrnoTests {
    /// docs/errors.md, first table: status name, OSStatus, errno, CLI exit code.
    static let table:
        [(name: String, status: KeychainStatus, value: Int32, errno: Int32, errnoName: String, exit: Int32)] = [
            ("errSecSuccess", .success, 0, 0, "0", 0),
            ("errSecItemNotFound", .itemNotFound, -25300, ENOENT, "ENOENT", 44),
            ("errSecDuplicateItem", .duplicateItem, -25299, EEXIST, "EEXIST", 45),
            ("errSecParam", .param, -50, EINVAL, "EINVAL", 1),
            ("errSecNoSuchAttr", .noSuchAttr, -25303, ENODATA, "ENODATA", 1),
            ("errSecReadOnlyAttr", .readOnlyAttr, -25309, EPERM, "EPERM", 1),
            ("errSecInteractionNotAllowed", .interactionNotAllowed, -25308, EACCES, "EACCES", 1),
            ("errSecAuthFailed", .authFailed, -25293, EACCES, "EACCES", 1),
            ("errSecMissingEntitlement", .missingEntitlement, -34018, EACCES, "EACCES", 1),
            ("errSecWrPerm", .writePermission, -61, EACCES, "EACCES", 1),
            ("errSecReadOnly", .readOnly, -25292, EPERM, "EPERM", 1),
            ("errSecDataNotAvailable", .dataNotAvailable, -25316, EPERM, "EPERM", 1),
            ("errSecNoSuchClass", .noSuchClass, -25306, EINVAL, "EINVAL", 1),
            ("errSecInteractionRequired", .interactionRequired, -25315, EAGAIN, "EAGAIN", 1),
            ("errSecUserCanceled", .userCanceled, -128, ECANCELED, "ECANCELED", 1),
            ("errSecDataTooLarge", .dataTooLarge, -25302, EFBIG, "EFBIG", 1),
            ("errSecDecode", .decode, -26275, EIO, "EIO", 1),
            ("errSecNoSuchKeychain", .noSuchKeychain, -25294, ENOENT, "ENOENT", 1),
            ("errSecDuplicateKeychain", .duplicateKeychain, -25296, EEXIST, "EEXIST", 1),
            ("errSecUnimplemented", .unimplemented, -4, EOPNOTSUPP, "EOPNOTSUPP", 1),
            ("errSecNotAvailable", .notAvailable, -25291, EAGAIN, "EAGAIN", 1),
            ("errSecAllocate", .allocate, -108, ENOMEM, "ENOMEM", 1),
            ("errSecIO", .io, -36, EIO, "EIO", 1),
        ]

    static var docsPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("docs/errors.md").path
    }

    @Test("every documented status: its OSStatus value, errno and exit code")
    func documentedStatuses() {
        for row in Self.table {
            #expect(row.status.rawValue == row.value && row.status.name == row.name, "\(row.name)")
            #expect(
                row.status.errno == row.errno, "\(row.name).errno is \(row.status.errno), docs say \(row.errnoName)")
            #expect(
                row.status.exitCode == row.exit, "\(row.name).exitCode is \(row.status.exitCode), docs say \(row.exit)")
            #expect(KeychainError(row.status, "x").status.errno == row.errno)
        }
    }

    @Test("the table above is the one in docs/errors.md, row for row")
    func tableMatchesDocs() throws {
        let text = try String(contentsOfFile: Self.docsPath, encoding: .utf8)
        // The status table: rows whose first cell is an errSec name.
        var documented: [(String, Int32, String, Int32)] = []
        for line in text.split(separator: "\n") where line.hasPrefix("| errSec") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            guard cells.count >= 5, let value = Int32(cells[2]), let exit = Int32(cells[4]) else {
                Issue.record("unreadable row: \(line)")
                continue
            }
            documented.append((cells[1], value, cells[3], exit))
        }
        #expect(
            documented.count == Self.table.count,
            "docs/errors.md lists \(documented.count) statuses, the test \(Self.table.count)")
        for (name, value, errnoName, exit) in documented {
            guard let row = Self.table.first(where: { $0.name == name }) else {
                Issue.record("\(name) is documented but not tested")
                continue
            }
            #expect(
                row.value == value && row.errnoName == errnoName && row.exit == exit,
                "docs: \(name) \(value) \(errnoName) \(exit); test: \(row.value) \(row.errnoName) \(row.exit)")
        }
    }

    @Test("statuses docs/errors.md does not list (unknown OSStatus values) → EIO, exit 1")
    func undocumentedStatuses() {
        for raw: Int32 in [-1, -99999, 12345, Int32.min] {
            let status = KeychainStatus(rawValue: raw)
            #expect(status.errno == EIO && status.exitCode == 1, "\(status)")
        }
    }

    @Test("errnos are positive and distinct from success; exit codes never collide with usage errors (2)")
    func shapes() {
        for row in Self.table where row.status != .success {
            #expect(row.status.errno > 0, "\(row.name)")
            #expect(row.status.exitCode != 0 && row.status.exitCode != 2, "\(row.name)")
        }
    }
}
