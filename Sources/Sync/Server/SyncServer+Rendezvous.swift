/// Pairing rendezvous: the device that pairs offers bytes under a random 32-byte id, with an
/// expiry; the new device answers once and gets the offer; the first delivers a payload, which
/// the second takes once. Each row is locked while it is judged, so two answers or two takes
/// cannot both succeed. Rows are the connecting role's own (row-level security).
extension SyncServer {
    /// The NOTIFY channel of a rendezvous: the first 16 bytes of its id are enough to tell waits
    /// apart (a shared channel only wakes a waiter that then polls), and keep the name short.
    static func channel(rendezvous id: [UInt8]) -> String { "kcfs_rv_" + hex(Array(id.prefix(16))) }

    /// Offers `offer` under `id` until `expiresIn` from now; `.rendezvousExists` if the id is taken.
    public func rendezvousOffer(id: [UInt8], offer: [UInt8], expiresIn: Duration) throws(SyncServerError) {
        try Self.require(id, count: 32, "a rendezvous id")
        let (seconds, attoseconds) = expiresIn.components
        let microseconds = seconds * 1_000_000 + attoseconds / 1_000_000_000_000
        try run {
            // The role's rows that expired more than a day ago are of no use to anyone.
            try connection.execute("DELETE FROM kcfs_sync.rendezvous WHERE expires < now() - interval '1 day'")
            do {
                try connection.execute(
                    """
                    INSERT INTO kcfs_sync.rendezvous (id, offer, expires)
                    VALUES ($1, $2, now() + $3::bigint * interval '1 microsecond')
                    """, [.bytes(id), .bytes(offer), .int(microseconds)])
            } catch let error as PGError {
                if case .server(let state, _) = error, state == "23505" { throw SyncServerError.rendezvousExists }
                throw error
            }
        }
    }

    /// The row of `id`, locked for the rest of the transaction; refused if absent or expired.
    private func lockedRendezvous(_ id: [UInt8]) throws -> PGResult {
        let row = try connection.execute(
            """
            SELECT offer, answer, payload, taken, expires < now() FROM kcfs_sync.rendezvous
            WHERE id = $1 FOR UPDATE
            """, [.bytes(id)])
        guard row.rowCount == 1 else { throw SyncServerError.rendezvousUnknown }
        if try row.bool(0, 4) { throw SyncServerError.rendezvousExpired }
        return row
    }

    /// Answers the offer under `id` and returns the offer. Refused when the id is unknown
    /// (`.rendezvousUnknown`), expired (`.rendezvousExpired`) or answered already
    /// (`.rendezvousUsed`).
    public func rendezvousAnswer(id: [UInt8], answer: [UInt8]) throws(SyncServerError) -> [UInt8] {
        try Self.require(id, count: 32, "a rendezvous id")
        return try run {
            try connection.transaction {
                let row = try lockedRendezvous(id)
                if try !row.isNull(0, 1) || row.bool(0, 3) { throw SyncServerError.rendezvousUsed }
                try connection.execute(
                    "UPDATE kcfs_sync.rendezvous SET answer = $2 WHERE id = $1", [.bytes(id), .bytes(answer)])
                try connection.execute("SELECT pg_notify($1, '')", [.text(Self.channel(rendezvous: id))])
                return try row.bytes(0, 0)
            }
        }
    }

    /// Leaves `payload` for the answering device. Refused when unknown, expired, not answered
    /// yet (`.rendezvousNotAnswered`), or delivered already (`.rendezvousUsed`).
    public func rendezvousDeliver(id: [UInt8], payload: [UInt8]) throws(SyncServerError) {
        try Self.require(id, count: 32, "a rendezvous id")
        try run {
            try connection.transaction {
                let row = try lockedRendezvous(id)
                if row.isNull(0, 1) { throw SyncServerError.rendezvousNotAnswered }
                if try !row.isNull(0, 2) || row.bool(0, 3) { throw SyncServerError.rendezvousUsed }
                try connection.execute(
                    "UPDATE kcfs_sync.rendezvous SET payload = $2 WHERE id = $1", [.bytes(id), .bytes(payload)])
                try connection.execute("SELECT pg_notify($1, '')", [.text(Self.channel(rendezvous: id))])
            }
        }
    }

    /// The answer and the payload so far (nil while absent). Refused when unknown, expired, or
    /// taken (`.rendezvousUsed`: the pairing is over and its bytes are gone).
    public func rendezvousPoll(id: [UInt8]) throws(SyncServerError) -> (answer: [UInt8]?, payload: [UInt8]?) {
        try Self.require(id, count: 32, "a rendezvous id")
        return try run {
            let row = try connection.execute(
                "SELECT answer, payload, expires < now(), taken FROM kcfs_sync.rendezvous WHERE id = $1",
                [.bytes(id)])
            guard row.rowCount == 1 else { throw SyncServerError.rendezvousUnknown }
            if try row.bool(0, 2) { throw SyncServerError.rendezvousExpired }
            if try row.bool(0, 3) { throw SyncServerError.rendezvousUsed }
            return (
                answer: row.isNull(0, 0) ? nil : try row.bytes(0, 0),
                payload: row.isNull(0, 1) ? nil : try row.bytes(0, 1)
            )
        }
    }

    /// Returns the payload once and marks the rendezvous used (its bytes are dropped); nil while
    /// none was delivered. A second take is `.rendezvousUsed`.
    public func rendezvousTake(id: [UInt8]) throws(SyncServerError) -> [UInt8]? {
        try Self.require(id, count: 32, "a rendezvous id")
        return try run {
            try connection.transaction {
                let row = try lockedRendezvous(id)
                if try row.bool(0, 3) { throw SyncServerError.rendezvousUsed }
                if row.isNull(0, 2) { return nil }
                try connection.execute(
                    "UPDATE kcfs_sync.rendezvous SET taken = true, offer = '', payload = '', answer = '' WHERE id = $1",
                    [.bytes(id)])
                return try row.bytes(0, 2)
            }
        }
    }

    /// LISTENs for the answer and the delivery of rendezvous `id`: `waitForChange` then wakes
    /// when either is written (poll after it to read them).
    public func rendezvousListen(id: [UInt8]) throws(SyncServerError) {
        try Self.require(id, count: 32, "a rendezvous id")
        try run { try connection.listen(Self.channel(rendezvous: id)) }
    }
}
