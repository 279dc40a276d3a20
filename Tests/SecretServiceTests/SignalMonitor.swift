import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// One signal `dbus-monitor` printed: where from, what, and its arguments (the first object
/// path, every string).
struct BusSignal: CustomStringConvertible {
    let path: String
    let interface: String
    let member: String
    let object: String?
    let strings: [String]

    var description: String { "\(member) on \(path)\(object.map { " (\($0))" } ?? "") \(strings)" }
}

/// `dbus-monitor` on a private bus, listening to every signal under /org/freedesktop/secrets
/// (the collection's ItemCreated/ItemChanged/ItemDeleted and PropertiesChanged), started by the
/// test and ended by its teardown.
struct SignalMonitor {
    let process: Spawned
    static let prefix = "/org/freedesktop/secrets"

    init(_ box: TestSandbox, address: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let monitor = try box.spawn(
            "/usr/bin/dbus-monitor", ["--address", address, "type='signal',path_namespace='\(Self.prefix)'"])
        box.onTeardown(beforeUnmount: "dbus-monitor-\(monitor.pid)") {
            monitor.kill(SIGTERM)
            _ = monitor.wait(timeout: 5)
        }
        // Listening once the bus took its name back (it became a monitor).
        let ready = waitUntil(10) { monitor.stdoutSoFar.contains("member=NameLost") || !monitor.isRunning }
        try #require(
            ready && monitor.isRunning, "dbus-monitor did not start: \(monitor.stderrSoFar)",
            sourceLocation: sourceLocation)
        process = monitor
    }

    /// Every signal under the service's root printed so far, in order.
    var signals: [BusSignal] {
        process.stdoutSoFar.components(separatedBy: "signal time=").dropFirst().compactMap { block in
            let lines = block.split(separator: "\n", omittingEmptySubsequences: false)
            guard let header = lines.first else { return nil }
            func field(_ name: String) -> String? {
                guard let r = header.range(of: " \(name)=") else { return nil }
                return String(header[r.upperBound...].prefix { $0 != ";" && $0 != " " })
            }
            guard let path = field("path"), path.hasPrefix(Self.prefix), let member = field("member") else {
                return nil
            }
            func quoted(_ kind: String) -> [String] {
                lines.dropFirst().compactMap { line in
                    let t = line.trimmingCharacters(in: .whitespaces)
                    guard t.hasPrefix(kind + " \""), t.hasSuffix("\"") else { return nil }
                    return String(t.dropFirst(kind.count + 2).dropLast())
                }
            }
            return BusSignal(
                path: path, interface: field("interface") ?? "", member: member, object: quoted("object path").first,
                strings: quoted("string"))
        }
    }

    /// The collection's item signals (ItemCreated, ItemChanged, ItemDeleted) printed so far.
    var itemSignals: [BusSignal] { signals.filter { $0.member.hasPrefix("Item") } }

    /// The first signal after the first `after` that `matches`, waited for up to `seconds`.
    func next(after: Int, within seconds: Double, _ matches: (BusSignal) -> Bool) -> BusSignal? {
        var found: BusSignal?
        _ = waitUntil(seconds) {
            found = signals.dropFirst(after).first(where: matches)
            return found != nil
        }
        return found
    }

    var text: String { process.stdoutSoFar }
}

extension TestSandbox {
    /// The vault mounted with the Secret Service on a private bus, and a monitor of its signals.
    func mountWithSignalMonitor(options: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws -> (
        String, SignalMonitor
    ) {
        let (_, address) = try startBus(sourceLocation: sourceLocation)
        try mount(["secret_service_address=" + address.replacingOccurrences(of: ",", with: "\\,")] + options)
        try #require(
            daemonLog.contains("secret service: serving org.freedesktop.secrets"), "\(daemonLog)",
            sourceLocation: sourceLocation)
        return (address, try SignalMonitor(self, address: address, sourceLocation: sourceLocation))
    }

    /// `keychainfs args --vault VAULT` with no passphrase to open the vault with: answered by
    /// the service (a process other than the Secret Service), or not at all.
    func cliThroughService(_ args: [String]) throws -> RunResult {
        try run(
            try requireBinary(), args + ["--vault", vault],
            env: ["KEYCHAINFS_PASSPHRASE_FILE": nil, "CREDENTIALS_DIRECTORY": nil])
    }

    /// The object path `secret-tool search` gives the one item with these attributes, if one.
    func itemPath(_ address: String, _ attributes: [String]) throws -> String? {
        let found = itemPaths(try secretTool(address, ["search", "--all"] + attributes))
        return found.count == 1 ? found[0] : nil
    }
}
