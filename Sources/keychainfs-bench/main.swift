import Foundation
import KeychainCrypto

// keychainfs-bench: figures for docs/benchmarks.md. See `keychainfs-bench help`.
// Top-level code only dispatches: FUSE callbacks live in FloorFS.swift (closures defined in
// main.swift would be main-actor isolated and trap on the first request).

let arguments = Array(CommandLine.arguments.dropFirst())

// Daemon children (this binary re-run by the bench itself).
if arguments.first == "_serve-floor" {
    exit(DaemonMain.serveFloor(Array(arguments.dropFirst())))
}
if arguments.first == "_serve-keychainfs" {
    // As the real daemon: no core dumps, no same-user ptrace, before any key is in memory.
    ProcessHardening.apply()
    exit(DaemonMain.serveKeychainFS(Array(arguments.dropFirst())))
}

let options: Options
do {
    options = try Options.parse(arguments)
} catch is HelpRequested {
    Out.line(Options.usage)
    exit(0)
} catch {
    Out.progress("error: \(error)")
    let usage = Options.usage + "\n"
    _ = usage.withCString { write(2, $0, strlen($0)) }
    exit(2)
}

let started = Clock.now()
do {
    try Affinity.pin(cpu: options.cpu)
    Cleanup.shared.installSignalHandlers()
    Runner.header(options)
    try Runner.run(options)
} catch {
    Out.progress("error: \(error)")
    Cleanup.shared.run()
    exit(1)
}
Cleanup.shared.run()
Out.line()
Out.line("total runtime \(Fmt.seconds(Clock.since(started)))")
