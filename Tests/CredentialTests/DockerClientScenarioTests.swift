import Foundation
import Testing

/// docker-credential-helpers' own scenarios (github.com/docker/docker-credential-helpers,
/// client/client_test.go and credentials/credentials_test.go), run against
/// docker-credential-keychainfs as docker's client package runs a helper: the operation as the
/// only argument, the request on stdin, the answer (or the error's text) on stdout, exit 1 on an
/// error. Each test names the Go test it mirrors. Their words are docker's: the client matches
/// `credentials not found in native keychain`, `no credentials server URL` and
/// `no credentials username` by text (credentials/error.go).
@Suite("docker-credential-helpers client scenarios")
struct DockerClientScenarioTests {
    /// Debian's golang-docker-credential-helpers: the Go helpers' own answers, where a request
    /// is refused before any store is asked (no D-Bus needed).
    static let goHelper = "/usr/bin/docker-credential-secretservice"

    struct Helper {
        let box: TestSandbox
        let binary: String
        func callAsFunction(_ op: String, _ input: String) throws -> RunResult {
            try box.run(
                binary, [op], stdin: Array(input.utf8),
                env: ["KEYCHAINFS_VAULT": box.vault, "KEYCHAINFS_PASSPHRASE_FILE": box.passphraseFile], timeout: 20)
        }
    }

    func withHelper(_ label: String, _ body: (Helper) throws -> Void) throws {
        try withSandbox(label) { box in
            try body(Helper(box: box, binary: try helperBinary("docker-credential-keychainfs")))
        }
    }

    func json(_ r: RunResult) -> [String: String]? {
        (try? JSONSerialization.jsonObject(with: Data(r.stdoutBytes))) as? [String: String]
    }

    func store(_ url: String, _ user: String, _ secret: String) -> String {
        let object = ["ServerURL": url, "Username": user, "Secret": secret]
        return String(decoding: (try? JSONSerialization.data(withJSONObject: object)) ?? Data(), as: UTF8.self)
    }

    @Test("client TestStore and TestGet: two registries, a <token> username, each answered with its own")
    func clientStoreAndGet() throws {
        try withHelper(#function) { helper in
            let creds = [
                ("https://registry.example.com/v1", "foo", "bar"), ("https://example.com:5002", "<token>", "abcd1234"),
            ]
            for (url, user, secret) in creds {
                let r = try helper("store", store(url, user, secret))
                #expect(r.status == 0 && r.stdout.isEmpty, "store \(url): \(r.summary)")
            }
            for (url, user, secret) in creds {
                let r = try helper("get", url)
                #expect(r.status == 0, "get \(url): \(r.summary)")
                #expect(json(r) == ["ServerURL": url, "Username": user, "Secret": secret])
            }
        }
    }

    @Test("client TestGet errors: a missing registry is docker's miss, an empty URL is 'no credentials server URL'")
    func clientGetErrors() throws {
        try withHelper(#function) { helper in
            #expect(try helper("store", store("https://registry.example.com/v1", "foo", "bar")).status == 0)
            let missing = try helper("get", "https://missing.example.com/v1")
            #expect(missing.status == 1 && missing.stdout == "credentials not found in native keychain\n")
            let empty = try helper("get", "")
            #expect(empty.status == 1 && empty.stdout == "no credentials server URL\n", "\(empty.summary)")
        }
    }

    @Test("client TestErase: erase of a stored registry succeeds; of an unknown one fails with docker's miss")
    func clientErase() throws {
        try withHelper(#function) { helper in
            #expect(try helper("store", store("https://registry.example.com/v1", "foo", "bar")).status == 0)
            let erase = try helper("erase", "https://registry.example.com/v1")
            #expect(erase.status == 0 && erase.stdout.isEmpty, "\(erase.summary)")
            let again = try helper("erase", "https://foobar.example.com")
            #expect(again.status == 1 && again.stdout == "credentials not found in native keychain\n")
        }
    }

    @Test("client TestList: {ServerURL: Username} of what was stored")
    func clientList() throws {
        try withHelper(#function) { helper in
            #expect(try helper("store", store("https://registry.example.com/v1", "linus", "s")).status == 0)
            let list = try helper("list", "unused")
            #expect(list.status == 0 && json(list) == ["https://registry.example.com/v1": "linus"], "\(list.summary)")
        }
    }

    @Test("credentials TestStore, TestGet, TestErase: store, get back, erase, then get is a miss")
    func credentialsStoreGetErase() throws {
        try withHelper(#function) { helper in
            let url = "https://registry.example.com/v1/"
            #expect(try helper("store", store(url, "foo", "bar")).status == 0)
            #expect(json(try helper("get", url)) == ["ServerURL": url, "Username": "foo", "Secret": "bar"])
            #expect(try helper("erase", url).status == 0)
            let gone = try helper("get", url)
            #expect(gone.status == 1 && gone.stdout == "credentials not found in native keychain\n")
            // TestErase's own last step: its reader is spent, so that get asks with an empty URL.
            let spent = try helper("get", "")
            #expect(spent.status == 1 && spent.stdout == "no credentials server URL\n")
        }
    }

    @Test(
        "credentials TestStoreMissingServerURL, TestStoreMissingUsername, TestGetMissingServerURL, TestEraseMissingServerURL: the Go helpers' words and exit status"
    )
    func credentialsMissingFields() throws {
        try withHelper(#function) { helper in
            #expect(try helper("store", store("https://registry.example.com/v1/", "foo", "bar")).status == 0)
            let cases: [(String, String, String)] = [
                ("store", store("", "foo", "bar"), "no credentials server URL\n"),
                ("store", store("https://registry.example.com/v1/", "", "bar"), "no credentials username\n"),
                ("get", "", "no credentials server URL\n"), ("get", " \n", "no credentials server URL\n"),
                ("erase", "", "no credentials server URL\n"),
            ]
            let goHelper = FileManager.default.isExecutableFile(atPath: Self.goHelper) ? Self.goHelper : nil
            for (op, input, answer) in cases {
                let r = try helper(op, input)
                #expect(r.status == 1 && r.stdout == answer, "\(op) \(input.debugDescription): \(r.summary)")
                if let goHelper {
                    let go = try helper.box.run(goHelper, [op], stdin: Array(input.utf8), timeout: 20)
                    #expect(go.status == r.status && go.stdout == r.stdout, "the Go helper: \(go.summary)")
                }
            }
            // Nothing was stored or erased by them: the first login is still there.
            let list = try helper("list", "")
            #expect(json(list) == ["https://registry.example.com/v1/": "foo"], "\(list.summary)")
        }
    }

    @Test("credentials TestGetMissingServerURL: answered without opening the vault (no passphrase needed)")
    func emptyURLNeedsNoVault() throws {
        try withSandbox(#function) { box in
            let binary = try helperBinary("docker-credential-keychainfs")
            let r = try box.run(
                binary, ["get"], stdin: [],
                env: ["KEYCHAINFS_VAULT": box.vault, "KEYCHAINFS_PASSPHRASE_FILE": nil], timeout: 20)
            #expect(r.status == 1 && r.stdout == "no credentials server URL\n" && r.stderr.isEmpty, "\(r.summary)")
        }
    }
}
