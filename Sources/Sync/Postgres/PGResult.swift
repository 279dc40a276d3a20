import CPQ

/// The rows of one statement, copied out of libpq's PGresult (which is freed at once), so a
/// result is a plain value that outlives its connection. Cells come in text format; `bytea`
/// columns are decoded from PostgreSQL's hex output (`\x…`) here, once.
public struct PGResult: Sendable {
    /// Column names, in order.
    public let columns: [String]
    /// Column type OIDs (17 is bytea, 20 int8, 16 bool, 25 text).
    public let columnTypes: [UInt32]
    public let rowCount: Int
    /// Rows a command touched (INSERT, UPDATE, DELETE, SELECT), from PQcmdTuples; 0 when none.
    public let affectedRows: Int
    /// Row-major cells; nil is SQL NULL. A bytea cell holds its decoded bytes, others their text.
    private let cells: [[UInt8]?]

    init(_ result: OpaquePointer) throws(PGError) {
        let rows = Int(kcfs_PQntuples(result)), cols = Int(kcfs_PQnfields(result))
        var names: [String] = [], types: [UInt32] = []
        for c in 0..<cols {
            names.append(kcfs_PQfname(result, Int32(c)).map { String(cString: $0) } ?? "")
            types.append(UInt32(kcfs_PQftype(result, Int32(c))))
        }
        var cells: [[UInt8]?] = []
        cells.reserveCapacity(rows * cols)
        for r in 0..<rows {
            for c in 0..<cols {
                if kcfs_PQgetisnull(result, Int32(r), Int32(c)) != 0 {
                    cells.append(nil)
                    continue
                }
                let length = Int(kcfs_PQgetlength(result, Int32(r), Int32(c)))
                let raw = UnsafeRawBufferPointer(start: kcfs_PQgetvalue(result, Int32(r), Int32(c)), count: length)
                if types[c] == 17 {
                    cells.append(try Self.decodeHex(raw, row: r, column: names[c]))
                } else {
                    cells.append(Array(raw))
                }
            }
        }
        columns = names
        columnTypes = types
        rowCount = rows
        affectedRows = kcfs_PQcmdTuples(result).flatMap { Int(String(cString: $0)) } ?? 0
        self.cells = cells
    }

    /// PostgreSQL's bytea hex output: `\x` then two lowercase hex digits per byte.
    private static func decodeHex(_ raw: UnsafeRawBufferPointer, row: Int, column: String) throws(PGError) -> [UInt8] {
        guard raw.count >= 2, raw[0] == UInt8(ascii: "\\"), raw[1] == UInt8(ascii: "x"), raw.count % 2 == 0 else {
            throw .decode("bytea column \(column) of row \(row) is not in hex format")
        }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        let count = (raw.count - 2) / 2
        var bad = false
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            for i in 0..<count {
                guard let high = nibble(raw[2 + 2 * i]), let low = nibble(raw[3 + 2 * i]) else {
                    bad = true
                    break
                }
                buffer[i] = high << 4 | low
                initialized = i + 1
            }
        }
        if bad { throw .decode("bytea column \(column) of row \(row) holds a non-hex digit") }
        return bytes
    }

    /// The index of the column called `name`.
    public func column(named name: String) -> Int? { columns.firstIndex(of: name) }

    public func isNull(_ row: Int, _ column: Int) -> Bool { cell(row, column) == nil }

    private func cell(_ row: Int, _ column: Int) -> [UInt8]? {
        precondition(row >= 0 && row < rowCount && column >= 0 && column < columns.count, "no such cell")
        return cells[row * columns.count + column]
    }

    private func present(_ row: Int, _ column: Int) throws(PGError) -> [UInt8] {
        guard let value = cell(row, column) else {
            throw .decode("column \(columns[column]) of row \(row) is NULL")
        }
        return value
    }

    public func string(_ row: Int, _ column: Int) throws(PGError) -> String {
        String(decoding: try present(row, column), as: UTF8.self)
    }

    /// A bytea cell's bytes (any other column: its text's UTF-8 bytes).
    public func bytes(_ row: Int, _ column: Int) throws(PGError) -> [UInt8] { try present(row, column) }

    public func int64(_ row: Int, _ column: Int) throws(PGError) -> Int64 {
        let text = try string(row, column)
        guard let value = Int64(text) else { throw .decode("column \(columns[column]) is not an integer") }
        return value
    }

    public func double(_ row: Int, _ column: Int) throws(PGError) -> Double {
        let text = try string(row, column)
        guard let value = Double(text) else { throw .decode("column \(columns[column]) is not a number") }
        return value
    }

    public func bool(_ row: Int, _ column: Int) throws(PGError) -> Bool {
        switch try string(row, column) {
        case "t": return true
        case "f": return false
        default: throw .decode("column \(columns[column]) is not a boolean")
        }
    }
}
