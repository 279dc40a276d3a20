import ArgumentParser
import Foundation
import Keychain

extension SyncCommand {
    struct SyncStatus: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "The vault's sync group, server, cursor, outbox, last push and pull, kept conflicts.")
        @OptionGroup var vault: VaultOptions
        @Flag(help: "One JSON object.") var json = false

        func run() throws {
            // Nothing in the status is secret: it is read without the passphrase.
            let keychain = try vault.openLocked()
            guard let config = try keychain.syncConfiguration() else {
                if json {
                    Output.line(#"{"group":null}"#)
                } else {
                    Output.line("this vault is in no sync group")
                }
                return
            }
            if json {
                Output.line(Self.json(config))
                return
            }
            Output.line("group: \(config.group)")
            Output.line("server: \(config.server)")
            Output.line("device: \(config.device)")
            Output.line("cursor: \(config.cursor)")
            Output.line("outbox: \(config.outbox) change\(config.outbox == 1 ? "" : "s") not yet uploaded")
            Output.line("conflicts kept: \(config.conflicts)")
            Output.line("last push: \(config.lastPush.map(AttributeText.iso8601) ?? "never")")
            Output.line("last pull: \(config.lastPull.map(AttributeText.iso8601) ?? "never")")
        }

        static func json(_ config: SyncConfiguration) -> String {
            func date(_ d: Date?) -> Any { d.map { AttributeText.iso8601($0) as Any } ?? NSNull() }
            let object: [String: Any] = [
                "group": config.group, "server": config.server, "device": config.device, "cursor": config.cursor,
                "outbox": config.outbox, "conflicts": config.conflicts, "joined": date(config.joined),
                "lastPush": date(config.lastPush), "lastPull": date(config.lastPull),
            ]
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
            return String(decoding: data, as: UTF8.self)
        }
    }

    struct Conflicts: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "List the versions kept when a conflict was decided by the clock (`sync restore` brings one back).")
        @OptionGroup var vault: VaultOptions
        @Flag(help: "One JSON array.") var json = false

        func run() throws {
            let keychain = try vault.openUnlocked(nil, incremental: true)
            let conflicts = try keychain.syncConflicts(caller: try vault.holderCaller(keychain))
            if json {
                let array = conflicts.map {
                    [
                        "id": $0.id, "side": $0.side, "kept": AttributeText.iso8601($0.keptAt),
                        "class": $0.itemClass.rawValue, "item": $0.item, "accessGroup": $0.accessGroup,
                    ] as [String: Any]
                }
                let data = (try? JSONSerialization.data(withJSONObject: array, options: [.sortedKeys])) ?? Data()
                Output.line(String(decoding: data, as: UTF8.self))
                return
            }
            for c in conflicts {
                Output.line("\(c.id)\t\(c.side) version lost, kept \(AttributeText.iso8601(c.keptAt))\t\(c.item)")
            }
        }
    }

    struct Restore: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Bring a kept version back: it becomes this device's newest change and syncs.")
        @OptionGroup var vault: VaultOptions
        @Argument(help: ArgumentHelp("The id `sync conflicts` lists.", valueName: "id")) var id: Int64

        func run() throws {
            let keychain = try vault.openUnlocked(nil, incremental: true)
            try keychain.restoreSyncConflict(id: id, caller: try vault.holderCaller(keychain))
            Output.line("restored kept version \(id)")
        }
    }
}
