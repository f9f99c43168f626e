import PushStatus
import Testing

@Suite("MetricSamples")
struct MetricSamplesTests {
    @Test("Reads samples with and without labels, skips comments, and sums series by their labels")
    func readsAndSums() {
        let text = """
            # HELP apn_worker_results_produced_total Result messages produced.
            # TYPE apn_worker_results_produced_total counter
            apn_worker_results_produced_total 42
            apn_worker_notifications_total{app="a",env="production",type="transmitted",status=""} 30
            apn_worker_notifications_total{app="a",env="production",type="transmissionError",status="invalidToken"} 2
            apn_worker_notifications_total{app="b",env="sandbox",type="transmitted",status=""} 10
            apn_worker_delivery_latency_seconds_bucket{app="a",le="0.005"} 1.5e1
            not a sample line
            """
        let samples = MetricSamples(parsing: text)
        #expect(samples.samples.count == 5)
        #expect(samples.total("apn_worker_results_produced_total") == 42)
        #expect(samples.total("apn_worker_notifications_total") == 42)
        #expect(samples.total("apn_worker_notifications_total", ["type": "transmitted"]) == 40)
        #expect(samples.total("apn_worker_notifications_total", ["app": "a", "status": "invalidToken"]) == 2)
        #expect(samples.total("apn_worker_notifications_total", ["status": ""]) == 40)
        #expect(samples.total("apn_worker_delivery_latency_seconds_bucket", ["le": "0.005"]) == 15)
        #expect(samples.total("missing") == 0)
    }
}
