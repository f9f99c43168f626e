import APNSCore
import Foundation
import Logging

/// The JSON-lines record file of a simulator: emptied when a simulator starts, then appended
/// to with `O_APPEND`, so the binary and the HTTP/2 simulator can share one file (each write
/// is a block of whole lines).
enum RecordFile {
    static func open(_ path: String) throws(APNSError) -> FileHandle {
        let fd = path.withCString { Foundation.open($0, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0o644) }
        guard fd >= 0 else {
            throw APNSError(.invalidConfiguration, "cannot write the record file \(path)")
        }
        return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }

    /// Closes `file` (if any) once a stopping simulator has flushed it; a failure, which may
    /// mean the last lines were not written, is logged.
    static func close(_ file: FileHandle?, logger: Logger) {
        do {
            try file?.close()
        } catch {
            logger.warning(
                "cannot close the record file; its last lines may be missing",
                metadata: ["error": "\(error)"]
            )
        }
    }
}
