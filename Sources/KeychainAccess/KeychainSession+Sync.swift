import Keychain

extension KeychainSession {
    /// The sync engine's audit lines (the session of `AccessLayer.serviceSession(…, via: "sync")`):
    /// one `sync-apply` for the records a round applied from the group, and one `sync-refuse`
    /// (a deny, with why) for each pulled record refused. Never a name: a refusal names the
    /// record by the first bytes of its id.
    public func recordSync(applied: Int, refused: [String]) {
        if applied > 0 { record(nil, .syncApply, allowed: true, count: applied) }
        for reason in refused {
            audit?.record(caller, item: nil, .syncRefuse, allowed: false, why: reason, detail: detail(nil, nil))
        }
    }
}
