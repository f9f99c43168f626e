import PushStatus

extension WorkerStatus {
    /// A worker that is not ready, with an assigned partition whose lag is not known yet and
    /// one pool of each transport.
    static let sample = WorkerStatus(
        worker: "worker-1",
        group: "apn-workers",
        uptimeSeconds: 3723.5,
        ready: false,
        readyReason: "redis unreachable",
        inFlight: 12,
        redis: .init(state: .down),
        partitions: [
            .init(topic: "apn.requests", partition: 1, lag: nil), .init(topic: "apn.requests", partition: 0, lag: 12),
        ],
        pools: [
            .init(
                app: "com.example.app",
                env: "production",
                transport: "binary",
                open: 2,
                connecting: 0,
                backingOff: 1,
                cachedNotifications: 17,
                cachedBytes: 4210,
                state: "delivering",
                held: 17,
                parked: 0,
                movedAside: 0
            ),
            .init(
                app: "com.example.app",
                env: "sandbox",
                transport: "http2",
                open: 1,
                connecting: 1,
                backingOff: 0,
                streamsInUse: 3,
                state: "unreachable",
                held: 3100,
                parked: 900,
                movedAside: 2000
            ),
        ]
    )
}
