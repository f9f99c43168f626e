import Foundation
import PushStatus
import Testing

@Suite("StatusReport and WorkerStatus")
struct StatusReportTests {
    @Test func rendersAHeaderAndTablesOfPartitionsAndPools() {
        let text = StatusReport.render(WorkerStatus.sample)
        let expected = """
            worker     worker-1
            group      apn-workers
            uptime     1h 02m 03s
            ready      no: redis unreachable
            in flight  12
            redis      down

            partitions
            TOPIC         PARTITION  LAG
            apn.requests          0   12
            apn.requests          1    -

            pools
            APP              ENV         TRANSPORT  OPEN  CONNECTING  BACKING OFF  CACHED  CACHED BYTES  STREAMS  STATE        HELD  PARKED  MOVED ASIDE
            com.example.app  production  binary        2           0            1      17          4210        -  delivering     17       0            0
            com.example.app  sandbox     http2         1           1            0       -             -        3  unreachable  3100     900         2000

            """
        #expect(text == expected)
    }

    @Test func rendersAReadyWorkerWithNothingAssigned() {
        let status = WorkerStatus(
            worker: "w",
            group: "g",
            uptimeSeconds: 4.9,
            ready: true,
            inFlight: 0,
            redis: .init(state: .up)
        )
        let text = StatusReport.render(status)
        #expect(text.contains("ready      yes\n"))
        #expect(text.contains("redis      up\n"))
        #expect(text.contains("uptime     4s\n"))
        #expect(text.contains("partitions\n(none assigned)\n"))
        #expect(text.contains("pools\n(none)\n"))
    }

    @Test func uptimeIsWrittenForAPerson() {
        #expect(StatusReport.uptime(0) == "0s")
        #expect(StatusReport.uptime(59.9) == "59s")
        #expect(StatusReport.uptime(303) == "5m 03s")
        #expect(StatusReport.uptime(3723) == "1h 02m 03s")
        #expect(StatusReport.uptime(3 * 86_400 + 4 * 3_600 + 5 * 60 + 6) == "3d 04h 05m")
        #expect(StatusReport.uptime(-1) == "0s")
        #expect(StatusReport.uptime(.nan) == "0s")
    }

    @Test func workerStatusWritesNullsAndReadsMissingKeysAsNull() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let status = WorkerStatus(
            worker: "w",
            group: "g",
            uptimeSeconds: 1.5,
            ready: true,
            inFlight: 0,
            redis: .init(state: .up),
            partitions: [.init(topic: "t", partition: 0)],
            pools: [
                .init(
                    app: "a",
                    env: "sandbox",
                    transport: "http2",
                    open: 1,
                    connecting: 0,
                    backingOff: 0,
                    streamsInUse: 2
                )
            ]
        )
        let json = String(decoding: try encoder.encode(status), as: UTF8.self)
        #expect(
            json
                == #"{"group":"g","inFlight":0,"partitions":[{"lag":null,"partition":0,"topic":"t"}],"pools":[{"app":"a","backingOff":0,"#
                + #""cachedBytes":null,"cachedNotifications":null,"connecting":0,"env":"sandbox","held":null,"#
                + #""movedAside":null,"open":1,"parked":null,"state":null,"streamsInUse":2,"#
                + #""transport":"http2"}],"ready":true,"readyReason":null,"redis":{"state":"up"},"uptimeSeconds":1.5,"worker":"w"}"#
        )
        #expect(try JSONDecoder().decode(WorkerStatus.self, from: Data(json.utf8)) == status)

        let sparse = #"""
            {"worker":"w","group":"g","uptimeSeconds":1.5,"ready":true,"inFlight":0,"redis":{"state":"up"},
             "partitions":[{"topic":"t","partition":0}],
             "pools":[{"app":"a","env":"sandbox","transport":"http2","open":1,"connecting":0,"backingOff":0,"streamsInUse":2}]}
            """#
        #expect(try JSONDecoder().decode(WorkerStatus.self, from: Data(sparse.utf8)) == status)
    }
}
