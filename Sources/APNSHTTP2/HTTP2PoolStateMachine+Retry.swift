import APNSCore
import APNSHTTP2Core
import NIOCore

/// The §3.4 retry policy for answers that ask for one, with its two budgets:
///
/// - `429 TooManyRequests` and 5xx answers about the service (``APNSRetryAdvice/afterDelay``,
///   ``APNSRetryAdvice/withBackoff``) wait out a back-off and spend the request's `retryLimit`;
/// - answers about the connection or its provider token (`ExpiredProviderToken`, `IdleTimeout`,
///   `TooManyProviderTokenUpdates`, `UnrelatedKeyIdInToken`, `Shutdown`:
///   ``APNSRetryAdvice/onNewConnection``) send the request again at once on another connection
///   and spend ``Configuration/maxConnectionResends`` instead, so a notification with
///   `retryLimit` 0 still survives a token refresh or a connection the server closes.
extension HTTP2PoolStateMachine {
    /// Sends `request` again as `failure` asks, or reports it given up once its budget is spent.
    /// The caller has already marked connection `id` draining if the failure replaces it.
    mutating func retry(
        _ request: QueuedRequest,
        _ failure: APNSHTTP2Failure,
        connection id: Int,
        _ actions: inout [Action]
    ) {
        var request = request
        request.lastFailure = failure
        if failure.reason == .expiredProviderToken, configuration.providerTokens {
            // §6.10: refresh once (the provider never signs twice in 20 minutes) and
            // replace this connection, which would keep answering ExpiredProviderToken.
            actions.append(.refreshToken(connection: id, rejected: connections[id]?.currentToken))
        }
        if failure.retry == .onNewConnection {
            guard Int(request.connectionResends) < configuration.maxConnectionResends else {
                report(
                    request,
                    failure,
                    gaveUp: "gave up after \(request.connectionResends) resends on new connections"
                )
                return
            }
            request.connectionResends += 1
            queue.prepend(request)
            return
        }
        guard request.retries < request.retryLimit else {
            report(request, failure, gaveUp: "gave up after \(request.retries) retries")
            return
        }
        request.retries += 1
        let delay = APNSReconnectBackoff.delay(
            afterFailures: request.retries,
            base: configuration.retryBaseDelay,
            maximum: configuration.retryMaxDelay
        )
        let due = configuration.clock() + delay.timeAmount
        delayed.append(Delayed(due: due, request: request))
        if delayedTimerDue.map({ due < $0 }) ?? true {
            delayedTimerDue = due
            actions.append(.armDelayedTimer(due))
        }
    }

    /// Reports `request` failed with `failure`; `gaveUp` says which retry budget ran out.
    mutating func report(
        _ request: QueuedRequest,
        _ failure: APNSHTTP2Failure,
        gaveUp: String? = nil,
        uniqueID: String? = nil
    ) {
        let meaning = failure.reason?.entry?.meaning ?? APNSStatus(rawValue: failure.status).reason
        let message = gaveUp.map { "\(meaning); \($0)" } ?? meaning
        let unregisteredAt =
            failure.status == 410
            ? failure.timestamp?.unixMilliseconds : nil
        events.append(
            outcome: .transmissionError(
                request.outcome(
                    status: APNSStatus(rawValue: failure.status),
                    message: message,
                    reason: failure.reason?.rawValue,
                    unregisteredAt: unregisteredAt,
                    uniqueID: uniqueID
                )
            )
        )
    }
}
