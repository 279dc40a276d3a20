import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// `/idnt`: a read-only view of the identities (a certificate with its private key). An
/// identity has no row of its own; its file is the core's identity bundle, its inode the
/// certificate's id, its attributes the certificate's.
struct IdentityView: TopLevelDirectory, ItemDirectory, NodeLookuper, NodeReaddirer {
    var name: String { ItemClass.identity.rawValue }
    var itemClass: ItemClass { .identity }

    func keyAttributes(in fs: KeychainFileSystem, caller: Caller) throws -> Attributes? { [:] }

    func lookup(_ name: String, in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        guard
            let identity = try fs.session(caller).identityList()
                .first(where: { PathCodec.leaf(of: .identity, $0.certificate.attributes) == name })
        else {
            throw Errno.noSuchFileOrDirectory
        }
        return IdentityNode.stat(identity, in: fs)
    }

    func entries(in fs: KeychainFileSystem, caller: Caller) throws -> [DirectoryEntry] {
        var seen = Set<String>()
        return try fs.session(caller).identityList().compactMap { identity in
            let leaf = PathCodec.leaf(of: .identity, identity.certificate.attributes)
            guard seen.insert(leaf).inserted else { return nil }
            return DirectoryEntry(name: leaf, ino: Inode.item(.identity, id: identity.id), isDirectory: false)
        }
    }
}

/// `/idnt/<label>`: the certificate's PEM followed by the private key as stored. Read-only:
/// open for writing, truncate, unlink and attribute changes are EPERM.
struct IdentityNode: NodeOpener, NodeWithItemAttributes {
    let certificateID: Int64
    var ino: UInt64 { Inode.item(.identity, id: certificateID) }
    var isDirectory: Bool { false }
    var writableItem: (ItemClass, Int64)? { nil }

    static func stat(_ identity: Keychain.Identity, in fs: KeychainFileSystem) -> NodeStat {
        NodeStat(
            ino: Inode.item(.identity, id: identity.id), isDirectory: false,
            size: FileContent.length(.certificate, identity.certificate.dataLength) + identity.key.dataLength,
            modified: identity.certificate.modificationDate ?? fs.mountTime,
            created: identity.certificate.creationDate ?? fs.mountTime)
    }

    func stat(in fs: KeychainFileSystem, caller: Caller) throws -> NodeStat {
        Self.stat(try fs.session(caller).identityAttributes(certificateID: certificateID), in: fs)
    }

    func attributeItem(in fs: KeychainFileSystem, caller: Caller) throws -> KeychainItem {
        try fs.session(caller).identityAttributes(certificateID: certificateID).certificate
    }

    func open(flags: Int32, in fs: KeychainFileSystem, caller given: Caller) throws -> OpenFile {
        var caller = given
        // O_NONBLOCK: never prompt (kSecUseAuthenticationUIFail): EAGAIN when a prompt is needed.
        if flags & O_NONBLOCK != 0 { caller.authenticationUI = .fail }
        let access = flags & O_ACCMODE
        if access == O_WRONLY || access == O_RDWR { throw Errno.notPermitted }
        // Both halves pass their access checks now, user presence included; each read checks
        // them again, without asking again: the handle carries the grant for both (the door's
        // `openIdentity`, audited as one `open-read`). A refusal is answered by the errno of
        // the status (an identity is a view, not one item).
        let identity: Keychain.Identity
        let granted: Caller
        do {
            (identity, granted) = try fs.session(caller).openIdentity(certificateID: certificateID)
        } catch let e as KeychainError {
            throw ErrnoConversion.errno(for: e, during: "open of identity \(certificateID)")
        }
        // The bundle is the handle's snapshot, in guarded memory (the handle is read-only); it
        // is revoked as an item handle is (Revocation.swift), by the key's protection class.
        let file = OpenFile(
            ino: ino, target: .item(.identity, certificateID), caller: granted, append: false,
            accessibility: identity.key.accessibility)
        let bundle = CertificateData.pem(identity.certificate.data ?? []) + (identity.key.data ?? [])
        try file.state.withLock { try $0.holdReadOnly(bundle, madeFrom: identity.key.data) }
        return file
    }
}
