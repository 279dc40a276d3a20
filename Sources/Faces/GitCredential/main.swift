import KeychainCredentials

// git-credential-keychainfs as a program of its own (the debug build and the tests); the
// installed one is a hard link to keychainfs, which runs the same code by this name.
GitHelperMain.run(Array(CommandLine.arguments.dropFirst()))
