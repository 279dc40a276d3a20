import Foundation
import KeychainAPI
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// What the service tests add to TestSupport: the helper binaries built beside `keychainfs`, the
// API socket of a sandbox's vault, and the environment a one-shot command runs in with nothing
// that could unlock the vault (no passphrase file, no terminal): what it answers, the service
// answered.

extension TestSandbox {
    /// The API socket the service of this sandbox's vault listens on.
    var apiSocket: String {
        let identity = ServiceLocator.identity(ofVault: vault)!
        return ServiceLocator.socketPath(
            for: identity, directory: ServiceLocator.directory(environment: environment()))
    }

    /// `keychainfs args` with no way to unlock the vault: no passphrase option, no
    /// `KEYCHAINFS_PASSPHRASE_FILE`, standard input empty (not a terminal).
    func cliWithoutPassphrase(_ args: [String], stdin: [UInt8] = []) throws -> RunResult {
        try run(
            try requireBinary(), args, stdin: stdin,
            env: ["KEYCHAINFS_PASSPHRASE_FILE": nil, "CREDENTIALS_DIRECTORY": nil])
    }

    /// git's helper with git's protocol on standard input, and nothing to unlock the vault with.
    func gitHelper(_ args: [String], _ request: String) throws -> RunResult {
        try run(
            try helperBinary("git-credential-keychainfs"), args, stdin: Array(request.utf8),
            env: ["KEYCHAINFS_PASSPHRASE_FILE": nil])
    }

    /// docker's helper, likewise.
    func dockerHelper(_ args: [String], _ input: String) throws -> RunResult {
        try run(
            try helperBinary("docker-credential-keychainfs"), args, stdin: Array(input.utf8),
            env: ["KEYCHAINFS_PASSPHRASE_FILE": nil])
    }

    /// The audit lines holding `needle`.
    func auditLines(_ needle: String) -> [Substring] {
        audit.split(separator: "\n").filter { $0.contains(needle) }
    }
}
