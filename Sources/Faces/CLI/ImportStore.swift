import FoundationEssentials
import Glibc
import Keychain
import KeychainAccess
import KeychainCrypto
import KeychainImport

#if canImport(Glibc)
    import Glibc
#endif

extension ImportRunOptions {
    /// Stores `records` through the core, so every keychain rule applies. Each record is first
    /// made into an item: one that cannot be stops the import before the vault is opened.
    ///
    /// By default all or nothing: every item goes in through the core's `storeBatch`, in one
    /// write transaction (with -U, add-or-update); if the core refuses any (a duplicate without
    /// -U, a value too large) nothing is stored, each refused item is named on stderr, and the
    /// exit status is the first refusal's. With --continue-on-error, batches of `addBatch` (one
    /// transaction each), a refused batch stored again item by item: each refusal is reported
    /// and the others are stored. Per-item lines on stdout with -v only; a progress line on
    /// stderr when it is a terminal; the summary line (or, with --json, one JSON object) last.
    func store(_ records: inout [ImportRecord], from source: String, vault: VaultOptions) throws {
        var planned: [(record: Int, item: ImportItem)] = []
        var skipped = 0
        try convertingErrors {
            for (index, record) in records.enumerated() {
                if let reason = record.skipReason {
                    Output.errorLine("keychainfs: skipped \(record.origin): \(reason)")
                    skipped += 1
                    continue
                }
                do { planned.append((index, try record.item())) } catch let error as ImportError {
                    throw ImportError("\(source): \(error.message)", exitCode: error.exitCode)
                }
            }
        }
        for record in records where record.skipReason == nil {
            for what in record.dropped {
                Output.errorLine("keychainfs: warning: \(record.origin): \(what) is not imported")
            }
        }
        // The keychain service when one holds the vault (no passphrase, no KDF), else the vault
        // opened here (docs/service.md).
        let door = try vault.openDoor()
        var tally = ImportTally(source: source, skipped: skipped)
        if dryRun {
            dryRunStore(planned, door: door, tally: &tally)
        } else if continueOnError {
            storeItemByItem(planned, records: &records, door: door, tally: &tally)
        } else {
            try storeAllOrNothing(planned, records: &records, door: door, tally: &tally)
        }
        report(tally)
        if let error = finalError(tally, planned: planned.count) { throw error }
    }

    private func itemLine(_ line: String) { if verbose && !json { Output.line(line) } }

    private func dryRunStore(
        _ planned: [(record: Int, item: ImportItem)], door: any KeychainDoor, tally: inout ImportTally
    ) {
        var seen: Set<String> = []
        for (_, item) in planned {
            let name = "\(item.description) (\(item.origin))"
            // Already in the vault, or earlier in this same source.
            let exists =
                !seen.insert(item.description).inserted
                || ((try? door.copyMatching(item.primaryKeyQuery))?.isEmpty == false)
            if !exists {
                itemLine("would add \(name)")
                tally.added += 1
            } else if updateIfPresent {
                itemLine("would update \(name)")
                tally.updated += 1
            } else if continueOnError {
                Output.errorLine("keychainfs: would skip \(name): it already exists (-U updates it)")
                tally.duplicates += 1
            } else {
                Output.errorLine("keychainfs: would refuse \(name): it already exists (-U updates it)")
                tally.refuse(item, KeychainError(.duplicateItem, "\(item.description) already exists"))
            }
        }
        if !continueOnError && !tally.refused.isEmpty {
            // All or nothing: nothing would be stored.
            tally.added = 0
            tally.updated = 0
        }
    }

    private func storeAllOrNothing(
        _ planned: [(record: Int, item: ImportItem)], records: inout [ImportRecord], door: any KeychainDoor,
        tally: inout ImportTally
    ) throws {
        var progress = ImportProgress(total: planned.count, enabled: !json)
        defer { progress.finish() }
        // The batch shares the records' secret buffers; it is gone before they are wiped, so
        // each wipe clears the one buffer rather than a copy.
        let outcome: Result<[Bool], any Error> = Result {
            let batch = planned.map {
                NewItem($0.item.itemClass, $0.item.attributes, data: records[$0.record].password)
            }
            // A service answers the whole batch at once; a vault opened here tells the progress line.
            if let session = door as? KeychainSession {
                return try session.storeBatch(batch, updateExisting: updateIfPresent) { progress.update($0) }
            }
            let added = try door.storeBatch(batch, updateExisting: updateIfPresent)
            progress.update(added.count)
            return added
        }
        for (index, _) in planned { records[index].wipe() }
        switch outcome {
        case .success(let added):
            for ((_, item), wasAdded) in zip(planned, added) {
                itemLine("\(wasAdded ? "added" : "updated") \(item.description) (\(item.origin))")
                if wasAdded { tally.added += 1 } else { tally.updated += 1 }
            }
        case .failure(let refused as BatchRefused):
            progress.finish()
            for (index, error) in refused.refusals {
                let item = planned[index].item
                let why = error.status == .duplicateItem ? "it already exists (-U updates it)" : error.message
                Output.errorLine("keychainfs: refused \(item.description) (\(item.origin)): \(why)")
                tally.refuse(item, error)
            }
        case .failure(let error):
            throw error
        }
    }

    private func storeItemByItem(
        _ planned: [(record: Int, item: ImportItem)], records: inout [ImportRecord], door: any KeychainDoor,
        tally: inout ImportTally
    ) {
        var progress = ImportProgress(total: planned.count, enabled: !json)
        defer { progress.finish() }
        var done = 0
        func storeOne(_ index: Int, _ item: ImportItem) {
            let name = "\(item.description) (\(item.origin))"
            do {
                if updateIfPresent {
                    let result = try door.addOrUpdate(
                        item.itemClass, item.attributes, data: records[index].password)
                    itemLine("\(result.added ? "added" : "updated") \(name)")
                    if result.added { tally.added += 1 } else { tally.updated += 1 }
                } else {
                    try door.add(item.itemClass, item.attributes, data: records[index].password)
                    itemLine("added \(name)")
                    tally.added += 1
                }
            } catch KeychainStatus.duplicateItem {
                Output.errorLine("keychainfs: skipped \(name): it already exists (-U updates it)")
                tally.duplicates += 1
            } catch let error as KeychainError {
                Output.errorLine("keychainfs: failed \(name): \(error.message)")
                tally.fail(item, error)
            } catch {
                tally.fail(item, KeychainError(.io, "\(error)"))
            }
            records[index].wipe()
        }
        // New items go in batches of `batchSize`, one durable transaction each (storeBatch: all
        // of a batch or none); a batch the core refuses is stored again item by item, so each
        // refusal is reported and the rest stored.
        let batchSize = 512
        var next = 0
        while next < planned.count {
            let chunk = planned[next..<min(next + batchSize, planned.count)]
            next += chunk.count
            if !updateIfPresent && chunk.count > 1 {
                let stored =
                    (try? door.storeBatch(
                        chunk.map { NewItem($0.item.itemClass, $0.item.attributes, data: records[$0.record].password) },
                        updateExisting: false)) != nil
                if stored {
                    for (index, item) in chunk {
                        itemLine("added \(item.description) (\(item.origin))")
                        records[index].wipe()
                    }
                    tally.added += chunk.count
                    done += chunk.count
                    progress.update(done)
                    continue
                }
            }
            for (index, item) in chunk {
                storeOne(index, item)
                done += 1
                progress.update(done)
            }
        }
    }

    /// The summary, or the JSON object.
    private func report(_ tally: ImportTally) {
        ImportTally.summaryPrinted = true
        if json {
            Output.line(tally.json(dryRun: dryRun))
        } else if dryRun {
            Output.line(
                "dry run, nothing stored: \(tally.added) to add, \(tally.updated) to update, \(tally.skipped + tally.duplicates) to skip, \(tally.refused.count) failing"
            )
        } else {
            Output.line(
                "imported from \(tally.source): \(tally.added) added, \(tally.updated) updated, \(tally.skipped + tally.duplicates) skipped, \(tally.refused.count) failed"
            )
        }
    }
}

extension ImportRunOptions {
    /// The error an import ends with, if any (after its summary): the first refusal's or
    /// failure's status, else 45 when existing items were skipped (--continue-on-error).
    func finalError(_ tally: ImportTally, planned: Int) -> CLIError? {
        if let first = tally.refused.first {
            let count = tally.refused.count
            let whole =
                continueOnError ? "were not imported" : "were refused; nothing \(dryRun ? "would be " : "")stored"
            return CLIError(
                message:
                    "\(count) of \(planned) items \(whole)\(continueOnError ? "" : " (--continue-on-error stores the others)"); the first: \(first.error.message)",
                exitCode: first.error.status.exitCode)
        }
        if tally.duplicates > 0 {
            let n = tally.duplicates
            return CLIError(
                message:
                    "\(n) item\(n == 1 ? "" : "s") already exist\(n == 1 ? "s" : "") and "
                    + "\(dryRun ? "would be" : "were") left as \(n == 1 ? "it is" : "they are") (-U updates them)",
                exitCode: KeychainStatus.duplicateItem.exitCode)
        }
        return nil
    }
}

/// What an import did, for its summary and its JSON.
struct ImportTally {
    var source: String
    var added = 0
    var updated = 0
    /// Records not imported at all (a Bitwarden note, an empty row).
    var skipped: Int
    /// Existing items left as they are (--continue-on-error without -U).
    var duplicates = 0
    /// Items the core refused (or, item by item, failed), with why; never a secret.
    var refused: [(item: ImportItem, error: KeychainError)] = []

    init(source: String, skipped: Int) {
        self.source = source
        self.skipped = skipped
    }

    /// Whether this process printed its import's summary (`reportingFailures` then prints no
    /// second object for the error that follows it).
    nonisolated(unsafe) static var summaryPrinted = false

    mutating func refuse(_ item: ImportItem, _ error: KeychainError) { refused.append((item, error)) }
    mutating func fail(_ item: ImportItem, _ error: KeychainError) { refused.append((item, error)) }

    func json(dryRun: Bool) -> String {
        let object: JSONValue = [
            "source": .string(source), "dryRun": .bool(dryRun), "added": JSONValue(added),
            "updated": JSONValue(updated),
            "skipped": JSONValue(skipped + duplicates), "failed": JSONValue(refused.count),
            "refused": .array(
                refused.map { item, error in
                    [
                        "item": .string(item.description), "origin": .string(item.origin),
                        "reason": .string(error.message), "status": JSONValue(error.status.rawValue),
                    ]
                }),
        ]
        return JSONText.text(object)
    }
}

/// The progress line on stderr, rewritten in place (`\r`), when stderr is a terminal: count,
/// total and rate, at most 10 times a second. Silent otherwise.
struct ImportProgress {
    let total: Int
    let enabled: Bool
    /// When the first item was stored (the rate leaves out reading the source and unlocking).
    private var start: Date?
    private var lastDrawn = Date.distantPast
    private var drawn = false

    init(total: Int, enabled: Bool) {
        self.total = total
        self.enabled = enabled && isatty(2) == 1 && total > 0
    }

    mutating func update(_ count: Int) {
        guard enabled else { return }
        let now = Date()
        let start = self.start ?? now
        self.start = start
        guard now.timeIntervalSince(lastDrawn) >= 0.1 || count == total else { return }
        lastDrawn = now
        drawn = true
        let elapsed = max(now.timeIntervalSince(start), 0.001)
        Output.writeError(Array("\rimporting: \(count)/\(total) (\(Int(Double(count) / elapsed))/s)\u{1B}[K".utf8))
    }

    /// Clears the line, so what follows starts at its column 0.
    mutating func finish() {
        guard drawn else { return }
        drawn = false
        Output.writeError(Array("\r\u{1B}[K".utf8))
    }
}
