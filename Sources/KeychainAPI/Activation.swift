import FoundationEssentials
import Glibc
import Keychain

/// Starting the default vault's service on demand (docs/service.md, "Started by systemd"):
/// `keychainfs.socket` has systemd listen on `default.sock` in the service directory and start
/// `keychainfs.service` at the first connection. A command that finds no running service of its
/// vault connects there only when its vault is the default vault (so no other vault's command
/// starts the default one's service), and uses the service only once it says it holds that very
/// file (its device and inode); anything else, and a service that does not start within
/// `helloTimeout` seconds, leaves the command to open the vault itself, as without systemd.
extension ServiceLocator {
    /// The socket systemd holds for the default vault's service.
    public static func activationSocketPath(directory: String = directory()) -> String {
        directory + "/default.sock"
    }
}

extension ServiceClient {
    public static func activate(
        vault: String, directory: String = ServiceLocator.directory(), helloTimeout: Int = 30
    ) -> ServiceClient? {
        guard let wanted = ServiceLocator.identity(ofVault: vault),
            wanted == ServiceLocator.identity(ofVault: KeychainPaths.defaultVault()),
            ServiceLocator.isPrivateDirectory(directory)
        else { return nil }
        let path = ServiceLocator.activationSocketPath(directory: directory)
        guard let client = try? connect(socket: path, vault: vault, helloTimeout: helloTimeout),
            let (held, _) = try? client.status(),
            ServiceLocator.identity(ofVault: held) == wanted
        else { return nil }
        return client
    }
}
