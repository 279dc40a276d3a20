import Foundation
import Testing
@_exported import TestSupport

#if canImport(Glibc)
    import Glibc
#endif

// What the Secret Service tests add to TestSupport: a private bus (`dbus-daemon --session`
// started by the test on a socket in the sandbox, never the user's bus), the provider serving
// the sandbox vault on it, and the clients' environment. Both processes are the sandbox's: its
// teardown ends them by pid.

/// A private bus and the provider on it.
struct SecretServiceBus {
    let address: String
    let daemon: Spawned
    let provider: Spawned
}

extension TestSandbox {
    /// Starts `dbus-daemon --session --nofork` on a socket in the sandbox and waits for the
    /// address it prints.
    func startBus(sourceLocation: SourceLocation = #_sourceLocation) throws -> (Spawned, String) {
        let daemon = try spawn(
            "/usr/bin/dbus-daemon",
            ["--session", "--nofork", "--nopidfile", "--print-address=1", "--address=unix:path=\(root)/bus"])
        var address: String?
        waitUntil(10) {
            if let line = daemon.stdoutSoFar.split(separator: "\n").first, line.hasPrefix("unix:") {
                address = String(line)
            }
            return address != nil || !daemon.isRunning
        }
        let found = try #require(
            address, "dbus-daemon did not start: \(daemon.stdoutSoFar)", sourceLocation: sourceLocation)
        onTeardown(beforeUnmount: "dbus-\(daemon.pid)") {
            daemon.kill(SIGTERM)
            _ = daemon.wait(timeout: 5)
        }
        return (daemon, found)
    }

    /// `keychainfs secret-service --address ADDRESS` on the sandbox vault, waited for until it
    /// says it serves.
    /// With `passphraseOnDescriptor`, the passphrase comes on descriptor 3 (`--passphrase-fd 3`),
    /// which the provider cannot read again to unlock.
    func startProvider(
        address: String, passphraseOnDescriptor: Bool = false, options: [String] = [],
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> Spawned {
        let bin = try #require(keychainfsBinary, "keychainfs binary not found", sourceLocation: sourceLocation)
        // `--locked` reads no passphrase at all.
        let vaultArgs =
            options.contains("--locked")
            ? ["--vault", vault] : passphraseOnDescriptor ? ["--vault", vault, "--passphrase-fd", "3"] : unlockArgs
        let provider = try spawn(
            bin, ["secret-service"] + vaultArgs + ["--address", address] + options,
            extraDescriptors: passphraseOnDescriptor ? [3: Array(passphrase.utf8)] : [:])
        waitUntil(20) { provider.stdoutSoFar.contains("serving org.freedesktop.secrets") || !provider.isRunning }
        try #require(
            provider.isRunning, "the provider did not start: \(provider.wait(timeout: 1).summary)",
            sourceLocation: sourceLocation)
        onTeardown(beforeUnmount: "provider-\(provider.pid)") {
            provider.kill(SIGTERM)
            _ = provider.wait(timeout: 5)
        }
        return provider
    }

    /// The environment every client runs in: the private bus, python's keyring forced onto the
    /// Secret Service backend.
    func busEnvironment(_ address: String) -> [String: String?] {
        [
            "DBUS_SESSION_BUS_ADDRESS": address,
            "PYTHON_KEYRING_BACKEND": "keyring.backends.SecretService.Keyring",
        ]
    }

    /// `secret-tool args` on the private bus.
    @discardableResult
    func secretTool(_ address: String, _ args: [String], stdin: [UInt8]? = nil) throws -> RunResult {
        try run("/usr/bin/secret-tool", args, stdin: stdin, env: busEnvironment(address), timeout: 20)
    }

    /// `python3 -c script args` on the private bus.
    func python(
        _ address: String, _ script: String, _ args: [String] = [], env extra: [String: String?] = [:]
    ) throws -> RunResult {
        try run(
            "/usr/bin/python3", ["-c", script] + args, env: busEnvironment(address).merging(extra) { $1 },
            timeout: 30)
    }
}

/// A sandbox with an initialised vault (`setup` runs first: CLI adds, policy), a private bus
/// and the provider on it.
func withSecretService(
    _ label: String = #function, passphraseOnDescriptor: Bool = false, options: [String] = [],
    setup: (TestSandbox) throws -> Void = { _ in },
    sourceLocation: SourceLocation = #_sourceLocation, _ body: (TestSandbox, SecretServiceBus) throws -> Void
) throws {
    try withSandbox(label, sourceLocation: sourceLocation) { box in
        try setup(box)
        let (daemon, address) = try box.startBus(sourceLocation: sourceLocation)
        let provider = try box.startProvider(
            address: address, passphraseOnDescriptor: passphraseOnDescriptor, options: options,
            sourceLocation: sourceLocation)
        try body(box, SecretServiceBus(address: address, daemon: daemon, provider: provider))
    }
}

/// The item objects `secret-tool search --all` lists, as full paths (it prints the last
/// component only: `[/genp3]`).
func itemPaths(_ r: RunResult) -> [String] {
    r.lines.filter { $0.hasPrefix("[/") && $0.hasSuffix("]") }.map {
        "/org/freedesktop/secrets/collection/login" + $0.dropFirst().dropLast()
    }
}
