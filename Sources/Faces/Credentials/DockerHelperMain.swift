import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

/// docker-credential-keychainfs: docker's credential helper protocol over the vault.
/// `~/.docker/config.json`: {"credsStore": "keychainfs"}. docker passes no arguments but the
/// operation, so the passphrase file comes from $KEYCHAINFS_PASSPHRASE_FILE (or a prompt).
///
/// As docker-credential-helpers does: an error is one line on stdout and exit 1, a miss is
/// exactly `credentials not found in native keychain`; the reason for a miss the vault caused
/// (locked, timeout) goes to stderr first.
public enum DockerHelperMain {
    /// The helper, run with its arguments (without the program name); ends the process.
    public static func run(_ arguments: [String]) -> Never {
        let tool = "docker-credential-keychainfs"
        ProcessHardening.apply()

        func finish(_ line: String, _ code: Int32) -> Never {
            HelperIO.write(1, Array((line + "\n").utf8))
            exit(code)
        }

        HelperOptions.answerHelpOrVersion(
            arguments, tool: tool, operations: ["get", "store", "erase", "list", "version"])
        let options: HelperOptions
        do {
            options = try HelperOptions.parse(
                arguments, operations: ["get", "store", "erase", "list", "version"])
        } catch {
            HelperIO.errorLine("\(tool): \(error.message)")
            // docker-credential-helpers' Serve exits 1 for a wrong action or argument count too.
            finish("Usage: \(tool) \(HelperOptions.usage)", 1)
        }
        if options.operation == "version" { finish("\(tool) (keychainfs) \(keychainfsVersionNumber)", 0) }
        Watchdog.start(
            seconds: options.timeout, tool: tool, exitCode: 1,
            answer: Array(((options.operation == "get" ? DockerCredentialHelper.notFound : "timed out") + "\n").utf8))

        var input: [UInt8] = []
        if options.operation != "list" {
            do { input = try HelperVault.readAll(0, limit: 1 << 20, what: "standard input") } catch {
                finish("\(error)", 1)
            }
        }
        defer { Sodium.wipe(&input) }

        // What docker-credential-helpers checks before it asks its store (credentials.Serve): the
        // request itself, so a malformed one gets the Go helpers' own words whatever the vault's state.
        let serverURL = String(decoding: input, as: UTF8.self).trimmingWhitespaceAndNewlines()
        var credential: DockerCredentialHelper.Credential?
        switch options.operation {
        case "store":
            do {
                credential = try JSONDecoder().decode(DockerCredentialHelper.Credential.self, from: Data(input))
            } catch {
                finish("malformed credentials: expected {\"ServerURL\", \"Username\", \"Secret\"}", 1)
            }
            if credential?.ServerURL.isEmpty ?? true { finish(DockerCredentialHelper.missingServerURL, 1) }
            if credential?.Username.isEmpty ?? true { finish(DockerCredentialHelper.missingUsername, 1) }
        case "get", "erase":
            if serverURL.isEmpty { finish(DockerCredentialHelper.missingServerURL, 1) }
        default: break
        }

        let helper: DockerCredentialHelper
        do {
            helper = DockerCredentialHelper(door: try HelperVault.openDoor(options, tool: tool, face: "docker"))
        } catch {
            HelperIO.errorLine("\(tool): \(options.operation): \(error)")
            finish(options.operation == "get" ? DockerCredentialHelper.notFound : "\(error)", 1)
        }

        do {
            switch options.operation {
            case "store":
                if let credential { try helper.store(credential) }
            case "get":
                guard let found = try helper.get(serverURL) else { finish(DockerCredentialHelper.notFound, 1) }
                HelperIO.write(1, Array(try JSONEncoder().encode(found)) + [10])
            case "erase":
                guard try helper.erase(serverURL) else { finish(DockerCredentialHelper.notFound, 1) }
            default:
                let encoder = JSONEncoder()
                encoder.outputFormatting = .sortedKeys
                HelperIO.write(1, Array(try encoder.encode(try helper.list())) + [10])
            }
            exit(0)
        } catch let e as KeychainError {
            HelperIO.errorLine("\(tool): \(options.operation): \(e.message) (\(e.status.name))")
            finish(options.operation == "get" ? DockerCredentialHelper.notFound : "\(e.message) (\(e.status.name))", 1)
        } catch {
            finish("\(error)", 1)
        }

    }
}
