#ifndef C_NET_NAMESPACE_H
#define C_NET_NAMESPACE_H

#include <stdint.h>

/// A TCP socket listening on 127.0.0.1:`port` inside the network namespace whose file is
/// `namespacePath` (`/run/netns/NAME`), non-blocking, close-on-exec, with SO_REUSEADDR.
/// Returns its descriptor, or -errno.
///
/// A thread of its own enters the namespace (setns applies to the calling thread only), makes
/// the socket and ends: the socket stays in that namespace, the caller's threads never leave
/// theirs.
int apn_netns_listen(const char *namespacePath, uint16_t port, int backlog);

#endif
