/// App environments that do not verify the certificate of Apple's servers (`verifyServer:
/// false`): a gauge per app environment, for an alert (`ApnWorkerInsecureTLS`). The warnings
/// are logged at start (``PushConfiguration/WorkerConfiguration/warnings``) and each time a pool
/// opens (``DeliveryStage``).
extension Worker {
    /// Sets `apn_worker_insecure_tls` for every app environment: 1 where Apple's certificate
    /// is not verified, 0 elsewhere.
    func exportInsecureTLS() {
        for (key, pool) in pools {
            control.metrics.set(
                MetricCatalogue.insecureTLS,
                [key.app, key.environment.rawValue],
                to: pool.transport.verifiesServer ? 0 : 1
            )
        }
    }
}
