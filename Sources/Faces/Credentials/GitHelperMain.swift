import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

/// git-credential-keychainfs: git's credential helper protocol over the vault's internet
/// passwords. `git config --global credential.helper 'keychainfs --passphrase-file FILE'`.
///
/// Exit codes: 0 for every answer git can use, "not found" included (git then prompts or asks
/// its next helper; the reason is on stderr first); 1 when store or erase could not use the
/// vault; 2 for a usage error.
public enum GitHelperMain {
    /// The helper, run with its arguments (without the program name); ends the process.
    public static func run(_ arguments: [String]) -> Never {
        let tool = "git-credential-keychainfs"
        ProcessHardening.apply()

        func usage(_ message: String) -> Never {
            HelperIO.errorLine("\(tool): \(message)")
            exit(2)
        }

        HelperOptions.answerHelpOrVersion(
            arguments, tool: tool, operations: ["get", "store", "erase"])
        let options: HelperOptions
        do {
            options = try HelperOptions.parse(arguments, operations: ["get", "store", "erase"])
        } catch {
            usage(error.message)
        }
        let isGet = options.operation == "get"
        // "Not found" for get (git goes on), failure for store and erase: never a hung git.
        Watchdog.start(seconds: options.timeout, tool: tool, exitCode: isGet ? 0 : 1)

        var input: [UInt8]
        do { input = try HelperVault.readAll(0, limit: 1 << 20, what: "git's request on standard input") } catch {
            HelperIO.errorLine("\(tool): \(error)")
            exit(isGet ? 0 : 1)
        }
        let request: GitCredential
        do { request = try GitCredential.parse(input) } catch {
            HelperIO.errorLine("\(tool): \(error)")
            exit(isGet ? 0 : 1)
        }
        Sodium.wipe(&input)

        do {
            var helper = GitCredentialHelper(door: try HelperVault.openDoor(options, tool: tool, face: "git"))
            var status: Int32 = 0
            do {
                switch options.operation {
                case "get":
                    if let answer = try helper.get(request) { HelperIO.write(1, answer.answer()) }
                case "store": try helper.store(request)
                default: try helper.erase(request)
                }
            } catch let e as KeychainError {
                HelperIO.errorLine("\(tool): \(options.operation): \(e.message) (\(e.status.name))")
                status = isGet ? 0 : 1
            } catch let e as HelperFailure {
                HelperIO.errorLine("\(tool): \(options.operation): \(e.message)")
                status = isGet ? 0 : 1
            }
            for note in helper.notes { HelperIO.errorLine("\(tool): \(options.operation): \(note)") }
            exit(status)
        } catch {
            HelperIO.errorLine(
                "\(tool): \(options.operation): \(error); \(isGet ? "answering not found" : "nothing changed")")
            exit(isGet ? 0 : 1)
        }

    }
}
