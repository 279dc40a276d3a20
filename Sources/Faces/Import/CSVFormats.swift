import FoundationEssentials
import Glibc

/// The CSV exports keychainfs reads, each known by its header line (columns are found by name,
/// case-insensitively, in any order; extra columns are ignored):
///
/// | format | header as the product writes it | used |
/// |---|---|---|
/// | `keepassxc` | `"Group","Title","Username","Password","URL","Notes","TOTP","Icon","Last Modified","Created"` | Title, Username, Password, URL, Notes |
/// | `bitwarden` | `folder,favorite,type,name,notes,fields,reprompt,login_uri,login_username,login_password,login_totp` | type, name, notes, fields, login_uri, login_username, login_password |
/// | `1password` | `Title,Url,Username,Password,OTPAuth,Favorite,Archived,Tags,Notes` | Title, Url, Username, Password, Notes |
/// | `generic` | any, with `--columns` naming the columns | as mapped |
public enum CSVFormat: Sendable {
    case keepassxc
    case bitwarden
    case onePassword
    case generic(ColumnMapping)

    public static let names = ["keepassxc", "bitwarden", "1password", "generic"]

    public var name: String {
        switch self {
        case .keepassxc: "KeePassXC"
        case .bitwarden: "Bitwarden"
        case .onePassword: "1Password"
        case .generic: "generic"
        }
    }

    /// Each column the format reads: its field, the header names it goes by (first: the
    /// product's spelling), and whether the header must have it.
    var columns: [(field: ColumnMapping.Field, names: [String], required: Bool)] {
        switch self {
        case .keepassxc:
            [
                (.title, ["Title"], true), (.account, ["Username"], true), (.password, ["Password"], true),
                (.url, ["URL"], true), (.notes, ["Notes"], false), (.totp, ["TOTP"], false),
            ]
        case .bitwarden:
            [
                (.type, ["type"], true), (.title, ["name"], true), (.account, ["login_username"], true),
                (.password, ["login_password"], true), (.url, ["login_uri"], true), (.notes, ["notes"], false),
                (.fields, ["fields"], false), (.totp, ["login_totp"], false),
            ]
        case .onePassword:
            [
                (.title, ["Title"], true), (.account, ["Username"], true), (.password, ["Password"], true),
                (.url, ["Url", "URL", "Website"], true), (.notes, ["Notes"], false), (.totp, ["OTPAuth"], false),
            ]
        case .generic(let mapping):
            mapping.columns.map { ($0.field, [$0.column], true) }
        }
    }

    /// Every record of the file, checked in full before anything is stored: the header must
    /// have the format's columns, every row as many fields as the header.
    public func records(_ bytes: [UInt8]) throws(ImportError) -> [ImportRecord] {
        let rows: [CSV.Record]
        do { rows = try CSV.parse(bytes) } catch { throw ImportError("not a valid CSV file: \(error)") }
        guard let header = rows.first else { throw ImportError("the file is empty: no header line") }
        let normalized = header.fields.map { $0.trimmingWhitespace().lowercased() }
        var index: [ColumnMapping.Field: Int] = [:]
        var missing: [String] = []
        for column in columns {
            if let at = column.names.lazy.compactMap({ normalized.firstIndex(of: $0.lowercased()) }).first {
                index[column.field] = at
            } else if column.required {
                missing.append(column.names[0])
            }
        }
        // The header is never repeated: a file without one has a record, perhaps a password, there.
        guard missing.isEmpty else {
            throw ImportError(
                "line \(header.line): not a \(name) CSV export: the header line has no column "
                    + missing.joined(separator: ", "))
        }
        var out: [ImportRecord] = []
        for row in rows.dropFirst() {
            guard row.fields.count == header.fields.count else {
                throw ImportError(
                    "line \(row.line): the record has \(row.fields.count) fields where the header has \(header.fields.count)"
                )
            }
            func value(_ field: ColumnMapping.Field) -> String { index[field].map { row.fields[$0] } ?? "" }
            var record = ImportRecord(
                origin: "line \(row.line)", title: value(.title), account: value(.account),
                password: Array(value(.password).utf8), url: value(.url), notes: value(.notes))
            if case .bitwarden = self {
                // Bitwarden keeps custom fields as `name: value` lines in their own column; a
                // login can list several URIs, comma-separated: the first is the item's.
                let fields = value(.fields)
                if !fields.isEmpty { record.notes += (record.notes.isEmpty ? "" : "\n") + fields }
                record.url =
                    record.url.split(whereSeparator: { $0 == "," || $0 == "\n" }).first.map {
                        $0.trimmingWhitespace()
                    } ?? ""
                let type = value(.type)
                if type != "login" {
                    record.skipReason = "a Bitwarden \(type.isEmpty ? "untyped" : type) item, not a login"
                }
            }
            if !value(.totp).isEmpty { record.dropped.append("its TOTP seed") }
            if record.title.isEmpty && record.account.isEmpty && record.password.isEmpty && record.url.isEmpty
                && record.notes.isEmpty && record.skipReason == nil
            {
                record.skipReason = "an empty entry"
            }
            out.append(record)
        }
        return out
    }
}

/// `--columns title=Name,account=Login,password=Secret,url=Site,notes=Comment`: which column of
/// a generic CSV holds each field. `password` is required, and `title` or `url`; `service` is
/// another name for `title`.
public struct ColumnMapping: Sendable {
    public enum Field: String, Sendable, Hashable, CaseIterable {
        case title, account, password, url, notes
        // Read from the product formats only.
        case type, fields, totp
    }

    public var columns: [(field: Field, column: String)]

    public init(parsing text: String) throws(ImportError) {
        let usable: [Field] = [.title, .account, .password, .url, .notes]
        columns = []
        for pair in text.split(separator: ",", omittingEmptySubsequences: true) {
            guard let equals = pair.firstIndex(of: "=") else {
                throw ImportError("--columns: '\(pair)' is not FIELD=COLUMN")
            }
            let key = pair[..<equals].trimmingWhitespace().lowercased()
            let column = pair[pair.index(after: equals)...].trimmingWhitespace()
            guard let field = key == "service" ? .title : Field(rawValue: key), usable.contains(field) else {
                throw ImportError(
                    "--columns: unknown field '\(key)'; expected title (or service), account, password, url, notes")
            }
            guard !column.isEmpty else { throw ImportError("--columns: \(key) names no column") }
            guard !columns.contains(where: { $0.field == field }) else {
                throw ImportError("--columns: \(key) is given twice")
            }
            columns.append((field, column))
        }
        guard columns.contains(where: { $0.field == .password }) else {
            throw ImportError("--columns: password=COLUMN is required")
        }
        guard columns.contains(where: { $0.field == .title || $0.field == .url }) else {
            throw ImportError("--columns: title=COLUMN or url=COLUMN is required (to name the items)")
        }
    }
}
