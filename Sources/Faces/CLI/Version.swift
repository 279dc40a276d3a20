/// The one version number: `keychainfs --version` prints `keychainfs <version>`.
let keychainfsVersion = "0.1.0"
