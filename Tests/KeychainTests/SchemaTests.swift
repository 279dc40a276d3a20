import Keychain
import Testing

@Suite("Schema")
struct SchemaTests {
    @Test(
        "primary keys are the reference's, plus agrp and sync",
        arguments: [
            (ItemClass.genericPassword, ["agrp", "sync", "svce", "acct"]),
            (.internetPassword, ["agrp", "sync", "srvr", "acct", "ptcl", "port", "path", "sdmn", "atyp"]),
            (.certificate, ["agrp", "sync", "ctyp", "issr", "slnr"]),
            (.key, ["agrp", "sync", "kcls", "klbl", "atag", "type", "bsiz", "esiz", "crtr", "sdat", "edat"]),
            (.identity, []),
        ])
    func primaryKeys(_ itemClass: ItemClass, _ codes: [String]) {
        #expect(Set(Schema.primaryKey(of: itemClass).map(\.code)) == Set(codes))
        #expect(Schema.primaryKey(of: itemClass).count == codes.count)
        for attribute in Schema.primaryKey(of: itemClass) {
            #expect(Schema.isPrimaryKey(attribute, in: itemClass))
            #expect(Schema.belongs(attribute, to: itemClass))
        }
    }

    @Test("class attribute sets follow the reference")
    func classAttributes() {
        let genp = Set(Schema.attributes(of: .genericPassword).map(\.code))
        let inet = Set(Schema.attributes(of: .internetPassword).map(\.code))
        for code in [
            "labl", "desc", "icmt", "gena", "crtr", "type", "invi", "nega", "pdmn", "accc", "cdat", "mdat", "svce",
            "acct",
        ] {
            #expect(genp.contains(code), "genp has \(code)")
        }
        #expect(inet == genp.subtracting(["svce", "gena"]).union(["srvr", "ptcl", "port", "path", "sdmn", "atyp"]))
        let cert = Set(Schema.attributes(of: .certificate).map(\.code))
        for code in ["labl", "subj", "skid", "pkhh", "cenc"] { #expect(cert.contains(code)) }
        for code in ["subj", "skid", "pkhh", "cenc", "issr", "slnr", "ctyp"] {
            #expect(
                Schema.attributes(of: .certificate).first { $0.code == code }?.access == .derived, "\(code) is derived")
        }
        #expect(Schema.creationDate.access == .system && Schema.modificationDate.access == .system)
        #expect(Schema.label.access == .readWrite)
    }

    @Test("lookup by name or code, within the class")
    func lookup() throws {
        #expect(try Schema.attribute(named: "svce", in: .genericPassword) == Schema.service)
        #expect(try Schema.attribute(named: "Service", in: .genericPassword) == Schema.service)
        #expect(try Schema.attribute(named: "type", in: .genericPassword).name == "type")
        #expect(try Schema.attribute(named: "type", in: .key).name == "keyType")
        #expect(try Schema.attribute(named: "ptcl", in: .internetPassword) == Schema.protocolAttribute)
        expectError(.noSuchAttr, containing: ["does not belong"]) {
            try Schema.attribute(named: "service", in: .internetPassword)
        }
        expectError(.noSuchAttr, containing: ["unknown"]) { try Schema.attribute(named: "bogus", in: .genericPassword) }
        expectError(.noSuchAttr) { try Schema.attribute(named: "class", in: .genericPassword) }
        #expect(!Schema.belongs(Schema.itemClassPseudoAttribute, to: .genericPassword))
    }
}
