/// One record as the server keeps it: opaque bytes under an opaque id. The server never sees a
/// name, an attribute or plaintext; `blob` is whatever the sync engine sealed.
public struct ServerRecord: Sendable, Equatable {
    public let recordID: [UInt8]
    /// The engine's version of the record (a counter the writer chose, checked by `push`).
    public let version: Int64
    /// The group's sequence number of the write that stored this state: gap-free, commit order.
    public let seq: Int64
    public let deleted: Bool
    public let blob: [UInt8]

    public init(recordID: [UInt8], version: Int64, seq: Int64, deleted: Bool, blob: [UInt8]) {
        self.recordID = recordID; self.version = version; self.seq = seq; self.deleted = deleted; self.blob = blob
    }
}

/// What `push` did with one request.
public enum PushOutcome: Sendable, Equatable {
    /// Written at this sequence number.
    case stored(seq: Int64)
    /// The record already has this version and these bytes (a repeated upload): nothing written.
    case alreadyStored(seq: Int64)
    /// The record's version is not the one the request expected: nothing written.
    case conflict(currentVersion: Int64)
}

extension PushOutcome {
    /// The seq a device's cursor may move to after this batch: the last of its stored seqs when
    /// they run from `cursor + 1` with no gap (no other device's write between, nothing only
    /// already stored); nil otherwise (the cursor stays, and the next pull reads them).
    public static func contiguousEnd(after cursor: Int64, _ outcomes: [PushOutcome]) -> Int64? {
        var seqs: [Int64] = []
        for outcome in outcomes {
            switch outcome {
            case .stored(let seq): seqs.append(seq)
            case .alreadyStored: return nil
            case .conflict: continue
            }
        }
        seqs.sort()
        guard let first = seqs.first, first == cursor + 1,
            zip(seqs, seqs.dropFirst()).allSatisfy({ $1 == $0 + 1 })
        else { return nil }
        return seqs.last
    }
}

/// What woke a device listening on its group's channel (`SyncServer.waitForNotice`).
public struct ChangeNotice: Sendable, Equatable {
    /// The highest seq the NOTIFYs heard said was stored; nil when one carried no number.
    public let highestSeq: Int64?

    public init(highestSeq: Int64?) { self.highestSeq = highestSeq }
}

/// One record to write: stored only if the server's version is `expectedVersion`.
public struct PushRequest: Sendable, Equatable {
    /// 32 bytes.
    public var recordID: [UInt8]
    /// The version the writer last saw; 0: the record must not exist.
    public var expectedVersion: Int64
    /// Above `expectedVersion` (`push` refuses a request otherwise, `.invalidArgument`).
    public var version: Int64
    public var deleted: Bool
    public var blob: [UInt8]

    public init(recordID: [UInt8], expectedVersion: Int64, version: Int64, deleted: Bool = false, blob: [UInt8]) {
        self.recordID = recordID; self.expectedVersion = expectedVersion; self.version = version
        self.deleted = deleted; self.blob = blob
    }
}

/// Why a `SyncServer` call failed.
public enum SyncServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// libpq or the server failed (`.connectionLost`: reconnect with a new `SyncServer`).
    case postgres(PGError)
    /// The database's kcfs_sync schema is newer than this program's: refused, left untouched.
    case newerSchema(found: Int, supported: Int)
    /// The database's kcfs_sync schema is older than this program's (`ensureSchema` upgrades).
    case olderSchema(found: Int, supported: Int)
    /// There is no kcfs_sync schema (`ensureSchema` creates it, or the administrator runs
    /// `SyncServer.adminSQL`).
    case schemaMissing
    /// No group with this id that the connecting role may see.
    case unknownGroup
    /// An argument of the wrong size (ids are fixed-length).
    case invalidArgument(String)
    /// A rendezvous with this id exists already.
    case rendezvousExists
    case rendezvousUnknown
    case rendezvousExpired
    /// The rendezvous was answered, or its payload taken, already.
    case rendezvousUsed
    /// A payload was delivered before anyone answered the offer.
    case rendezvousNotAnswered

    public var description: String {
        switch self {
        case .postgres(let e): return e.description
        case .newerSchema(let found, let supported):
            return "the server's kcfs_sync schema is version \(found), newer than this program's \(supported)"
        case .olderSchema(let found, let supported):
            return "the server's kcfs_sync schema is version \(found), older than this program's \(supported)"
        case .schemaMissing: return "the server has no kcfs_sync schema"
        case .unknownGroup: return "no such sync group on the server"
        case .invalidArgument(let m): return m
        case .rendezvousExists: return "a pairing rendezvous with this id exists already"
        case .rendezvousUnknown: return "no pairing rendezvous with this id"
        case .rendezvousExpired: return "the pairing rendezvous expired"
        case .rendezvousUsed: return "the pairing rendezvous was used already"
        case .rendezvousNotAnswered: return "the pairing rendezvous has no answer yet"
        }
    }
}
