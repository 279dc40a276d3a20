import FoundationEssentials

/// What a proof of absence keeps of a name-list chunk it opened: the range of ids the chunk's
/// entries had, and a hash of each entry's name attributes (`AbsenceProof.hash`). Kept by the
/// chunk's keyed entry in its bucket (`NameLists.chunkEntry`: list, place and sealed bytes under
/// the manifest's entry key), so it is used again only for the very bytes it was made from.
struct AbsenceChunk: Sendable {
    var first = Int64.max, last = Int64.min
    /// Appended as the chunk is decoded (a set's inserts cost more than a proof's scans of them).
    var hashes: [Int] = []
}

/// One directory's chunks as the last proof of absence in it saw them.
typealias AbsenceChunks = [[UInt8]: AbsenceChunk]

enum AbsenceProof {
    /// The hash of a name's attributes (each value, or its default when missing, in the class's
    /// order; `synchronizable` left out). Equal values give equal hashes, so an entry with the
    /// query's primary key always has the query's hash; a hash equal by chance only makes the
    /// proof give up (the every-bucket check answers). Swift's `Hasher`: seeded per process, so
    /// the hashes never leave it.
    static func hash(_ names: [Attribute], _ value: (Attribute) -> AttributeValue?) -> Int {
        var hasher = Hasher()
        for attribute in names {
            let v = value(attribute) ?? AttributeValue.defaultValue(for: attribute.type)
            if case .string(let s) = v {
                combine(&hasher, Array(s.utf8)[...])
            } else {
                hasher.combine(1 as UInt8)
                hasher.combine(v)
            }
        }
        return hasher.finalize()
    }

    /// The same hash for a class whose one name attribute is a string, from the stored bytes of
    /// an entry's sole field (`NameListEntry.soleString`): no value made per entry.
    static func hash(sole bytes: ArraySlice<UInt8>) -> Int {
        var hasher = Hasher()
        combine(&hasher, bytes)
        return hasher.finalize()
    }

    /// A string value: a mark, its UTF-8 bytes and their count.
    private static func combine(_ hasher: inout Hasher, _ bytes: ArraySlice<UInt8>) {
        hasher.combine(0 as UInt8)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        hasher.combine(bytes.count)
    }
}

extension Keychain {
    /// What proofs of absence may cost in all after an unlock before each one also verifies
    /// buckets itself (about the every-bucket check of a 20,000-item vault).
    static let absenceProofBudget: Duration = .milliseconds(100)

    /// "No such item" for a query naming one generic or internet password by its whole primary
    /// key, proven from its directory's name list while the mount's first integrity pass has
    /// not yet verified every bucket (after it, "not found" needs no proof and this returns false
    /// at once). Every row of a listed class has an entry in the list of its class, access group
    /// and grouping value, written in the row's own transaction and covered by the manifest's
    /// tag (Manifest.names; docs/security.md, "Name lists"): a list that authenticates, with no
    /// entry whose primary key could be the query's, shows that no such row was committed. A row
    /// deleted behind the vault's back leaves its entry, so the answer falls back to verifying
    /// every bucket, which finds the deletion. False (fall back) on any doubt: an entry whose
    /// name attributes hash as the query's whatever its `synchronizable`, a list that does not
    /// authenticate, an error. What it saves: the first lookup of a missing name after a mount
    /// (a create's own LOOKUP) no longer waits for every bucket of a 100,000-item vault.
    ///
    /// A proof authenticates the whole list each time (every chunk's keyed entry against the
    /// manifest), but opens only the chunks it has not opened before: of the others it keeps
    /// the hashes of their entries' names (`AbsenceChunk`), by their keyed entry, until the
    /// integrity pass completes. A burst of creates in one directory appends to its last chunk,
    /// so each proof after the first opens one chunk. Such a burst starves the background pass
    /// (it runs at niceness 10), so once proofs have cost `absenceProofBudget` since the unlock,
    /// each proof is followed by as long a check of the buckets not yet verified (at least one),
    /// on the caller's thread: the pass's work moves to the creates, a few milliseconds each,
    /// instead of one create paying the every-bucket check (0.8–0.9 s at 100,000 items).
    func provenAbsentByNameList(_ query: Query, caller: Caller, keys: Keys) -> Bool {
        let itemClass = query.itemClass
        guard NameLists.listedClasses.contains(itemClass),
            let spentBefore = state.withLock({ s in
                s.integrity.complete ? nil : s.integrity.absenceProofs
            })
        else { return false }
        let started = ContinuousClock.now
        guard proveAbsent(query, caller: caller) else { return false }
        let spent = ContinuousClock.now - started
        state.withLock { $0.integrity.absenceProofs += spent }
        guard spentBefore >= Self.absenceProofBudget else { return true }
        do {
            try verifyEveryBucket(until: ContinuousClock.now + spent)
        } catch { return false }
        return true
    }

    private func proveAbsent(_ query: Query, caller: Caller) -> Bool {
        let itemClass = query.itemClass
        let grouping = Schema.groupingAttribute(of: itemClass)
        let value = query.attributes[grouping] ?? AttributeValue.defaultValue(for: grouping.type)
        let names = NameListEntry.nameAttributes(of: itemClass).filter { $0 != Schema.synchronizable }
        let wanted = AbsenceProof.hash(names) { query.attributes[$0] }
        // Most entries store one string field (a generic password's account, not synchronizable).
        let soleString = names.count == 1 && names[0].type == .string ? names[0] : nil
        // The caller's groups are part of the key: a kept chunk is only offered for one list.
        let directory = "\(itemClass.rawValue)\u{0}\(value)\u{0}\(caller.accessGroups.joined(separator: "\u{0}"))"
        let kept = state.withLock { $0.integrity.absenceChunks[directory] } ?? [:]
        var seen: AbsenceChunks = [:]
        var opening: (entry: [UInt8], chunk: AbsenceChunk)?
        func close() {
            if let (entry, chunk) = opening, chunk.first <= chunk.last { seen[entry] = chunk }
            opening = nil
        }
        // The first entry (or kept chunk) that could be the query's ends the proof.
        struct PossiblyPresent: Error {}
        do {
            try forEachNameListEntry(
                itemClass, grouping: value, caller: caller,
                keptChunk: { entry in kept[entry].map { ($0.first, $0.last) } },
                chunk: { entry, isKept in
                    close()
                    if isKept, let chunk = kept[entry] {
                        if chunk.hashes.contains(wanted) { throw PossiblyPresent() }
                        seen[entry] = chunk
                    } else {
                        opening = (entry, AbsenceChunk())
                    }
                }
            ) { entry in
                let h =
                    soleString.flatMap { entry.soleString($0) }.map { AbsenceProof.hash(sole: $0) }
                    ?? AbsenceProof.hash(names) { entry[$0] }
                if h == wanted { throw PossiblyPresent() }
                if opening != nil {
                    opening!.chunk.hashes.append(h)
                    opening!.chunk.first = min(opening!.chunk.first, entry.id)
                    opening!.chunk.last = max(opening!.chunk.last, entry.id)
                }
            }
            close()
        } catch { return false }
        state.withLock { s in
            if !s.integrity.complete { s.integrity.absenceChunks[directory] = seen }
        }
        return true
    }
}
