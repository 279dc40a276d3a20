import Keychain
import SystemPackage
import Testing

@testable import KeychainFS

// The FUSE face's one conversion of failures to errno, and its xattr namespace registry,
// without a mount.
@Suite("errno conversion and xattr namespaces")
struct BoundaryTests {
    private struct Unexpected: Error {}

    @Test("an Errno passes as it is; a KeychainError goes through the status table; anything else is EIO")
    func conversion() {
        #expect(ErrnoConversion.errno(for: Errno.isDirectory, during: "test") == .isDirectory)
        #expect(ErrnoConversion.errno(for: Errno.improperLink, during: "test") == .improperLink)
        let locked = KeychainError(.interactionNotAllowed, "the keychain has not been unlocked")
        #expect(ErrnoConversion.errno(for: locked, during: "test") == .permissionDenied)
        #expect(ErrnoConversion.errno(for: KeychainError(.itemNotFound, "x"), during: "test") == .noSuchFileOrDirectory)
        #expect(ErrnoConversion.errno(for: KeychainError(.duplicateItem, "x"), during: "test") == .fileExists)
        #expect(ErrnoConversion.errno(for: KeychainError(.decode, "x"), during: "test") == .ioError)
        #expect(ErrnoConversion.errno(for: Unexpected(), during: "test") == .ioError)
    }

    @Test("user.keychain.* names map to exactly the schema attributes of the class")
    func keychainNamespace() {
        let keychainNames = KeychainAttributeXattrs()
        #expect(keychainNames.claims("user.keychain.label"))
        #expect(!keychainNames.claims("user.keychainfs.control"))
        #expect(!keychainNames.claims("security.selinux"))
        #expect(KeychainAttributeXattrs.attribute("user.keychain.service", in: .genericPassword) == Schema.service)
        #expect(KeychainAttributeXattrs.attribute("user.keychain.server", in: .internetPassword) == Schema.server)
        // Another class's attribute, a wrong case, an unknown name: not an attribute here.
        #expect(KeychainAttributeXattrs.attribute("user.keychain.server", in: .genericPassword) == nil)
        #expect(KeychainAttributeXattrs.attribute("user.keychain.Label", in: .genericPassword) == nil)
        #expect(KeychainAttributeXattrs.attribute("user.keychain.nosuch", in: .genericPassword) == nil)
    }

    @Test("each name is claimed by one namespace at most; others are absent")
    func registry() {
        #expect(XattrNamespaces.claiming("user.keychain.comment") is KeychainAttributeXattrs)
        #expect(XattrNamespaces.claiming("user.keychainfs.control") is ControlSocketXattr)
        #expect(XattrNamespaces.claiming("system.posix_acl_access") == nil)
        #expect(XattrNamespaces.claiming("user.other") == nil)
    }

    @Test("the class directories keep the inode numbers their registry place gives them")
    func topLevelInodes() {
        for c in Inode.classes {
            #expect(TopLevel.inode(of: c.rawValue) == Inode.classDirectory(c))
            #expect(TopLevel.directory(Inode.classDirectory(c))?.name == c.rawValue)
        }
    }
}
