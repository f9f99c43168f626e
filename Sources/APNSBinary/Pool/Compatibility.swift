import APNSCore

/// The binary client's events are the shared delivery events.
public typealias APNSBinaryEvent = APNSDeliveryEvent
