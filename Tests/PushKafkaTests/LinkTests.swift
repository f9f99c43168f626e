import PushKafka
import PushRedis
import Testing

@Test func librdkafkaIsLinkedAndItsMockClusterStarts() throws {
    #expect(RdKafkaLibrary.version.hasPrefix("2."))
    let bootstrap = try RdKafkaLibrary.probeMockCluster(brokers: 1)
    #expect(bootstrap.hasPrefix("127.0.0.1:") || bootstrap.hasPrefix("localhost:"), "\(bootstrap)")
}

@Test func hiredisIsLinkedAndReportsConnectionErrors() {
    #expect(!HiredisLibrary.version.isEmpty)
    // Port 1 on loopback has no listener: hiredis must say so.
    let error = HiredisLibrary.connectionError(host: "127.0.0.1", port: 1)
    #expect(error?.lowercased().contains("refused") == true, "\(String(describing: error))")
}
