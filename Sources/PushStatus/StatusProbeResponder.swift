import NIOCore
import NIOHTTP1

/// Answers the health probes (`/health/live`, `/health/ready`) on the connection's event loop, as
/// soon as their request has been read; every other request on a general slot goes on to the
/// connection's task. A connection in the probe reserve is answered here whatever it asks (other
/// paths get `503` with `Retry-After`), and closed: a reserve slot is held for one round trip, never
/// for as long as the process's cooperative threads take to start a task, so clients that are
/// turned away and reconnect cannot keep the reserve full.
///
/// A probe's answer then waits for nothing but the event loop: not for the connection's task to
/// be started or scheduled, however busy the process's cooperative threads are with scrapes or
/// the worker's own work. It sits after ``StatusRequestGuard``, so the deadline, the lifetime and
/// the limits apply to it, and after NIO's `HTTPServerPipelineHandler`, which hands on one
/// request at a time: when a probe's request arrives, every earlier answer on the connection has
/// been written, so answers stay in order. The provider's checks are synchronous and cheap
/// (``StatusProvider``), which is what makes answering on the event loop safe.
///
/// A connection in the probe reserve is closed after its answer, as is one whose request did not
/// ask to be kept alive.
final class StatusProbeResponder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let routes: StatusRoutes
    private let slot: StatusAdmission.Slot
    /// The request being read that is answered here, a probe or any request in the reserve (its
    /// body, if any, is dropped).
    private var probe: HTTPRequestHead?
    /// An answer said `Connection: close`: what the client sends after it is dropped.
    private var closing = false

    init(routes: StatusRoutes, slot: StatusAdmission.Slot) {
        self.routes = routes
        self.slot = slot
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closing else { return }
        switch unwrapInboundIn(data) {
        case .head(let head):
            guard slot == .reserve || StatusRoutes.isProbe(head) else { break }
            probe = head
            return
        case .body:
            guard probe == nil else { return }
        case .end:
            guard let head = probe else { break }
            probe = nil
            answer(head, context: context)
            return
        }
        context.fireChannelRead(data)
    }

    private func answer(_ request: HTTPRequestHead, context: ChannelHandlerContext) {
        let keepAlive = request.isKeepAlive && slot == .general
        closing = !keepAlive
        let response = StatusRoutes.isProbe(request) ? routes.response(to: request) : StatusResponse.reserveRefusal
        let parts = response.parts(for: request, keepAlive: keepAlive)
        for part in parts.dropLast() {
            context.write(wrapOutboundOut(part), promise: nil)
        }
        let written = context.writeAndFlush(wrapOutboundOut(parts[parts.count - 1]))
        guard !keepAlive else { return }
        let loopBoundContext = context.loopBound
        written.assumeIsolated().whenComplete { _ in
            loopBoundContext.value.close(promise: nil)
        }
    }
}
