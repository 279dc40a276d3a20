/// A CSV file that does not parse: the physical line where the problem is and what it is.
/// Messages name lines and fields by number only, never their contents (a field may be a
/// password).
public struct CSVError: Error, Equatable, Sendable, CustomStringConvertible {
    public let line: Int
    public let message: String
    public init(line: Int, _ message: String) {
        self.line = line
        self.message = message
    }
    public var description: String { "line \(line): \(message)" }
}

/// RFC 4180 CSV, as password managers export it: fields separated by commas, records by CRLF
/// or LF (a lone CR too), a field in double quotes may hold commas, quotes (doubled) and line
/// breaks; a UTF-8 byte order mark at the start is skipped. Strict where a lenient reader
/// would guess: a quote inside an unquoted field, text after a closing quote, a quoted field
/// never closed, and bytes that are not UTF-8 are errors, so a damaged export is refused
/// rather than imported with shifted columns.
public enum CSV {
    /// One record and the physical line (1-based) it starts on.
    public struct Record: Equatable, Sendable {
        public var line: Int
        public var fields: [String]
        public init(line: Int, fields: [String]) {
            self.line = line
            self.fields = fields
        }
    }

    private enum State {
        case fieldStart, unquoted, quoted, quoteInQuoted
    }

    /// Parses every record. Blank lines are skipped.
    public static func parse(_ bytes: [UInt8]) throws(CSVError) -> [Record] {
        let quote = UInt8(ascii: "\""), comma = UInt8(ascii: ","), lf = UInt8(ascii: "\n"), cr = UInt8(ascii: "\r")
        var records: [Record] = []
        var fields: [String] = []
        var field: [UInt8] = []
        var state = State.fieldStart
        var line = 1
        var recordLine = 1
        var quoteLine = 1
        var index = bytes.starts(with: [0xEF, 0xBB, 0xBF]) ? 3 : 0

        func endField() throws(CSVError) {
            guard let text = String(validating: field, as: UTF8.self) else {
                throw CSVError(line: recordLine, "field \(fields.count + 1) is not valid UTF-8")
            }
            fields.append(text)
            field.removeAll(keepingCapacity: true)
        }
        func endRecord() {
            if !(fields.count == 1 && fields[0].isEmpty) {
                records.append(Record(line: recordLine, fields: fields))
            }
            fields.removeAll()
        }
        /// A line break at `index` (CRLF counts once); moves past it.
        func lineBreak() {
            if bytes[index] == cr && index + 1 < bytes.count && bytes[index + 1] == lf { index += 1 }
            line += 1
        }

        while index < bytes.count {
            let byte = bytes[index]
            switch state {
            case .fieldStart, .unquoted:
                if state == .fieldStart && fields.isEmpty { recordLine = line }
                if byte == quote {
                    guard state == .fieldStart else {
                        throw CSVError(
                            line: line,
                            "field \(fields.count + 1) has a quote but does not start with one (a field holding quotes must be quoted, its quotes doubled)"
                        )
                    }
                    state = .quoted
                    quoteLine = line
                } else if byte == comma {
                    try endField()
                    state = .fieldStart
                } else if byte == lf || byte == cr {
                    try endField()
                    endRecord()
                    lineBreak()
                    state = .fieldStart
                } else {
                    field.append(byte)
                    state = .unquoted
                }
            case .quoted:
                if byte == quote {
                    state = .quoteInQuoted
                } else {
                    field.append(byte)
                    if byte == lf || (byte == cr && !(index + 1 < bytes.count && bytes[index + 1] == lf)) { line += 1 }
                }
            case .quoteInQuoted:
                if byte == quote {
                    field.append(quote)
                    state = .quoted
                } else if byte == comma {
                    try endField()
                    state = .fieldStart
                } else if byte == lf || byte == cr {
                    try endField()
                    endRecord()
                    lineBreak()
                    state = .fieldStart
                } else {
                    throw CSVError(line: line, "field \(fields.count + 1) has text after its closing quote")
                }
            }
            index += 1
        }
        switch state {
        case .quoted:
            throw CSVError(
                line: quoteLine,
                "field \(fields.count + 1) opens a quote that is never closed (the file ends inside it)")
        case .fieldStart where fields.isEmpty:
            break
        default:
            try endField()
            endRecord()
        }
        return records
    }

    /// The RFC 4180 spelling of `records`: a field is quoted when it holds a comma, quote, CR
    /// or LF, starts with a byte order mark (which a reader would skip at the start of a
    /// file), or is the only and empty field of its record (a blank line), or when `quoteAll`;
    /// its quotes doubled; records end with CRLF.
    public static func write(_ records: [[String]], quoteAll: Bool = false) -> String {
        records.map { record in
            record.map { field in
                let needsQuotes =
                    quoteAll || (field.isEmpty && record.count == 1) || field.hasPrefix("\u{FEFF}")
                    || field.contains { $0 == "," || $0 == "\"" || $0 == "\r" || $0 == "\n" || $0 == "\r\n" }
                return needsQuotes ? "\"" + field.replacing("\"", with: "\"\"") + "\"" : field
            }.joined(separator: ",") + "\r\n"
        }.joined()
    }
}
