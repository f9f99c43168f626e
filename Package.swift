// swift-tools-version: 6.2
import Foundation
import PackageDescription

let package = Package(
    name: "apn-worker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "apn-worker", targets: ["apn-worker"]),
        .executable(name: "apn-bench", targets: ["apn-bench"]),
        .library(name: "APNSCore", targets: ["APNSCore"]),
        .library(name: "APNSBinary", targets: ["APNSBinary"]),
        .library(name: "APNSSimulator", targets: ["APNSSimulator"]),
        .library(name: "PushWorker", targets: ["PushWorker"]),
        .library(name: "PushConfiguration", targets: ["PushConfiguration"]),
        .library(name: "APNSHTTP2Core", targets: ["APNSHTTP2Core"]),
        .library(name: "APNSHTTP2", targets: ["APNSHTTP2"]),
        .library(name: "PushStatus", targets: ["PushStatus"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "5.0.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms.git", from: "1.1.4"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // MARK: C libraries (one thin layer each)
        .systemLibrary(
            name: "CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        .systemLibrary(
            name: "CHiredis",
            pkgConfig: "hiredis",
            providers: [.apt(["libhiredis-dev"])]
        ),
        // The process's allocator (docs/architecture.md#the-allocator): linked in place of glibc's.
        .systemLibrary(
            name: "CJemalloc",
            pkgConfig: "jemalloc",
            providers: [.apt(["libjemalloc-dev"])]
        ),
        .target(
            name: "PushKafka",
            dependencies: [
                "CRdKafka", .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // librdkafka's mock cluster as an embedded broker, with its fault controls: equipment for
        // the demo, the tests and the benchmarks, kept out of the production module.
        .target(name: "PushKafkaEmbedded", dependencies: ["CRdKafka", "PushKafka"]),
        // Secrets: a URL's user information and its password masked (shared by the Redis URL, the
        // proxy URL and every message that shows one), and files that hold secrets.
        .target(name: "PushSecrets"),
        // The one error shape (a code, a sentence, the underlying error), each module's in a
        // domain of its own.
        .target(name: "PushErrors"),
        .target(
            name: "PushRedis",
            dependencies: [
                "CHiredis", "PushSecrets", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),

        // MARK: APNs
        .target(
            name: "APNSCore",
            dependencies: [
                "PushErrors", "PushSecrets",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        .target(
            name: "APNSBinary",
            dependencies: [
                "APNSCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),
        .target(
            name: "APNSSimulator",
            dependencies: [
                "APNSCore",
                "APNSBinary",
                "APNSHTTP2Core",
                "APNSHTTP2",
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "APNSHTTP2Core",
            dependencies: ["APNSCore", "PushErrors", .product(name: "Crypto", package: "swift-crypto")]
        ),
        .target(
            name: "APNSHTTP2",
            dependencies: [
                "APNSCore",
                "APNSHTTP2Core",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "DequeModule", package: "swift-collections"),
            ]
        ),

        // MARK: The worker
        // `apn-worker run`'s configuration: file (YAML or JSON), environment and flags, validated
        // once into the model the worker runs with.
        .target(
            name: "PushConfiguration",
            dependencies: ["APNSCore", "PushRedis", "PushSecrets", .product(name: "Yams", package: "Yams")]
        ),
        .target(
            name: "PushWorker",
            dependencies: [
                "PushConfiguration",
                "APNSCore",
                "APNSBinary",
                "APNSHTTP2",
                "APNSHTTP2Core",
                "PushKafka",
                "PushRedis",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ]
        ),

        // The status server (`/metrics`, `/health/live`, `/health/ready`, `/status`), the process
        // metrics and the client of `apn-worker status`; `apn-worker run` serves the worker through it.
        .target(
            name: "PushStatus",
            dependencies: [
                "CJemalloc", "PushErrors",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        // The worker's world on one machine (embedded Kafka, redis-server, the simulators, worker
        // processes), started by `apn-worker demo`, the benchmarks and the end-to-end tests.
        // Listening sockets inside another network namespace (setns on a thread of its own): the
        // partition harness's way into a worker's namespace. Equipment, like PushKafkaEmbedded.
        .target(name: "CNetNamespace"),
        .target(
            name: "PushLocalStack",
            dependencies: [
                "APNSBinary",
                "CNetNamespace",
                "APNSCore",
                "APNSHTTP2Core",
                "APNSSimulator",
                "PushKafka", "PushKafkaEmbedded",
                "PushRedis",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),
        // What the two executables share: a failure the user can act on, its exit code, JSON lines,
        // the text log format.
        .target(
            name: "PushCommandLine",
            dependencies: [
                "APNSCore", "PushConfiguration", .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "apn-worker",
            dependencies: [
                "PushWorker",
                "PushConfiguration",
                "APNSCore",
                "APNSBinary",
                "APNSSimulator",
                "APNSHTTP2",
                "APNSHTTP2Core",
                "PushCommandLine",
                "PushKafka", "PushKafkaEmbedded",
                "PushLocalStack",
                "PushRedis",
                "PushSecrets",
                "PushStatus",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ]
        ),

        // The benchmarks (docs/benchmarks.md): they start `apn-worker run` processes, found
        // beside `apn-bench`, on the local stack.
        .executableTarget(
            name: "apn-bench",
            dependencies: [
                "PushWorker",
                "APNSCore",
                "PushCommandLine",
                "PushKafka", "PushKafkaEmbedded",
                "PushLocalStack",
                "PushRedis",
                "PushStatus",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),

        // MARK: Tests
        .testTarget(
            name: "APNSCoreTests",
            dependencies: ["APNSCore", "APNSSimulator", .product(name: "NIOEmbedded", package: "swift-nio")]
        ),
        .testTarget(name: "APNSHTTP2CoreTests", dependencies: ["APNSHTTP2Core", "APNSCore"]),
        .testTarget(name: "PushSecretsTests", dependencies: ["PushSecrets"]),
        .testTarget(
            name: "APNSBinaryTests",
            dependencies: [
                "APNSCore", "APNSBinary", "APNSSimulator", "PushTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "APNSHTTP2Tests",
            dependencies: [
                "APNSCore", "APNSHTTP2", "APNSHTTP2Core", "APNSSimulator", "PushLocalStack", "PushTestSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
        .testTarget(
            name: "PushKafkaTests",
            dependencies: [
                "PushKafka", "PushKafkaEmbedded", "PushTestSupport", .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(
            name: "PushTestSupport",
            dependencies: ["PushLocalStack", "PushRedis", "APNSCore"],
            path: "Tests/PushTestSupport"
        ),
        .testTarget(
            name: "PushRedisTests",
            dependencies: [
                "PushRedis", "PushLocalStack", "PushTestSupport", "APNSSimulator",
                .product(name: "NIOCore", package: "swift-nio"),
            ]
        ),
        .target(
            name: "PushWorkerFuzzing",
            dependencies: [
                "PushWorker", "PushConfiguration", "PushKafka", "PushRedis", "APNSCore", "APNSBinary", "APNSHTTP2",
                "APNSHTTP2Core", .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"), .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/PushWorkerFuzzing"
        ),
        .testTarget(
            name: "PushWorkerTests",
            dependencies: [
                "PushWorker", "PushConfiguration", "APNSCore", "APNSBinary", "APNSSimulator", "PushKafka", "PushRedis",
                "PushLocalStack", "PushTestSupport", "PushWorkerFuzzing", .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .testTarget(
            name: "PushStatusTests",
            dependencies: [
                "PushStatus",
                "PushWorker",
                "PushTestSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ]
        ),
        .testTarget(
            name: "PushConfigurationTests",
            dependencies: [
                "PushConfiguration", "PushCommandLine", "PushTestSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "APNSCore", "APNSBinary", "APNSHTTP2Core", "APNSSimulator", "PushKafka", "PushKafkaEmbedded",
                "PushLocalStack", "PushRedis",
                "PushWorker",
                "PushStatus", "PushTestSupport", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// The libFuzzer targets, only when scripts/fuzz asks for them: the job parser and payload builder
// (job-fuzzer), whole Kafka messages through intake and the claim plan (intake-fuzzer), and APNs'
// answers to both pools (answer-fuzzer). They are built with `--sanitize fuzzer` in their own build
// directory, and libFuzzer supplies `main`.
if ProcessInfo.processInfo.environment["APN_WORKER_FUZZ"] != nil {
    for (product, target) in [
        ("job-fuzzer", "JobFuzzer"), ("intake-fuzzer", "IntakeFuzzer"), ("answer-fuzzer", "AnswerFuzzer"),
    ] {
        package.products.append(.executable(name: product, targets: [target]))
        package.targets.append(
            .executableTarget(name: target, dependencies: ["PushWorkerFuzzing"], path: "Tests/Fuzz/\(target)")
        )
    }
}

// The Redis transport benchmark (hiredis socket against SwiftNIO, plain TCP), only when
// scripts/bench-redis-transport asks for it: a release build of PushRedis and a small main.
if ProcessInfo.processInfo.environment["APN_WORKER_REDIS_BENCH"] != nil {
    package.targets.append(
        .executableTarget(name: "RedisTransportBench", dependencies: ["PushRedis"], path: "Tests/RedisTransportBench")
    )
}
