/* The CPU a C client of the same design as asyncio_floor.py spends on paced Redis Streams
 * traffic: one producer connection sends one XADD per slot (1 KiB payload, the intended time
 * as a field) at its slot's time (an absolute clock_nanosleep), and reads its reply; one
 * consumer connection blocks in XREADGROUP (COUNT 1000, BLOCK 0) on a thread of its own and
 * sends each delivery's XACK together with its next read. Nothing is recorded. What is left is
 * what the machine charges for the design's wake-ups and system calls without an interpreter.
 *
 * Usage: c_floor PORT RATE SECONDS      -> one JSON line: rate, seconds, consumed, user_s,
 *                                          system_s (CPU of this process while the load ran)
 *        c_floor wakeups RATE SECONDS   -> one JSON line: the CPU of RATE timed wake-ups a
 *                                          second and nothing else (user_s, system_s)
 * Built by paced_cost.py with the system's C compiler (cc -O2 -pthread). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STREAM "c-floor"
#define GROUP "floor"
#define PAYLOAD 1024
#define BUF (8 << 20)

static long total;
static volatile long consumed;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int connect_to(int port) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) != 0) die("connect");
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return s;
}

static void send_all(int s, const char *p, size_t n) {
    while (n) {
        ssize_t k = send(s, p, n, 0);
        if (k <= 0) die("send");
        p += k;
        n -= (size_t)k;
    }
}

/* A buffer of received bytes; replies are parsed from `start`. */
struct inbox {
    char *data;
    size_t start, end;
};

static void receive_more(int s, struct inbox *in) {
    if (in->start == in->end) in->start = in->end = 0;
    if (in->end == BUF) {  /* make room: move the unparsed bytes to the front */
        memmove(in->data, in->data + in->start, in->end - in->start);
        in->end -= in->start;
        in->start = 0;
        if (in->end == BUF) { fprintf(stderr, "reply too large\n"); exit(1); }
    }
    ssize_t k = recv(s, in->data + in->end, BUF - in->end, 0);
    if (k <= 0) die("recv");
    in->end += (size_t)k;
}

/* The number after a type byte up to CRLF; 0 when the line is not complete yet. */
static int line_number(const char *p, size_t n, size_t *pos, long *value) {
    const char *eol = memchr(p + *pos, '\r', n - *pos);
    if (!eol || (size_t)(eol - p) + 1 >= n) return 0;
    *value = strtol(p + *pos + 1, NULL, 10);
    *pos = (size_t)(eol - p) + 2;
    return 1;
}

/* Skips one complete reply at *pos; 0 when incomplete. Bulk strings: *bulk and *len. */
static int skip(const char *p, size_t n, size_t *pos, const char **bulk, long *len) {
    if (*pos >= n) return 0;
    char type = p[*pos];
    long v;
    if (!line_number(p, n, pos, &v)) return 0;
    if (type == '$') {
        if (v < 0) return 1;
        if (*pos + (size_t)v + 2 > n) return 0;
        if (bulk) { *bulk = p + *pos; *len = v; }
        *pos += (size_t)v + 2;
        return 1;
    }
    if (type == '*') {
        for (long i = 0; i < v; i++)
            if (!skip(p, n, pos, NULL, NULL)) return 0;
        return 1;
    }
    if (type == '-') { fprintf(stderr, "redis error: %.*s\n", (int)(*pos - 2), p); exit(1); }
    return 1;  /* + and : */
}

static int consumer_fd;
static char read_cmd[512];

/* XREADGROUP's reply: [[stream, [[id, fields], ...]]]. Writes "XACK stream group ids..." into
 * ack (length *ack_len) and returns the entry count, or -1 when the reply is not complete. */
static long parse_read(struct inbox *in, char *ack, size_t *ack_len) {
    const char *p = in->data + in->start;
    size_t n = in->end - in->start, pos = 0;
    long streams, entries, two, count = 0;
    char ids[1 << 16];
    size_t ids_len = 0;
    if (!line_number(p, n, &pos, &streams)) return -1;
    for (long s = 0; s < streams; s++) {
        if (!line_number(p, n, &pos, &two) || !skip(p, n, &pos, NULL, NULL)) return -1;
        if (!line_number(p, n, &pos, &entries)) return -1;
        for (long e = 0; e < entries; e++) {
            const char *id;
            long id_len;
            if (!line_number(p, n, &pos, &two) || !skip(p, n, &pos, &id, &id_len) ||
                !skip(p, n, &pos, NULL, NULL)) return -1;
            if (ids_len + (size_t)id_len + 32 < sizeof ids)
                ids_len += (size_t)sprintf(ids + ids_len, "$%ld\r\n%.*s\r\n", id_len, (int)id_len, id);
            count++;
        }
    }
    in->start += pos;
    *ack_len = (size_t)sprintf(ack, "*%ld\r\n$4\r\nXACK\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n", count + 3,
                               strlen(STREAM), STREAM, strlen(GROUP), GROUP);
    memcpy(ack + *ack_len, ids, ids_len);
    *ack_len += ids_len;
    return count;
}

static void *consume(void *unused) {
    (void)unused;
    struct inbox in = {malloc(BUF), 0, 0};
    char *ack = malloc(1 << 17);
    size_t ack_len;
    int acks_owed = 0;
    send_all(consumer_fd, read_cmd, strlen(read_cmd));
    while (consumed < total) {
        long count;
        for (;;) {
            size_t pos = 0;
            /* the integer replies of XACKs come first */
            while (acks_owed && in.end > in.start) {
                const char *p = in.data + in.start;
                if (!skip(p, in.end - in.start, &pos, NULL, NULL)) break;
                in.start += pos;
                pos = 0;
                acks_owed--;
            }
            if (!acks_owed && in.end > in.start &&
                (count = parse_read(&in, ack, &ack_len)) >= 0) break;
            receive_more(consumer_fd, &in);
        }
        consumed += count;
        memcpy(ack + ack_len, read_cmd, strlen(read_cmd));
        send_all(consumer_fd, ack, ack_len + strlen(read_cmd));
        acks_owed = 1;
    }
    return NULL;
}

static double cpu_since(const struct rusage *r0, double *user, double *sys) {
    struct rusage r1;
    getrusage(RUSAGE_SELF, &r1);
    *user = (double)(r1.ru_utime.tv_sec - r0->ru_utime.tv_sec) +
            (double)(r1.ru_utime.tv_usec - r0->ru_utime.tv_usec) / 1e6;
    *sys = (double)(r1.ru_stime.tv_sec - r0->ru_stime.tv_sec) +
           (double)(r1.ru_stime.tv_usec - r0->ru_stime.tv_usec) / 1e6;
    return *user + *sys;
}

static long long mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void sleep_until(long long t) {
    struct timespec ts = {t / 1000000000LL, t % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
}

static void wait_reply(int s, struct inbox *in) {
    for (;;) {
        size_t pos = 0;
        if (in->end > in->start && skip(in->data + in->start, in->end - in->start, &pos, NULL, NULL)) {
            in->start += pos;
            return;
        }
        receive_more(s, in);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: c_floor PORT|wakeups RATE SECONDS\n"); return 2; }
    double rate = atof(argv[2]), seconds = atof(argv[3]);
    long long step = (long long)(1e9 / rate);
    total = (long)(rate * seconds);
    struct rusage r0;
    double user, sys;
    if (strcmp(argv[1], "wakeups") == 0) {
        getrusage(RUSAGE_SELF, &r0);
        long long t0 = mono_ns();
        for (long i = 1; i <= total; i++) sleep_until(t0 + i * step);
        cpu_since(&r0, &user, &sys);
        printf("{\"rate\": %g, \"seconds\": %g, \"wakeups\": %ld, \"user_s\": %f, \"system_s\": %f}\n",
               rate, seconds, total, user, sys);
        return 0;
    }
    int port = atoi(argv[1]);
    int producer = connect_to(port);
    consumer_fd = connect_to(port);
    struct inbox in = {malloc(BUF), 0, 0};
    char setup[256];
    int len = sprintf(setup, "*2\r\n$3\r\nDEL\r\n$%zu\r\n%s\r\n*6\r\n$6\r\nXGROUP\r\n$6\r\nCREATE\r\n"
                      "$%zu\r\n%s\r\n$%zu\r\n%s\r\n$1\r\n$\r\n$8\r\nMKSTREAM\r\n",
                      strlen(STREAM), STREAM, strlen(STREAM), STREAM, strlen(GROUP), GROUP);
    send_all(producer, setup, (size_t)len);
    wait_reply(producer, &in);
    wait_reply(producer, &in);
    sprintf(read_cmd, "*11\r\n$10\r\nXREADGROUP\r\n$5\r\nGROUP\r\n$%zu\r\n%s\r\n$1\r\nc\r\n$5\r\nCOUNT\r\n"
            "$4\r\n1000\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$%zu\r\n%s\r\n$1\r\n>\r\n",
            strlen(GROUP), GROUP, strlen(STREAM), STREAM);
    char payload[PAYLOAD];
    FILE *random = fopen("/dev/urandom", "rb");
    if (!random || fread(payload, 1, PAYLOAD, random) != PAYLOAD) die("/dev/urandom");
    fclose(random);
    pthread_t thread;
    if (pthread_create(&thread, NULL, consume, NULL) != 0) die("pthread_create");
    usleep(100000);
    char msg[PAYLOAD + 256];
    getrusage(RUSAGE_SELF, &r0);
    long long t0 = mono_ns() + 10000000LL;
    for (long i = 0; i < total; i++) {
        sleep_until(t0 + i * step);
        struct timespec w;
        clock_gettime(CLOCK_REALTIME, &w);
        char t[32];
        int tl = sprintf(t, "%lld", w.tv_sec * 1000000000LL + w.tv_nsec);
        int m = sprintf(msg, "*7\r\n$4\r\nXADD\r\n$%zu\r\n%s\r\n$1\r\n*\r\n$1\r\nt\r\n$%d\r\n%s\r\n"
                        "$1\r\np\r\n$%d\r\n", strlen(STREAM), STREAM, tl, t, PAYLOAD);
        memcpy(msg + m, payload, PAYLOAD);
        m += PAYLOAD;
        msg[m++] = '\r';
        msg[m++] = '\n';
        send_all(producer, msg, (size_t)m);
        wait_reply(producer, &in);
    }
    for (int k = 0; k < 1000 && consumed < total; k++) usleep(10000);
    cpu_since(&r0, &user, &sys);
    len = sprintf(setup, "*2\r\n$3\r\nDEL\r\n$%zu\r\n%s\r\n", strlen(STREAM), STREAM);
    send_all(producer, setup, (size_t)len);
    wait_reply(producer, &in);
    printf("{\"rate\": %g, \"seconds\": %g, \"consumed\": %ld, \"user_s\": %f, \"system_s\": %f}\n",
           rate, seconds, consumed, user, sys);
    return 0;
}
