/// Which connections the status server takes, as a pure value: the server keeps it under a lock,
/// asks it on every accept and tells it of every close.
///
/// Invariant: `general` is the sum of `perPeer`'s counts, and never exceeds `generalLimit`;
/// no peer holds more than `perPeerLimit` general slots; `reserve` never exceeds `reserveLimit`.
///
/// - **General slots** (``StatusServer/Configuration/maximumConnections``) serve every path, with
///   keep-alive. A peer (one IP address) holds at most
///   ``StatusServer/Configuration/maximumConnectionsPerPeer`` of them.
/// - **The reserve** (``StatusServer/Configuration/reservedProbeConnections``) takes a connection
///   the general slots cannot: all taken, or its peer already holds its share. A connection in
///   the reserve is answered once and closed: `/health/live` and `/health/ready` as usual, any
///   other request with `503`. The reserve is open to every peer, so that a probe from an address
///   that also scrapes (a Prometheus on the node's network) is answered too.
/// - A connection neither can take is closed at once.
struct StatusAdmission: Sendable {
    /// Where an accepted connection was admitted.
    enum Slot: Sendable, Hashable {
        /// Serves every path, with keep-alive.
        case general
        /// Answers one probe (`/health/live`, `/health/ready`) and closes; `503` for other paths.
        case reserve
    }

    let generalLimit: Int
    let reserveLimit: Int
    let perPeerLimit: Int
    private(set) var general = 0
    private(set) var reserve = 0
    /// General slots held per peer address; a peer without one has no entry.
    private(set) var perPeer: [String: Int] = [:]

    init(generalLimit: Int, reserveLimit: Int, perPeerLimit: Int) {
        precondition(generalLimit > 0, "the status server needs at least one general connection slot")
        precondition(reserveLimit >= 0, "the status server's probe reserve cannot be negative")
        precondition(perPeerLimit > 0, "the status server needs at least one connection slot per peer")
        self.generalLimit = generalLimit
        self.reserveLimit = reserveLimit
        self.perPeerLimit = perPeerLimit
    }

    /// Takes a slot for a connection from `peer` (its IP address): a general one if one is free and
    /// the peer holds fewer than its share, else one of the reserve, else none (close it).
    mutating func admit(peer: String) -> Slot? {
        let held = perPeer[peer, default: 0]
        if general < generalLimit && held < perPeerLimit {
            general += 1
            perPeer[peer] = held + 1
            return .general
        }
        if reserve < reserveLimit {
            reserve += 1
            return .reserve
        }
        return nil
    }

    /// Gives back the slot `admit(peer:)` returned for a connection from `peer`, once it has closed.
    mutating func release(_ slot: Slot, peer: String) {
        switch slot {
        case .general:
            guard let held = perPeer[peer], held > 0, general > 0 else {
                preconditionFailure("released a general slot that \(peer) does not hold")
            }
            general -= 1
            perPeer[peer] = held == 1 ? nil : held - 1
        case .reserve:
            precondition(reserve > 0, "released a reserve slot that is not held")
            reserve -= 1
        }
    }
}
