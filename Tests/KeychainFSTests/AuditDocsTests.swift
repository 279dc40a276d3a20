import Foundation
import Testing
import KeychainAccess

// docs/security.md lists the operations an audit line can name; AuditOperation is what the
// code writes. They must be the same list.
@Suite("audit operations") struct AuditDocsTests {
    @Test("docs/security.md names exactly the operations the audit log writes")
    func documentedOperationsMatch() throws {
        let docs = try String(contentsOfFile: repositoryRoot() + "/docs/security.md", encoding: .utf8)
        guard let start = docs.range(of: "**Audit.**"), let end = docs.range(of: "## Threat model") else {
            Issue.record("docs/security.md has no **Audit.** paragraph before the threat model")
            return
        }
        let paragraph = String(docs[start.upperBound..<end.lowerBound])
        let named = Set(paragraph.matches(of: /`([a-z<>-]+)`/).map { String($0.output.1) })
        let written = Set(AuditOperation.documentedSpellings)
        #expect(
            written.subtracting(named).isEmpty, "written but not documented: \(written.subtracting(named).sorted())")
        #expect(
            named.subtracting(written).subtracting(["allow", "deny"]).isEmpty,
            "documented but never written: \(named.subtracting(written).sorted())")
    }

    @Test("an attribute change is logged as set-<attribute name>")
    func attributeSpelling() {
        #expect(AuditOperation.setAttribute("comment").text == "set-comment")
        #expect(AuditOperation.openRead.text == "open-read")
    }
}

private func repositoryRoot() -> String {
    var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    while dir.path != "/" && !FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) {
        dir = dir.deletingLastPathComponent()
    }
    return dir.path
}
