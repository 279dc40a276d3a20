import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto

// The lock state through the door: `lock` and `unlock` as a face's caller asks them (the ssh
// agent's `ssh-add -x` and `-X`, the API socket's `keychainfs lock|unlock --vault`), decided by
// the core and audited here like every other verb, so each face that locks or unlocks the one
// keychain of its service leaves the same line (`lock`, `unlock`: allow, or deny and why).

extension KeychainSession {
    /// Locks the keychain: every face of the process that holds it loses the WhenUnlocked keys
    /// at once (the mount revokes open handles, the agent and the Secret Service answer locked).
    /// Locking is always allowed.
    public func lock() {
        keychain.lock()
        record(nil, .lock, allowed: true)
    }

    /// Unlocks the keychain with its passphrase (one Argon2id). A wrong passphrase is audited
    /// as a denial (errSecAuthFailed) and thrown.
    public func unlock(passphrase: SecureBytes) throws {
        do {
            try keychain.unlock(passphrase: passphrase)
            record(nil, .unlock, allowed: true)
        } catch let e as KeychainError {
            record(nil, .unlock, e)
            throw e
        }
    }
}
