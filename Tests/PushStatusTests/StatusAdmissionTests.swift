import Testing

@testable import PushStatus

@Suite("StatusAdmission: general slots, the probe reserve and the per-peer cap, step by step")
struct StatusAdmissionTests {
    @Test func connectionsFillTheGeneralSlotsThenTheReserveThenAreRefused() {
        var admission = StatusAdmission(generalLimit: 3, reserveLimit: 2, perPeerLimit: 10)
        let peers = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
        let slots = peers.map { admission.admit(peer: $0) }
        #expect(slots == [.general, .general, .general, .reserve, .reserve, nil])
        #expect(admission.general == 3 && admission.reserve == 2)

        // A general slot given back is taken by the next connection, from any peer.
        admission.release(.general, peer: "10.0.0.2")
        #expect(admission.admit(peer: "10.0.0.9") == .general)
        // A reserve slot given back is the reserve's again.
        admission.release(.reserve, peer: "10.0.0.4")
        #expect(admission.admit(peer: "10.0.0.4") == .reserve)
        #expect(admission.admit(peer: "10.0.0.7") == nil)
    }

    @Test func aPeerAtItsShareGoesToTheReserveWhileOthersStillGetGeneralSlots() {
        var admission = StatusAdmission(generalLimit: 8, reserveLimit: 1, perPeerLimit: 2)
        #expect(admission.admit(peer: "10.0.0.1") == .general)
        #expect(admission.admit(peer: "10.0.0.1") == .general)
        // Six general slots are free, but not for this peer.
        #expect(admission.admit(peer: "10.0.0.1") == .reserve)
        #expect(admission.admit(peer: "10.0.0.1") == nil)
        #expect(admission.admit(peer: "10.0.0.2") == .general)
        #expect(admission.perPeer == ["10.0.0.1": 2, "10.0.0.2": 1])

        // Once one of its connections has closed, the peer gets a general slot again.
        admission.release(.general, peer: "10.0.0.1")
        #expect(admission.perPeer["10.0.0.1"] == 1)
        #expect(admission.admit(peer: "10.0.0.1") == .general)
        // A peer that holds nothing has no entry.
        admission.release(.general, peer: "10.0.0.2")
        #expect(admission.perPeer["10.0.0.2"] == nil)
        #expect(admission.general == 2)
    }

    @Test func theReserveIsOpenToAPeerWhoseShareIsTaken() {
        // The kubelet and a scraper on the node's network share one address: its probes must
        // still be answered when the scraper holds the peer's whole share.
        var admission = StatusAdmission(generalLimit: 64, reserveLimit: 2, perPeerLimit: 1)
        #expect(admission.admit(peer: "192.168.1.7") == .general)
        #expect(admission.admit(peer: "192.168.1.7") == .reserve)
        #expect(admission.admit(peer: "192.168.1.7") == .reserve)
        #expect(admission.reserve == 2)
    }

    @Test func withoutAReserveEveryConnectionBeyondTheGeneralSlotsIsRefused() {
        var admission = StatusAdmission(generalLimit: 1, reserveLimit: 0, perPeerLimit: 1)
        #expect(admission.admit(peer: "10.0.0.1") == .general)
        #expect(admission.admit(peer: "10.0.0.2") == nil)
        #expect(admission.admit(peer: "10.0.0.1") == nil)
    }
}
