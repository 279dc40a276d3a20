import Keychain

/// `keychainfs --version` prints `keychainfs <version>`; the number is the core's
/// (Sources/Keychain/Version.swift), which the credential helpers print too.
let keychainfsVersion = keychainfsVersionNumber
