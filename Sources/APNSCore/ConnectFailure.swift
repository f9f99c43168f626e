import NIOCore
import NIOPosix
import NIOSSL

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension APNSPoolSnapshot.ConnectFailure {
    /// The kind of a failed connect, from the error the bootstrap or the TLS handler reported;
    /// both delivery clients read their connect errors through it.
    package init(connectError error: any Error) {
        switch error {
        case let error as APNSError:
            // A proxy's tunnel (``APNSConnector``): its answer, its silence or what stopped the
            // connection to it.
            switch error.code {
            case .proxyRefused: self = .refused
            case .timeout: self = .timeout
            default: self = error.underlying.map { Self(connectError: $0) } ?? .other
            }
        case is NIOSSLError, is BoringSSLError, is NIOSSLExtraError:
            self = .tls
        case let error as ChannelError:
            if case .connectTimeout = error { self = .timeout } else { self = .other }
        case let error as NIOConnectionError:
            let errors = error.connectionErrors.map(\.error)
            if errors.contains(where: { ($0 as? IOError)?.errnoCode == ECONNREFUSED }) {
                self = .refused
            } else if errors.contains(where: { if case ChannelError.connectTimeout = $0 { true } else { false } }) {
                self = .timeout
            } else {
                self = .other
            }
        case let error as IOError where error.errnoCode == ECONNREFUSED:
            self = .refused
        default:
            self = .other
        }
    }
}
