#define _GNU_SOURCE
#include "CNetNamespace.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct listen_request {
    const char *path;
    uint16_t port;
    int backlog;
    int result;
};

static void *listen_in_namespace(void *argument) {
    struct listen_request *request = argument;
    int ns = open(request->path, O_RDONLY | O_CLOEXEC);
    if (ns < 0) {
        request->result = -errno;
        return NULL;
    }
    if (setns(ns, CLONE_NEWNET) != 0) {
        request->result = -errno;
        close(ns);
        return NULL;
    }
    close(ns);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        request->result = -errno;
        return NULL;
    }
    int one = 1;
    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons(request->port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0
        || bind(fd, (struct sockaddr *)&address, sizeof address) != 0
        || listen(fd, request->backlog) != 0) {
        request->result = -errno;
        close(fd);
        return NULL;
    }
    request->result = fd;
    return NULL;
}

int apn_netns_listen(const char *namespacePath, uint16_t port, int backlog) {
    struct listen_request request = {namespacePath, port, backlog, -EINVAL};
    pthread_t thread;
    int error = pthread_create(&thread, NULL, listen_in_namespace, &request);
    if (error != 0) return -error;
    pthread_join(thread, NULL);
    return request.result;
}
