import FoundationEssentials
import Glibc
import KeychainCrypto
import KeychainStore

// `keychainfs salvage`: the recovery path for a vault whose manifest no longer verifies.

/// What `salvage` copied and what it left behind.
public struct SalvageReport: Sendable {
    public var salvaged = 0
    public var policyCopied = false
    /// Rows not copied: damaged ones, and ones whose data cannot be opened here.
    public var skipped: [DamagedRow] = []
}

extension Keychain {
    /// Copies every item of the vault at `path` that passes its own check (attributes, item
    /// key and data authenticate under this vault's keys) into a new vault at `destination`,
    /// made with the same passphrase and KDF parameters, without requiring the manifest to
    /// verify: the way out of a vault whose unlock refuses it. Items keep their attributes
    /// (dates included), data, protection class and access group; the access policy is copied
    /// if it verifies. Skipped: rows that fail their own check, and rows whose class key is not
    /// held here (another device's ThisDeviceOnly items).
    ///
    /// What it cannot know: a whole older version of a row replayed into the file passes its
    /// own check, so the salvaged vault may hold an older secret for such an item. Prefer a
    /// backup when there is one.
    public static func salvage(
        from path: String, to destination: String, passphrase: SecureBytes,
        deviceKeyPath: String = KeychainPaths.deviceKey()
    ) throws -> SalvageReport {
        let source = try Keychain.open(at: path, deviceKeyPath: deviceKeyPath)
        let header = try source.refreshedHeader()
        let master = try header.unwrapMaster(passphrase: passphrase)
        let metadata = try KeyDerivation.subkey(of: master, id: Subkey.metadata.rawValue, context: Subkey.context)
        let device = try DeviceKey.load(at: deviceKeyPath)
        let deviceMatches = device.map { DeviceKey.identifier(of: $0) == header.deviceKeyID } ?? false
        var rows: [StoredItem] = []
        var policyBlob: [UInt8]?
        var classKeys: [Accessibility: SecureBytes] = [:]
        try source.storeCall {
            try source.store.read { vault in
                let state = try AuthenticatedState.read(from: vault)
                classKeys = try openClassKeys(state, master: master, device: deviceMatches ? device : nil)
                try vault.forEachItem { rows.append($0) }
                policyBlob = try vault.meta("access_policy")
            }
        }
        let target = try Keychain.create(
            at: destination, passphrase: passphrase, parameters: header.parameters, deviceKeyPath: deviceKeyPath)
        var report = SalvageReport()
        let keys = try target.currentKeys()
        if let policyBlob,
            let policy = source.openPolicy(
                policyBlob, publicKey: try policyKeyPair(master: master).0, metadataKey: metadata)
        {
            try target.setAccessPolicy(policy, passphrase: passphrase)
            report.policyCopied = true
        }
        try target.writeTransaction(keys: keys.manifest) { vault in
            for row in rows {
                guard
                    let plain = source.salvageable(
                        row, metadataKey: metadata, classKeys: classKeys, skipped: &report.skipped)
                else { continue }
                guard let classKey = keys.classKeys[accessibility(of: plain.attributes)] else {
                    report.skipped.append(
                        DamagedRow(id: row.id, itemClass: row.itemClass, reason: "its class key is not held here"))
                    continue
                }
                let id = try vault.nextItemID()
                let sealed = try target.seal(
                    id: id, itemClass: plain.itemClass, attributes: plain.attributes, data: plain.data, version: 1,
                    keys: keys, classKey: classKey)
                do { try vault.insert(sealed, id: id) } catch StoreError.duplicate {
                    report.skipped.append(
                        DamagedRow(id: row.id, itemClass: row.itemClass, reason: "another row has the same primary key")
                    )
                    continue
                }
                report.salvaged += 1
            }
        }
        return report
    }

    /// A row's class, attributes and data if it passes its own check; else nil, with the
    /// reason appended to `skipped`.
    private func salvageable(
        _ row: StoredItem, metadataKey: SecureBytes, classKeys: [Accessibility: SecureBytes],
        skipped: inout [DamagedRow]
    ) -> (itemClass: ItemClass, attributes: Attributes, data: [UInt8])? {
        func skip(_ reason: String) -> (ItemClass, Attributes, [UInt8])? {
            skipped.append(DamagedRow(id: row.id, itemClass: row.itemClass, reason: reason))
            return nil
        }
        guard let itemClass = ItemClass(rawValue: row.itemClass) else { return skip("unknown item class") }
        guard let attributes = try? openAttributes(row, itemClass: itemClass, metadataKey: metadataKey) else {
            return skip("its attributes do not authenticate")
        }
        guard let classKey = classKeys[Self.accessibility(of: attributes)] else {
            return skip("its class key is not held here (another device's ThisDeviceOnly item)")
        }
        guard let data = try? openSeal(row, itemClass: itemClass, attributes: attributes, classKey: classKey) else {
            return skip("its data does not authenticate")
        }
        return (itemClass, attributes, data)
    }
}
