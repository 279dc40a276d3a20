#if canImport(Glibc)
    import Glibc
#endif
import Foundation
import Keychain
import KeychainFS
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
            ("errSecParam", .param, -50, EINVAL, "EINVAL", 206),
            ("errSecNoSuchAttr", .noSuchAttr, -25303, ENODATA, "ENODATA", 41),
            ("errSecReadOnlyAttr", .readOnlyAttr, -25309, EPERM, "EPERM", 35),
            ("errSecInteractionNotAllowed", .interactionNotAllowed, -25308, EACCES, "EACCES", 36),
            ("errSecAuthFailed", .authFailed, -25293, EACCES, "EACCES", 51),
            ("errSecMissingEntitlement", .missingEntitlement, -34018, EACCES, "EACCES", 30),
            ("errSecWrPerm", .writePermission, -61, EACCES, "EACCES", 195),
            ("errSecReadOnly", .readOnly, -25292, EPERM, "EPERM", 52),
            ("errSecDataNotAvailable", .dataNotAvailable, -25316, EPERM, "EPERM", 28),
            ("errSecNoSuchClass", .noSuchClass, -25306, EINVAL, "EINVAL", 38),
            ("errSecInteractionRequired", .interactionRequired, -25315, EAGAIN, "EAGAIN", 29),
            ("errSecUserCanceled", .userCanceled, -128, ECANCELED, "ECANCELED", 128),
            ("errSecDataTooLarge", .dataTooLarge, -25302, EFBIG, "EFBIG", 42),
            ("errSecDecode", .decode, -26275, EIO, "EIO", 93),
            ("errSecNoSuchKeychain", .noSuchKeychain, -25294, ENOENT, "ENOENT", 50),
            ("errSecDuplicateKeychain", .duplicateKeychain, -25296, EEXIST, "EEXIST", 48),
            ("errSecUnimplemented", .unimplemented, -4, EOPNOTSUPP, "EOPNOTSUPP", 252),
            ("errSecNotAvailable", .notAvailable, -25291, EAGAIN, "EAGAIN", 53),
            ("errSecAllocate", .allocate, -108, ENOMEM, "ENOMEM", 148),
            ("errSecIO", .io, -36, EIO, "EIO", 220),
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

    @Test("the table above is the one in docs/errors.md, row for row, and lists every known status")
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
        // On a mismatch, the first four columns as the code has them, ready to paste.
        let generated = KeychainStatus.known.map { status in
            let errnoName = Self.table.first { $0.status == status }?.errnoName ?? "?"
            return "| \(status.name) | \(status.rawValue) | \(errnoName) | \(status.exitCode) |"
        }.joined(separator: "\n")
        #expect(
            documented.map(\.0) == KeychainStatus.known.map(\.name),
            "docs/errors.md must list KeychainStatus.known in order; the code says:\n\(generated)")
        #expect(
            Self.table.map(\.status) == KeychainStatus.known,
            "the test table must list KeychainStatus.known in order")
        for (name, value, errnoName, exit) in documented {
            guard let row = Self.table.first(where: { $0.name == name }) else {
                Issue.record("\(name) is documented but not tested")
                continue
            }
            #expect(
                row.value == value && row.errnoName == errnoName && row.exit == exit,
                "docs: \(name) \(value) \(errnoName) \(exit); test: \(row.value) \(row.errnoName) \(row.exit); the code says:\n\(generated)"
            )
        }
    }

    @Test("every exit code is the OSStatus's low byte, as macOS `security` exits")
    func exitCodesAreLowBytes() {
        for row in Self.table where row.status != .success {
            #expect(row.exit == Int32(UInt8(truncatingIfNeeded: row.value)), "\(row.name)")
        }
        #expect(KeychainStatus.itemNotFound.exitCode == 44 && KeychainStatus.duplicateItem.exitCode == 45)
        #expect(KeychainStatus.authFailed.exitCode == 51 && KeychainStatus.interactionNotAllowed.exitCode == 36)
    }

    @Test("statuses docs/errors.md does not list (unknown OSStatus values) → EIO and their low byte; 0 and 2 → 1")
    func undocumentedStatuses() {
        for (raw, exit): (Int32, Int32) in [(-1, 255), (-99999, 97), (12345, 57), (-25320, 24)] {
            let status = KeychainStatus(rawValue: raw)
            #expect(status.errno == EIO && status.exitCode == exit, "\(status)")
        }
        // A low byte of 0 would read as success, 2 as a usage error.
        for raw: Int32 in [Int32.min, -256, 256, -254, 258] {
            #expect(KeychainStatus(rawValue: raw).exitCode == 1, "\(raw)")
        }
    }

    @Test("errnos are positive and distinct from success; exit codes never collide with success, failure or usage")
    func shapes() {
        for row in Self.table where row.status != .success {
            #expect(row.status.errno > 0, "\(row.name)")
            #expect(![0, 1, 2].contains(row.status.exitCode), "\(row.name)")
        }
        let codes = Self.table.map(\.exit)
        #expect(Set(codes).count == codes.count, "two statuses share an exit code")
    }

    // The FUSE face's own table (ErrnoConversion.swift), status by status.
    @Test("errno table for the filesystem front end")
    func errnoTable() {
        let expected: [(KeychainStatus, Int32)] = [
            (.success, 0), (.itemNotFound, ENOENT), (.noSuchKeychain, ENOENT), (.duplicateItem, EEXIST),
            (.duplicateKeychain, EEXIST),
            (.param, EINVAL), (.noSuchClass, EINVAL), (.noSuchAttr, ENODATA),
            (.interactionNotAllowed, EACCES), (.authFailed, EACCES), (.missingEntitlement, EACCES),
            (.writePermission, EACCES), (.interactionRequired, EAGAIN), (.userCanceled, ECANCELED),
            (.readOnlyAttr, EPERM), (.readOnly, EPERM), (.dataNotAvailable, EPERM), (.dataTooLarge, EFBIG),
            (.decode, EIO),
            (.unimplemented, EOPNOTSUPP), (.allocate, ENOMEM), (.notAvailable, EAGAIN), (.io, EIO),
        ]
        for (status, errnoValue) in expected {
            #expect(status.errno == errnoValue, "\(status)")
        }
        #expect(Set(expected.map { $0.0 }).count == KeychainStatus.known.count, "every status has an errno")
        #expect(KeychainStatus(rawValue: -12345).errno == EIO)
    }
}
