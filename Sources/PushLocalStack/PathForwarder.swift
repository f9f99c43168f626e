import NIOCore
import NIOPosix
import Synchronization

/// How a worker's path is cut (``LocalStack/cut(_:from:_:)``).
public enum PathCut: String, Sendable, CaseIterable {
    /// Packets vanish: the path's open connections carry nothing either way, and new ones are
    /// accepted but never answered, until the path heals; then what was held flows again, as
    /// TCP delivers it once a link is back.
    case drop
    /// The path's open connections are reset (RST) and new ones refused, until it heals.
    case reject
}

/// One path of a worker to servers of this machine: inside the worker's network namespace, a
/// listener on 127.0.0.1 at each of `ports`; each connection accepted there is joined to a
/// connection to the same port of 127.0.0.1 outside, and bytes are copied both ways with
/// backpressure (a side is read only while the other can take what is read) — unless the path
/// is cut (``cut(_:)``, ``heal()``).
final class PathForwarder: Sendable {
    let namespace: NetworkNamespace
    let ports: [Int]
    private let group: any EventLoopGroup

    private struct State {
        var cut: PathCut?
        var listeners: [any Channel] = []
        /// Every connection accepted in the namespace and still open.
        var accepted: [ObjectIdentifier: any Channel] = [:]
        var closed = false
    }

    private let state = Mutex(State())

    init(
        namespace: NetworkNamespace,
        ports: [Int],
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    )
        async throws
    {
        self.namespace = namespace
        self.ports = ports
        self.group = group
        try await listen()
    }

    /// Cuts the path: every connection of it, open or new, is held (`drop`) or reset and
    /// refused (`reject`).
    func cut(_ how: PathCut) async throws {
        let (listeners, accepted) = state.withLock { state in
            state.cut = how
            return (how == .reject ? state.listeners : [], Array(state.accepted.values))
        }
        for listener in listeners { try? await listener.close() }
        for channel in accepted {
            switch how {
            case .drop: channel.eventLoop.execute { Self.relay(of: channel)?.pause() }
            case .reject: Self.reset(channel)
            }
        }
    }

    /// Heals the path: the listeners again after a reject; after a drop, what was held flows
    /// and the connections accepted meanwhile are joined to their servers.
    func heal() async throws {
        let (was, accepted) = state.withLock { state in
            defer { state.cut = nil }
            return (state.cut, Array(state.accepted.values))
        }
        switch was {
        case .reject?:
            try await listen()
        case .drop?:
            for channel in accepted {
                channel.eventLoop.execute { [self] in
                    guard let relay = Self.relay(of: channel) else { return }
                    if relay.isJoined {
                        relay.resume()
                    } else if let port = channel.localAddress?.port {
                        join(channel, to: port)
                    }
                }
            }
        case nil:
            break
        }
    }

    /// Closes the listeners and every connection.
    func close() async {
        let (listeners, accepted) = state.withLock { state in
            state.closed = true
            return (state.listeners, Array(state.accepted.values))
        }
        for listener in listeners { try? await listener.close() }
        for channel in accepted { try? await channel.close() }
    }

    private func listen() async throws {
        var listeners: [any Channel] = []
        for port in ports {
            let fd = try namespace.listen(port: port)
            let listener = try await ServerBootstrap(group: group)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelInitializer { [self] channel in accept(channel, port: port) }
                .withBoundSocket(fd).get()
            listeners.append(listener)
        }
        state.withLock { $0.listeners = listeners }
    }

    /// A connection accepted in the namespace: held when the path drops, reset when it rejects,
    /// otherwise joined to its server.
    private func accept(_ channel: any Channel, port: Int) -> EventLoopFuture<Void> {
        let cut: PathCut?? = state.withLock { state in
            guard !state.closed else { return .none }
            state.accepted[ObjectIdentifier(channel)] = channel
            return .some(state.cut)
        }
        guard let cut else { return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel) }
        channel.closeFuture.whenComplete { [self] _ in
            state.withLock { _ = $0.accepted.removeValue(forKey: ObjectIdentifier(channel)) }
        }
        do {
            try channel.pipeline.syncOperations.addHandler(Relay(paused: cut == .drop))
        } catch {
            return channel.eventLoop.makeFailedFuture(error)
        }
        switch cut {
        case .reject?: Self.reset(channel)
        case .drop?: break
        case nil: join(channel, to: port)
        }
        return channel.eventLoop.makeSucceededVoidFuture()
    }

    /// Connects to 127.0.0.1:`port` outside and joins that connection to `channel`'s relay; on
    /// `channel`'s event loop, so that the two relays share it.
    private func join(_ channel: any Channel, to port: Int) {
        ClientBootstrap(group: channel.eventLoop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { server in
                server.eventLoop.makeCompletedFuture {
                    try server.pipeline.syncOperations.addHandler(Relay(paused: false))
                }
            }
            .connect(host: "127.0.0.1", port: port)
            .whenComplete { [self] result in
                switch result {
                case .success(let server):
                    // The accepted side may not be active yet (its registration can finish after
                    // a connect on loopback): it reads, and forwards, once it is.
                    channel.closeFuture.whenComplete { _ in server.close(promise: nil) }
                    guard let inner = Self.relay(of: channel), let outer = Self.relay(of: server) else {
                        server.close(promise: nil)
                        return
                    }
                    // As the path is now: it may have been cut or healed while connecting.
                    inner.join(outer, paused: state.withLock { $0.cut == .drop })
                case .failure:
                    Self.reset(channel)
                }
            }
    }

    private static func relay(of channel: any Channel) -> Relay? {
        channel.eventLoop.assertInEventLoop()
        return try? channel.pipeline.syncOperations.handler(type: Relay.self)
    }

    /// Closes `channel` with a reset (SO_LINGER 0) instead of a FIN.
    private static func reset(_ channel: any Channel) {
        guard let socket = channel as? any SocketOptionProvider else {
            channel.close(promise: nil)
            return
        }
        socket.setSoLinger(linger(l_onoff: 1, l_linger: 0)).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// One side of a forwarded connection: what it reads is written to its partner (the other
/// side, on the same event loop). It asks its channel for more only while the partner can take
/// it and it is not paused; what a read already under way brings in after a pause waits until
/// it resumes. Closing either side closes the other.
private final class Relay: ChannelDuplexHandler {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny

    private var context: ChannelHandlerContext?
    private var partner: Relay?
    private var paused: Bool
    private var readRequested = false
    private var held: [NIOAny] = []

    init(paused: Bool) { self.paused = paused }

    var isJoined: Bool { partner != nil }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        partner = nil
    }

    func join(_ other: Relay, paused: Bool) {
        partner = other
        other.partner = self
        if paused {
            pause()
        } else {
            resume()
        }
    }

    /// Both sides stop carrying bytes.
    func pause() {
        paused = true
        partner?.paused = true
    }

    /// Both sides carry bytes again, first what they held.
    func resume() {
        for side in [self, partner].compactMap({ $0 }) {
            side.paused = false
            side.forwardHeld()
        }
        for side in [self, partner].compactMap({ $0 }) { side.readIfWanted() }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if paused || partner == nil {
            held.append(data)
        } else {
            partner?.context?.write(data, promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) { partner?.context?.flush() }

    func channelInactive(context: ChannelHandlerContext) {
        partner?.context?.close(promise: nil)
        partner = nil
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { partner?.readIfWanted() }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        readRequested = true
        readIfWanted()
    }

    private func forwardHeld() {
        guard !held.isEmpty, let target = partner?.context else { return }
        for data in held { target.write(data, promise: nil) }
        target.flush()
        held = []
    }

    private func readIfWanted() {
        guard readRequested, !paused, let context, partner?.context?.channel.isWritable == true else { return }
        readRequested = false
        context.read()
    }
}
