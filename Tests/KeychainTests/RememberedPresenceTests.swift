import Foundation
import Keychain
import KeychainCrypto
import Testing

/// Remembered presence decisions ("Always allow" at a Secret Service prompt): kept in the signed
/// access policy, changed only with the passphrase, carried through reopening and rotation.
@Suite("remembered presence decisions in the signed policy")
struct RememberedPresenceTests {
    @Test("remember needs the passphrase; the decision survives reopening and leaves the groups alone")
    func rememberAndReopen() throws {
        try withVault { v throws in
            let kc = v.keychain
            let item = try kc.add(
                .genericPassword,
                genp(
                    "pres", "kay",
                    [
                        Schema.accessControl: .accessControl(
                            AccessControl(protection: .whenUnlocked, flags: [.userPresence]))
                    ]),
                data: bytes("s"))
            try expectError(.authFailed) {
                try kc.rememberPresence(
                    executable: "/usr/bin/python3.11", itemID: item.id, passphrase: try secure("wrong"))
            }
            #expect(try kc.accessPolicy().rememberedPresence.isEmpty)
            try kc.rememberPresence(
                executable: "/usr/bin/python3.11", itemID: item.id, passphrase: try secure(testPassphrase))
            let reopened = try v.openUnlocked()
            let policy = try reopened.accessPolicy()
            #expect(policy.rememberedPresence == ["/usr/bin/python3.11": [item.id]])
            #expect(policy.isEmpty, "a remembered decision made an access group")
            #expect(policy.accessGroups(forExecutable: "/usr/bin/python3.11") == [Caller.defaultAccessGroup])
        }
    }

    @Test("groups and decisions round trip together; forget by executable, by item, or all")
    func roundTripAndForget() throws {
        try withVault { v throws in
            let kc = v.keychain
            var policy = AccessPolicy()
            policy.add(group: "team", executable: "/usr/bin/cat")
            policy.remember(executable: "/usr/bin/cat", itemID: 7)
            policy.remember(executable: "/usr/bin/cat", itemID: 9)
            policy.remember(executable: "/usr/bin/dd", itemID: 7)
            try kc.setAccessPolicy(policy, passphrase: try secure(testPassphrase))
            var read = try v.openUnlocked().accessPolicy()
            #expect(read == policy)
            #expect(read.groups.map(\.name) == ["team"])
            let forgotItem = read.forget(executable: nil, itemID: 7)
            #expect(forgotItem)
            #expect(read.rememberedPresence == ["/usr/bin/cat": [9]])
            let forgotGone = read.forget(executable: "/usr/bin/dd", itemID: nil)
            #expect(!forgotGone, "dd's only decision was for item 7, already forgotten")
            let forgotAll = read.forget(executable: "/usr/bin/cat", itemID: nil)
            #expect(forgotAll)
            #expect(read.rememberedPresence.isEmpty)
            #expect(read.groups.map(\.name) == ["team"])
        }
    }

    @Test("a master key rotation re-signs the policy with its decisions")
    func rotationKeepsDecisions() throws {
        try withVault { v throws in
            let kc = v.keychain
            try kc.rememberPresence(executable: "/usr/bin/ssh", itemID: 3, passphrase: try secure(testPassphrase))
            try kc.rotateMasterKey(old: try secure(testPassphrase), new: try secure("a new passphrase here"))
            let reopened = try v.openUnlocked(passphrase: "a new passphrase here")
            #expect(try reopened.accessPolicy().rememberedPresence == ["/usr/bin/ssh": [3]])
        }
    }
}
