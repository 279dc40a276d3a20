import ArgumentParser
import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainService
import KeychainSync

extension SyncCommand {
    /// A round this process runs (`sync now`, `join`), audited as the service's engine audits
    /// its own (`via=sync`): `sync-apply` for what it applied, `sync-refuse` for each record
    /// refused and for a server that went back in time.
    static func auditedRound(
        _ keychain: Keychain, _ vault: VaultOptions, _ round: () throws -> SyncRoundReport
    ) throws -> SyncRoundReport {
        let state = KeychainPaths.stateDirectory()
        try? makeDirectories(state, mode: 0o700)
        let session = KeychainSession(
            keychain: keychain, caller: try vault.holderCaller(keychain),
            audit: try? AuditLog(path: state + "/audit.log"), via: "sync")
        do {
            let report = try round()
            session.recordSync(applied: report.applied, refused: report.refused)
            return report
        } catch let rollback as SyncRollback {
            session.recordSync(applied: 0, refused: [rollback.reason])
            throw rollback
        }
    }

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
            // The devices the server has seen, when it answers within 3 s (status works offline).
            let devices = Result { () throws -> [(device: [UInt8], lastSeen: Date, cursor: Int64)] in
                try SyncServer(conninfo: config.server, connectTimeout: 3).devices(group: config.groupID)
            }
            if json {
                Output.line(Self.json(config, devices: devices))
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
            if let problem = config.problem {
                let since = config.problemSince.map(AttributeText.iso8601) ?? "?"
                Output.line("error: \(problem) (the service has failed since \(since))")
            }
            switch devices {
            case .success(let seen):
                Output.line("devices seen: \(seen.count)")
                for d in seen {
                    let mark = d.device == config.deviceID ? " (this one)" : ""
                    Output.line(
                        "  \(AttributeText.hex(d.device))\(mark): last seen \(AttributeText.iso8601(d.lastSeen)), cursor \(d.cursor)"
                    )
                }
            case .failure(let error): Output.line("server: not reachable now (\(error))")
            }
        }

        static func json(
            _ config: SyncConfiguration, devices: Result<[(device: [UInt8], lastSeen: Date, cursor: Int64)], any Error>
        ) -> String {
            func date(_ d: Date?) -> JSONValue { JSONValue(d.map { AttributeText.iso8601($0) }) }
            var object: [String: JSONValue] = [
                "group": .string(config.group), "server": .string(config.server), "device": .string(config.device),
                "cursor": JSONValue(config.cursor), "outbox": JSONValue(config.outbox),
                "conflicts": JSONValue(config.conflicts), "joined": date(config.joined),
                "lastPush": date(config.lastPush), "lastPull": date(config.lastPull),
                "error": JSONValue(config.problem),
                "errorSince": date(config.problemSince),
            ]
            switch devices {
            case .success(let seen):
                object["devices"] = .array(
                    seen.map {
                        [
                            "device": .string(AttributeText.hex($0.device)),
                            "lastSeen": .string(AttributeText.iso8601($0.lastSeen)), "cursor": JSONValue($0.cursor),
                        ]
                    })
                object["serverReachable"] = true
            case .failure:
                object["devices"] = .null
                object["serverReachable"] = false
            }
            return JSONText.text(.object(object))
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
                        "id": JSONValue($0.id), "side": .string($0.side),
                        "kept": .string(AttributeText.iso8601($0.keptAt)),
                        "class": .string($0.itemClass.rawValue), "item": .string($0.item),
                        "accessGroup": .string($0.accessGroup),
                    ] as JSONValue
                }
                Output.line(JSONText.text(.array(array)))
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
