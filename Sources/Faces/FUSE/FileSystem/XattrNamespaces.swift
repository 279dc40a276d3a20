import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import SystemPackage

/// One family of extended attribute names and what they mean on which nodes. The registry
/// (`XattrNamespaces.all`) is asked in order; a name no namespace claims is absent: getxattr
/// answers ENODATA (ls asks for `security.selinux` and `system.posix_acl_access` on every
/// entry), setxattr and removexattr EOPNOTSUPP (storing an ACL as a plain attribute broke
/// modes for `sed -i`).
protocol XattrNamespace: Sendable {
    /// Whether `name` belongs to this namespace.
    func claims(_ name: String) -> Bool
    /// The names this namespace shows on a node (listxattr).
    func names(on node: any Node, in fs: KeychainFileSystem, caller: Caller) throws -> [String]
    /// The value of `name` on `node`; ENODATA when the node has none.
    func value(of name: String, on node: any Node, in fs: KeychainFileSystem, caller: Caller) throws -> [UInt8]
    /// Sets `name` (flags: XATTR_CREATE 1, XATTR_REPLACE 2).
    func set(
        _ name: String, to value: [UInt8], flags: Int32, on node: any Node, in fs: KeychainFileSystem, caller: Caller)
        throws
}

enum XattrNamespaces {
    static let all: [any XattrNamespace] = [KeychainAttributeXattrs(), ControlSocketXattr()]

    static func claiming(_ name: String) -> (any XattrNamespace)? { all.first { $0.claims(name) } }
}

/// `user.keychain.<attribute>`: an item's attributes as text (docs/xattrs.md). Setting one is
/// SecItemUpdate of that attribute; a key attribute moves the file. They cannot be removed
/// (Apple has no "remove" either): EPERM.
struct KeychainAttributeXattrs: XattrNamespace {
    static let prefix = "user.keychain."

    func claims(_ name: String) -> Bool { name.hasPrefix(Self.prefix) }

    func names(on node: any Node, in fs: KeychainFileSystem, caller: Caller) throws -> [String] {
        guard let node = node as? any NodeWithItemAttributes else { return [] }
        return try node.attributeItem(in: fs, caller: caller).attributes.keys.sorted().map { Self.prefix + $0.name }
    }

    /// The schema attribute an xattr name denotes in a class (its exact spelling only).
    static func attribute(_ name: String, in itemClass: ItemClass) -> Attribute? {
        let attrName = String(name.dropFirst(prefix.count))
        guard let attribute = try? Schema.attribute(named: attrName, in: itemClass), attribute.name == attrName else {
            return nil
        }
        return attribute
    }

    func value(of name: String, on node: any Node, in fs: KeychainFileSystem, caller: Caller) throws -> [UInt8] {
        guard let node = node as? any NodeWithItemAttributes else { throw Errno.noData }
        let item = try node.attributeItem(in: fs, caller: caller)
        guard let attribute = Self.attribute(name, in: item.itemClass), let value = item.attributes[attribute] else {
            throw Errno.noData
        }
        return AttributeText.render(attribute, value)
    }

    func set(
        _ name: String, to value: [UInt8], flags: Int32, on node: any Node, in fs: KeychainFileSystem, caller: Caller
    ) throws {
        guard let node = node as? any NodeWithItemAttributes else { throw Errno.notSupported }
        guard let (c, id) = node.writableItem else { throw Errno.notPermitted }
        let item = try fs.session(caller).attributes(id: id, itemClass: c)
        guard let attribute = Self.attribute(name, in: c) else { throw Errno.noData }
        if flags & 1 != 0 && item.attributes[attribute] != nil { throw Errno.fileExists }  // XATTR_CREATE
        if flags & 2 != 0 && item.attributes[attribute] == nil { throw Errno.noData }  // XATTR_REPLACE
        // The value it has already, byte for byte as getxattr shows it (`rsync -X` and `cp -a` set
        // every xattr of their source): nothing to change, even where that text is not one a
        // setxattr may give (a protocol code with no name, `;protocol=zzzz` in the file name).
        if let current = item.attributes[attribute], AttributeText.render(attribute, current) == value { return }
        let parsed = try AttributeText.parse(attribute, value, currentProtection: item.accessibility)
        // The dates are the item's own record, as a file's times are its own: a date set (`mv`
        // and `cp -a` copying an item's xattrs, `rsync -X` restoring a backup) is accepted and
        // changes nothing, as utimensat is.
        if attribute.access == .system { return }
        // The value it has already (`rsync -X` and `cp -a` set every xattr of their source): nothing
        // to change, and a fresh file stays fresh (Rename.swift).
        if item.attributes[attribute] == parsed { return }
        let oldDirectory = PathCodec.directory(of: c, item.attributes)
        let oldLeaf = PathCodec.leaf(of: c, item.attributes)
        var moved = item.attributes
        moved[attribute] = parsed
        if fs.memoryFiles.isCreatedHere(id), PathCodec.directory(of: c, moved) == oldDirectory,
            PathCodec.isTempName(oldLeaf, for: PathCodec.leaf(of: c, moved))
        {
            // rsync names its temp file `.f.XXXXXX` (created through the mount, not renamed since)
            // and sets f's xattrs on it, in name order, before renaming it to f: the attribute that
            // would move it to f is the name that rename gives it. Moving it now would leave
            // rsync's rename nothing to rename (or meet f itself: EEXIST). Whatever it was given
            // before (`accessible`, a key's `applicationTag`, sorted before `account` and `label`).
            // A temp still fresh stays fresh, so the rename onto an existing f gives f its bytes,
            // as `sed -i`'s does.
            return
        }
        fs.memoryFiles.forgetFresh(id)
        try fs.session(caller).setAttributes(id: id, itemClass: c, [attribute: parsed], named: attribute.name)
        guard Schema.isPrimaryKey(attribute, in: c) || attribute == Schema.label else { return }
        let newDirectory = PathCodec.directory(of: c, moved)
        guard newDirectory != oldDirectory || PathCodec.leaf(of: c, moved) != oldLeaf else { return }
        // The item's path changed: the kernel drops its cached entry for the old name before
        // the setxattr is answered. A directory the item left stays, as after `mv` (a shell
        // sitting in it keeps its working directory; docs/paths.md), so its entry is not dropped.
        let parent = oldDirectory.map { fs.directories.inode(c, $0) } ?? Inode.classDirectory(c)
        if newDirectory != oldDirectory {
            if let newDirectory { fs.directories.unmarkEmpty(fs.directories.inode(c, newDirectory)) }
            if oldDirectory != nil { fs.directories.keep(parent) }
        }
        fs.notify(.nameLeft(parent: parent, name: oldLeaf))
    }
}

/// `user.keychainfs.control` on the root: where the control socket is, so that
/// `keychainfs lock|unlock|status MOUNTPOINT` can find the daemon from the mount alone.
struct ControlSocketXattr: XattrNamespace {
    static let name = "user.keychainfs.control"

    func claims(_ name: String) -> Bool { name == Self.name }

    func names(on node: any Node, in fs: KeychainFileSystem, caller: Caller) throws -> [String] {
        node is RootNode && fs.controlSocketPath != nil ? [Self.name] : []
    }

    func value(of name: String, on node: any Node, in fs: KeychainFileSystem, caller: Caller) throws -> [UInt8] {
        guard node is RootNode, let path = fs.controlSocketPath else { throw Errno.noData }
        return Array(path.utf8)
    }

    func set(
        _ name: String, to value: [UInt8], flags: Int32, on node: any Node, in fs: KeychainFileSystem, caller: Caller
    ) throws {
        throw Errno.notSupported
    }
}

extension KeychainFileSystem {
    /// The root's control-socket attribute name (the CLI reads it).
    public static let controlXattr = ControlSocketXattr.name
    public static let xattrPrefix = KeychainAttributeXattrs.prefix

    public func listxattr(_ ino: UInt64, caller: Caller) throws -> [String] {
        let node = try node(ino)
        return try XattrNamespaces.all.flatMap { try $0.names(on: node, in: self, caller: caller) }
    }

    public func getxattr(_ ino: UInt64, name: String, caller: Caller) throws -> [UInt8] {
        guard let namespace = XattrNamespaces.claiming(name) else { throw Errno.noData }
        return try namespace.value(of: name, on: try node(ino), in: self, caller: caller)
    }

    public func setxattr(_ ino: UInt64, name: String, value: [UInt8], flags: Int32, caller: Caller) throws {
        guard let namespace = XattrNamespaces.claiming(name) else { throw Errno.notSupported }
        try namespace.set(name, to: value, flags: flags, on: try node(ino), in: self, caller: caller)
        itemChanged(ino)
    }

    /// Attributes are changed, never removed (Apple has no "remove" either). An attribute every
    /// item of its class has (a primary-key attribute, the protection class, the dates, one
    /// derived from the data) has nothing to remove: accepted and ignored, as chmod is, so
    /// `rsync -X` and `cp --preserve=xattr`, which remove what their source lacks, work. Any
    /// other attribute that exists: EPERM (set it to another value instead). ENODATA for one
    /// that does not exist, EOPNOTSUPP outside the keychain's namespace.
    public func removexattr(_ ino: UInt64, name: String, caller: Caller) throws {
        guard let namespace = XattrNamespaces.claiming(name), namespace is KeychainAttributeXattrs else {
            throw Errno.notSupported
        }
        let node = try node(ino)
        _ = try namespace.value(of: name, on: node, in: self, caller: caller)
        guard let (c, _) = (node as? any NodeWithItemAttributes)?.writableItem,
            let attribute = KeychainAttributeXattrs.attribute(name, in: c)
        else { throw Errno.notPermitted }
        let alwaysPresent =
            Schema.isPrimaryKey(attribute, in: c) || attribute.access != AttributeAccess.readWrite
            || attribute == Schema.accessible
        if !alwaysPresent { throw Errno.notPermitted }
    }
}
