import FoundationEssentials
import Glibc
import Keychain
import KeychainCrypto
import KeychainSync

/// Starting a group and rotating its key (`keychainfs sync setup`, `sync rotate`): what the
/// server and the vault do, in the order that leaves nothing half made.
public enum SyncGroupSetup {
    /// A new group on `server` with this vault in it: the server's schema when absent, the
    /// group's row, the vault joined with a new root key (the passphrase authorises it), then a
    /// first round, which uploads every synchronizable item.
    @discardableResult
    public static func start(keychain: Keychain, server: String, passphrase: SecureBytes) throws -> (
        SyncGroupID, SyncRoundReport
    ) {
        let connection = try SyncServer(conninfo: server)
        try connection.ensureSchema()
        let group = SyncGroupID.random()
        try connection.createGroup(group.bytes)
        try keychain.joinSyncGroup(group: group, root: try SyncKeys.newRoot(), server: server, passphrase: passphrase)
        return (group, try SyncRound(keychain: keychain, server: connection).run())
    }

    /// A new root key (issue 31, point 3: a removed device keeps only what it already had): a
    /// new group with a new root, every synchronizable item of this vault sealed under it and
    /// uploaded, and the old group's rows deleted from the server. The old group's versions
    /// this device kept from conflicts go with it. Every other device of the group then joins
    /// the new one (`sync pair` here; `sync leave` and `sync join` there): none of them can read
    /// anything sealed under the new key until it does.
    public static func rotate(keychain: Keychain, passphrase: SecureBytes) throws -> (SyncGroupID, SyncRoundReport) {
        guard let config = try keychain.syncConfiguration() else {
            throw KeychainError(.itemNotFound, "this vault is in no sync group")
        }
        let old = config.groupID
        // First everything this device has not uploaded yet, so no change of the old group is lost.
        let connection = try SyncServer(conninfo: config.server)
        try SyncRound(keychain: keychain, server: connection).run()
        try keychain.leaveSyncGroup(passphrase: passphrase)
        let result = try start(keychain: keychain, server: config.server, passphrase: passphrase)
        try connection.deleteGroup(old)
        return result
    }
}
