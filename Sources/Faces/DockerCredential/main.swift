import KeychainCredentials

// docker-credential-keychainfs as a program of its own (the debug build and the tests); the
// installed one is a hard link to keychainfs, which runs the same code by this name.
DockerHelperMain.run(Array(CommandLine.arguments.dropFirst()))
