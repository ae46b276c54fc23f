/* tcpbw: loopback TCP bandwidth, the ceiling of anything that moves bytes
 * between two processes of this machine through the kernel's TCP stack
 * (UCX's tcp transport, Open MPI's btl tcp, Gloo, gRPC).
 *
 * A receiver process (forked) accepts one connection on 127.0.0.1; the
 * sender connects (TCP_NODELAY, the kernel's default buffer sizes) and, per
 * size S:
 *   msg     per sample, one S-byte message, then waits for the receiver's
 *           1-byte acknowledgement (a message handed over and known to have
 *           landed: what a step's push sees); GB/s = S / sample time
 *   stream  K messages of S bytes back to back and one acknowledgement at
 *           the end (the pipe kept full); GB/s = K * S / time
 * GB/s = 10^9 bytes per second. Printed per size: min / median / max of the
 * msg samples, and the stream figure.
 *
 * Usage: tcpbw [-s SIZES_MIB] [-n SAMPLES] [-k STREAM_MESSAGES]
 *   -s 1,16,64   comma-separated message sizes in MiB (default 1,16,64)
 *   -n 10        timed msg samples per size, after 2 warm-up messages
 *   -k 8         messages in the stream measurement
 * Build: cc -O2 -o tcpbw tcpbw.c      (benchmarks/machine/run.sh)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* what) {
  fprintf(stderr, "tcpbw: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      die("write");
    }
    p += w;
    n -= (size_t)w;
  }
}

/* Returns 0 on end of stream before the first byte, else 1. */
static int read_all(int fd, char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("read");
    }
    if (r == 0) {
      if (got == 0) return 0;
      errno = EPIPE;
      die("read (connection closed mid-message)");
    }
    got += (size_t)r;
  }
  return 1;
}

static void set_nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) die("TCP_NODELAY");
}

/* The receiver: each request is an 8-byte header (message bytes, messages
 * before the ack), then the messages; it answers one byte per request. */
static void receiver(int listen_fd, size_t max_bytes) {
  int fd = accept(listen_fd, NULL, NULL);
  if (fd < 0) die("accept");
  set_nodelay(fd);
  char* buf = malloc(max_bytes);
  if (buf == NULL) die("malloc");
  memset(buf, 0, max_bytes);
  for (;;) {
    uint32_t hdr[2];
    if (!read_all(fd, (char*)hdr, sizeof(hdr))) break;
    size_t bytes = (size_t)hdr[0] << 10; /* KiB on the wire */
    for (uint32_t m = 0; m < hdr[1]; ++m) read_all(fd, buf, bytes);
    char ack = 1;
    write_all(fd, &ack, 1);
  }
  close(fd);
  free(buf);
  exit(0);
}

/* One request: `count` messages of `bytes`, then the ack. Its seconds. */
static double exchange(int fd, const char* buf, size_t bytes, uint32_t count) {
  uint32_t hdr[2] = {(uint32_t)(bytes >> 10), count};
  double t0 = now_s();
  write_all(fd, (const char*)hdr, sizeof(hdr));
  for (uint32_t m = 0; m < count; ++m) write_all(fd, buf, bytes);
  char ack;
  if (!read_all(fd, &ack, 1)) {
    errno = EPIPE;
    die("receiver closed");
  }
  return now_s() - t0;
}

static int cmp_double(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

static int usage(const char* msg) {
  fprintf(stderr, "tcpbw: %s\nusage: tcpbw [-s SIZES_MIB] [-n SAMPLES] [-k STREAM_MESSAGES]\n",
          msg);
  return 2;
}

int main(int argc, char** argv) {
  long sizes[16] = {1, 16, 64};
  int nsizes = 3, samples = 10, stream = 8;
  for (int i = 1; i < argc; ++i) {
    const char* opt = argv[i];
    if (i + 1 >= argc) return usage("an option needs a value");
    const char* val = argv[++i];
    if (strcmp(opt, "-n") == 0) {
      samples = atoi(val);
      if (samples < 1) return usage("-n: at least one sample");
    } else if (strcmp(opt, "-k") == 0) {
      stream = atoi(val);
      if (stream < 1) return usage("-k: at least one message");
    } else if (strcmp(opt, "-s") == 0) {
      nsizes = 0;
      char* copy = strdup(val);
      for (char* tok = strtok(copy, ","); tok != NULL && nsizes < 16; tok = strtok(NULL, ",")) {
        char* end;
        long v = strtol(tok, &end, 10);
        if (*end != '\0' || v <= 0 || v > 1024) return usage("-s: sizes in MiB, 1 to 1024");
        sizes[nsizes++] = v;
      }
      free(copy);
      if (nsizes == 0) return usage("-s: sizes in MiB, e.g. 1,64");
    } else {
      return usage("unknown option");
    }
  }
  size_t max_bytes = 0;
  for (int i = 0; i < nsizes; ++i) {
    size_t b = (size_t)sizes[i] << 20;
    if (b > max_bytes) max_bytes = b;
  }

  int listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (listen_fd < 0) die("socket");
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0; /* a free port */
  if (bind(listen_fd, (struct sockaddr*)&addr, sizeof(addr)) != 0) die("bind 127.0.0.1");
  if (listen(listen_fd, 1) != 0) die("listen");
  socklen_t len = sizeof(addr);
  if (getsockname(listen_fd, (struct sockaddr*)&addr, &len) != 0) die("getsockname");

  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) receiver(listen_fd, max_bytes);
  close(listen_fd);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  if (connect(fd, (struct sockaddr*)&addr, sizeof(addr)) != 0) die("connect");
  set_nodelay(fd);
  char* buf = malloc(max_bytes);
  if (buf == NULL) die("malloc");
  memset(buf, 7, max_bytes);

  printf("tcpbw: loopback 127.0.0.1, TCP_NODELAY, default buffers; msg = one message + 1-byte "
         "ack per sample (%d samples), stream = %d messages + one ack; GB/s = 1e9 B/s\n",
         samples, stream);
  printf("%8s %9s %9s %9s %11s\n", "S_MiB", "msg_min", "msg_med", "msg_max", "stream");
  double* t = calloc((size_t)samples, sizeof(double));
  for (int si = 0; si < nsizes; ++si) {
    size_t bytes = (size_t)sizes[si] << 20;
    exchange(fd, buf, bytes, 1); /* warm-up */
    exchange(fd, buf, bytes, 1);
    for (int s = 0; s < samples; ++s) t[s] = exchange(fd, buf, bytes, 1);
    qsort(t, (size_t)samples, sizeof(double), cmp_double);
    double med = samples % 2 ? t[samples / 2] : 0.5 * (t[samples / 2 - 1] + t[samples / 2]);
    double st = exchange(fd, buf, bytes, (uint32_t)stream);
    printf("%8ld %9.2f %9.2f %9.2f %11.2f\n", sizes[si], (double)bytes / t[samples - 1] / 1e9,
           (double)bytes / med / 1e9, (double)bytes / t[0] / 1e9,
           (double)bytes * stream / st / 1e9);
    fflush(stdout);
  }
  free(t);
  free(buf);
  close(fd); /* the receiver sees the end of the stream and exits */
  int status = 0;
  if (waitpid(child, &status, 0) < 0) die("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "tcpbw: the receiver failed (status %d)\n", status);
    return 1;
  }
  return 0;
}
