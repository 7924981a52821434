/*
 * loopback-floor: the kernel's own cost of one UDP datagram over loopback
 * on this machine, with nothing else in the way: one thread sends
 * batches with sendmmsg to a socket it then drains with recvmmsg (no
 * epoll, no wake-ups, no user work). Whatever a program does per
 * datagram costs at least this much CPU, so it bounds what a machine can
 * carry: an echo of R messages per second moves 2R datagrams, each sent
 * once and received once.
 *
 *   loopback-floor [--payload BYTES] [--batch N] [--datagrams N]
 *
 * Prints one JSON line: cpu_us_per_datagram (CPU time of the process,
 * user + system, over the datagrams sent and received) and
 * datagrams_per_cpu_second. Exit 0, or 1 with a message on stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_BATCH 1024

static long arg(int argc, char **argv, const char *name, long dflt, long lo, long hi) {
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], name) == 0) {
            char *end;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end || v < lo || v > hi) {
                fprintf(stderr, "loopback-floor: %s %s: %ld..=%ld accepted\n", name, argv[i + 1], lo, hi);
                exit(1);
            }
            return v;
        }
    }
    return dflt;
}

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--payload") && strcmp(argv[i], "--batch") && strcmp(argv[i], "--datagrams")) {
            fprintf(stderr, "loopback-floor: unknown flag %s (accepted: --payload, --batch, --datagrams)\n", argv[i]);
            return 1;
        }
    }
    long payload = arg(argc, argv, "--payload", 400, 1, 65507);
    long batch = arg(argc, argv, "--batch", 64, 1, MAX_BATCH);
    long total = arg(argc, argv, "--datagrams", 2000000, 1000, 1000000000);

    int tx = socket(AF_INET, SOCK_DGRAM, 0), rx = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof lo;
    struct sockaddr_in to;
    int big = 16 << 20;
    if (tx < 0 || rx < 0 || bind(tx, (void *)&lo, sizeof lo) || bind(rx, (void *)&lo, sizeof lo) ||
        getsockname(rx, (void *)&to, &len) || setsockopt(rx, SOL_SOCKET, SO_RCVBUF, &big, sizeof big)) {
        perror("loopback-floor: sockets");
        return 1;
    }
    static struct mmsghdr out[MAX_BATCH], in[MAX_BATCH];
    static struct iovec out_iov[MAX_BATCH], in_iov[MAX_BATCH];
    char *out_buf = calloc(MAX_BATCH, 65536), *in_buf = calloc(MAX_BATCH, 65536);
    for (long i = 0; i < batch; i++) {
        out_iov[i] = (struct iovec){out_buf + i * 65536, (size_t)payload};
        out[i].msg_hdr = (struct msghdr){.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &out_iov[i], .msg_iovlen = 1};
        in_iov[i] = (struct iovec){in_buf + i * 65536, 65536};
        in[i].msg_hdr = (struct msghdr){.msg_iov = &in_iov[i], .msg_iovlen = 1};
    }
    long sent = 0, received = 0;
    double start = cpu_seconds();
    while (received < total) {
        int s = sendmmsg(tx, out, batch, 0);
        if (s < 0) {
            perror("loopback-floor: sendmmsg");
            return 1;
        }
        sent += s;
        while (received < sent) {
            int r = recvmmsg(rx, in, batch, MSG_DONTWAIT, NULL);
            if (r < 0 && errno == EAGAIN) {
                /* Dropped by a full buffer: count what arrived only. */
                sent = received;
                break;
            }
            if (r < 0) {
                perror("loopback-floor: recvmmsg");
                return 1;
            }
            received += r;
        }
    }
    double cpu = cpu_seconds() - start;
    printf("{\"payload_bytes\":%ld,\"batch\":%ld,\"datagrams\":%ld,\"cpu_seconds\":%.3f,"
           "\"cpu_us_per_datagram\":%.3f,\"datagrams_per_cpu_second\":%.0f}\n",
           payload, batch, received, cpu, cpu * 1e6 / received, received / cpu);
    return 0;
}
