import APNSCore
