import ArgumentParser
import Foundation
import Keychain
import KeychainCrypto

struct KeychainfsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keychainfs",
        abstract: "An encrypted keychain with Apple's Keychain Services semantics, mountable as a directory.",
        discussion: "Exit codes: 0 ok, 44 item not found, 45 duplicate item, 2 usage, 1 any other failure.",
        subcommands: [Init.self, Passwd.self,
                      AddGenericPassword.self, FindGenericPassword.self, DeleteGenericPassword.self,
                      AddInternetPassword.self, FindInternetPassword.self, DeleteInternetPassword.self,
                      DumpKeychain.self])
}

// Before any key exists in memory: no core dumps, no same-user ptrace.
ProcessHardening.apply()

func fail(_ message: String, _ code: Int32) -> Never {
    // One line, always: flatten anything multi-line an underlying library produced.
    let oneLine = message.split(whereSeparator: \.isNewline).joined(separator: " ")
    Output.errorLine("keychainfs: error: \(oneLine)")
    exit(code)
}

do {
    var command = try KeychainfsCommand.parseAsRoot()
    try command.run()
} catch let error as KeychainError {
    fail(error.message, error.status.exitCode)
} catch let error as CLIError {
    fail(error.message, error.exitCode)
} catch {
    let code = KeychainfsCommand.exitCode(for: error)
    if code == .success {
        // --help, --version
        Output.line(KeychainfsCommand.fullMessage(for: error))
        exit(0)
    }
    if code == .validationFailure || error is ValidationError {
        fail("\(KeychainfsCommand.message(for: error)) (see 'keychainfs help')", 2)
    }
    fail(KeychainfsCommand.message(for: error), code.rawValue == 0 ? 1 : code.rawValue)
}
