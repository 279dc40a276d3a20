import Foundation
import Testing

/// docker-credential-keychainfs: the JSON round trip as docker's own client package drives it
/// (store, get, list, erase), docker's miss message, and `docker logout` (the docker CLI erases
/// through the helper without a daemon).
@Suite("docker credential helper")
struct DockerHelperTests {
    static let dockerCLI = ["/usr/local/bin/docker", "/usr/bin/docker"].first {
        FileManager.default.isExecutableFile(atPath: $0)
    }

    func json(_ r: RunResult) -> [String: String]? {
        (try? JSONSerialization.jsonObject(with: Data(r.stdoutBytes))) as? [String: String]
    }

    @Test func jsonRoundTrip() throws {
        try withSandbox(#function) { box in
            let binary = try helperBinary("docker-credential-keychainfs")
            // docker runs the helper with only the operation: the passphrase file comes from the environment.
            let env: [String: String?] = [
                "KEYCHAINFS_VAULT": box.vault, "KEYCHAINFS_PASSPHRASE_FILE": box.passphraseFile,
            ]
            func helper(_ op: String, _ input: String? = nil) throws -> RunResult {
                try box.run(binary, [op], stdin: input.map { Array($0.utf8) }, env: env, timeout: 20)
            }
            // A git credential for the same host is not docker's.
            try box.addInternet(
                ["-s", "registry.example.com", "-P", "5000", "-r", "https", "-a", "git-user"], "git-pw")

            let store = try helper(
                "store", #"{"ServerURL":"registry.example.com:5000","Username":"zed","Secret":"zed token"}"#)
            #expect(store.status == 0 && store.stdout.isEmpty, "store: \(store.summary)")
            let get = try helper("get", "registry.example.com:5000\n")
            #expect(get.status == 0, "get: \(get.summary)")
            #expect(json(get) == ["ServerURL": "registry.example.com:5000", "Username": "zed", "Secret": "zed token"])
            // The same registry spelled with its scheme is the same location.
            #expect(json(try helper("get", "https://registry.example.com:5000"))?["Secret"] == "zed token")
            let list = try helper("list")
            #expect(list.status == 0 && json(list) == ["registry.example.com:5000": "zed"], "list: \(list.summary)")

            // Logging in as someone else replaces the login.
            #expect(
                try helper(
                    "store", #"{"ServerURL":"registry.example.com:5000","Username":"amy","Secret":"amy token"}"#
                ).status == 0)
            #expect(json(try helper("list")) == ["registry.example.com:5000": "amy"])

            let erase = try helper("erase", "registry.example.com:5000")
            #expect(erase.status == 0, "erase: \(erase.summary)")
            let miss = try helper("get", "registry.example.com:5000")
            #expect(miss.status == 1 && miss.stdout == "credentials not found in native keychain\n", "\(miss.summary)")
            #expect(
                try helper("erase", "registry.example.com:5000").stdout == "credentials not found in native keychain\n")
            #expect(try helper("list").stdout == "{}\n")
            #expect(try box.findInternet(["-s", "registry.example.com", "-a", "git-user"]) == "git-pw")

            // Bad input: a clear error on stdout (docker shows it), exit 1, nothing stored.
            let malformed = try helper("store", #"{"ServerURL":"r.example.com","Username":"#)
            #expect(malformed.status == 1 && malformed.stdout.contains("malformed credentials"), "\(malformed.summary)")
            let noUser = try helper("store", #"{"ServerURL":"r.example.com","Username":"","Secret":"s"}"#)
            #expect(noUser.status == 1 && noUser.stdout == "no credentials username\n", "\(noUser.summary)")
            #expect(try helper("list").stdout == "{}\n")
            #expect(!malformed.stdout.contains("\"s\"") && !noUser.stderr.contains("Secret"))

            // A locked vault: why on stderr, docker's miss on stdout.
            let locked = try box.run(
                binary, ["get"], stdin: Array("registry.example.com:5000".utf8),
                env: ["KEYCHAINFS_VAULT": box.vault, "KEYCHAINFS_PASSPHRASE_FILE": nil], timeout: 20)
            #expect(locked.status == 1 && locked.stdout == "credentials not found in native keychain\n")
            #expect(locked.stderr.contains("no passphrase"), "\(locked.summary)")
        }
    }

    @Test(.enabled(if: dockerCLI != nil, "the docker CLI is not installed"))
    func dockerLogoutErasesThroughTheHelper() throws {
        try withSandbox(#function) { box in
            try helperBinary("docker-credential-keychainfs")
            let config = box.root + "/docker"
            try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
            try Data(#"{"credsStore":"keychainfs"}"#.utf8).write(to: URL(fileURLWithPath: config + "/config.json"))
            let env: [String: String?] = [
                "KEYCHAINFS_VAULT": box.vault, "KEYCHAINFS_PASSPHRASE_FILE": box.passphraseFile,
                "DOCKER_CONFIG": config, "PATH": (productsDirectory ?? "") + ":/usr/local/bin:/usr/bin:/bin",
            ]
            let helper = try helperBinary("docker-credential-keychainfs")
            let store = try box.run(
                helper, ["store"], stdin: Array(#"{"ServerURL":"127.0.0.1:5000","Username":"zed","Secret":"t"}"#.utf8),
                env: env, timeout: 20)
            #expect(store.status == 0, "\(store.summary)")
            let logout = try box.run(Self.dockerCLI!, ["logout", "127.0.0.1:5000"], env: env, timeout: 30)
            #expect(logout.status == 0, "docker logout: \(logout.summary)")
            #expect(try box.run(helper, ["list"], env: env, timeout: 20).stdout == "{}\n")
        }
    }
}
