/// The one version number of keychainfs and its helpers: `keychainfs --version` prints
/// `keychainfs <version>`, `git-credential-keychainfs --version` and `docker-credential-keychainfs
/// version` name it too.
public let keychainfsVersionNumber = "0.1.0"
