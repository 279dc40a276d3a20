import KeychainStore

/// `Threads` and `Condition` live in KeychainStore (Sources/KeychainStore/Threads.swift), the
/// lowest module that starts threads (its SerialWorker); every module that imports Keychain
/// reaches them by these names.
public typealias Threads = KeychainStore.Threads
public typealias Condition = KeychainStore.Condition
