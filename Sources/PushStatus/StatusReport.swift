/// `apn-worker status`'s text: a worker's status for a person.
///
/// ```
/// worker     worker-1
/// group      apn-workers
/// uptime     1h 02m 03s
/// ready      no: redis unreachable
/// in flight  12
/// redis      down
///
/// partitions
/// TOPIC         PARTITION  LAG
/// apn.requests          0   12
/// apn.requests          1    -
///
/// pools
/// APP      ENV         TRANSPORT  OPEN  CONNECTING  BACKING OFF  CACHED  CACHED BYTES  STREAMS
/// com.app  production  binary        2           0            0      17          4210        -
/// ```
///
/// A value not known yet, or one that does not apply to the transport, is `-`.
public enum StatusReport {
    public static func render(_ status: WorkerStatus) -> String {
        var lines: [String] = []
        let ready = status.ready ? "yes" : "no" + (status.readyReason.map { ": \($0)" } ?? "")
        let header: [(String, String)] = [
            ("worker", status.worker), ("group", status.group), ("uptime", uptime(status.uptimeSeconds)),
            ("ready", ready),
            ("in flight", String(status.inFlight)), ("redis", status.redis.state.rawValue),
        ]
        let labelWidth = header.map(\.0.count).max() ?? 0
        for (label, value) in header {
            lines.append(pad(label, labelWidth) + "  " + value)
        }

        lines.append("")
        lines.append("partitions")
        if status.partitions.isEmpty {
            lines.append("(none assigned)")
        } else {
            let partitions = status.partitions.sorted { ($0.topic, $0.partition) < ($1.topic, $1.partition) }
            lines += table(
                columns: [("TOPIC", .left), ("PARTITION", .right), ("LAG", .right)],
                rows: partitions.map { [$0.topic, String($0.partition), optional($0.lag)] }
            )
        }

        lines.append("")
        lines.append("pools")
        if status.pools.isEmpty {
            lines.append("(none)")
        } else {
            lines += table(
                columns: [
                    ("APP", .left), ("ENV", .left), ("TRANSPORT", .left), ("OPEN", .right), ("CONNECTING", .right),
                    ("BACKING OFF", .right), ("CACHED", .right), ("CACHED BYTES", .right), ("STREAMS", .right),
                    ("STATE", .left), ("HELD", .right), ("PARKED", .right), ("MOVED ASIDE", .right),
                ],
                rows: status.pools.map { pool in
                    [
                        pool.app, pool.env, pool.transport, String(pool.open), String(pool.connecting),
                        String(pool.backingOff),
                        optional(pool.cachedNotifications), optional(pool.cachedBytes), optional(pool.streamsInUse),
                        pool.state ?? "-", optional(pool.held), optional(pool.parked), optional(pool.movedAside),
                    ]
                }
            )
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// `42s`, `5m 03s`, `1h 02m 03s`, `3d 04h 05m`.
    public static func uptime(_ seconds: Double) -> String {
        // The worker's answer: a value no uptime has (beyond 10,000 years) reads as 0.
        let total = seconds >= 0 && seconds < 316_000_000_000 ? Int(seconds) : 0
        let days = total / 86_400
        let hours = total % 86_400 / 3_600
        let minutes = total % 3_600 / 60
        let secs = total % 60
        if days > 0 {
            return "\(days)d \(twoDigits(hours))h \(twoDigits(minutes))m"
        }
        if hours > 0 {
            return "\(hours)h \(twoDigits(minutes))m \(twoDigits(secs))s"
        }
        if minutes > 0 {
            return "\(minutes)m \(twoDigits(secs))s"
        }
        return "\(secs)s"
    }

    private enum Alignment {
        case left
        case right
    }

    private static func table(columns: [(String, Alignment)], rows: [[String]]) -> [String] {
        var widths = columns.map(\.0.count)
        for row in rows {
            for (index, cell) in row.enumerated() {
                widths[index] = max(widths[index], cell.count)
            }
        }
        func line(_ cells: [String]) -> String {
            var text = ""
            for (index, cell) in cells.enumerated() {
                if index > 0 {
                    text += "  "
                }
                switch columns[index].1 {
                case .left:
                    // The last column is not padded: no trailing spaces.
                    text += index == cells.count - 1 ? cell : pad(cell, widths[index])
                case .right:
                    text += String(repeating: " ", count: widths[index] - cell.count) + cell
                }
            }
            return text
        }
        return [line(columns.map(\.0))] + rows.map(line)
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text + String(repeating: " ", count: max(width - text.count, 0))
    }

    private static func optional(_ value: Int?) -> String {
        value.map(String.init) ?? "-"
    }

    private static func twoDigits(_ value: Int) -> String {
        value < 10 ? "0\(value)" : String(value)
    }
}
