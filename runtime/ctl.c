/*
 * ctl.c — the control plane (ctl.h): solo, MPI and TCP transports.
 *
 * TCP: rank 0 binds the rendezvous port on every address and accepts
 * size - 1 connections before the deadline; each opens with a hello
 * {magic, version, rank, size, token} that rank 0 answers with a status word
 * (0: welcome). Afterwards every transfer is a frame {magic, op, length}
 * followed by the bytes; the receiver checks op and length against what it
 * expects. Sockets block: a rank that died closes its socket (the reader sees
 * end of file and says which rank), a rank that hangs is caught by the run's
 * step timeout.
 */
#define _GNU_SOURCE
#include "ctl.h"

#include <errno.h>
#include <mpi.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { HELLO_MAGIC = 0x50434743, HELLO_VERSION = 1, FRAME_MAGIC = 0x7063746c };
enum { OP_BCAST = 1, OP_GATHER, OP_SCATTER, OP_SUM, OP_BARRIER, OP_SEND0 };
enum { WELCOME = 0, BAD_SIZE, BAD_RANK, DUP_RANK, BAD_TOKEN, BAD_VERSION };

typedef struct hello {
  uint32_t magic, version;
  int32_t rank, size;
  uint64_t token;
} hello;

typedef struct frame {
  uint32_t magic, op;
  uint64_t len;
} frame;

typedef struct tcp {
  int *fd; /* rank 0: fd[r] the socket of rank r (fd[0] = -1); other ranks: fd[0], the socket to rank 0 */
  char where[300]; /* "HOST:PORT", for messages */
} tcp;

typedef struct mpi_impl {
  MPI_Comm comm;
} mpi_impl;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ------------------------------------------------------------ environment */

static const char *env2(const char *a, const char *b) {
  const char *v = getenv(a);
  return v && *v ? v : b && getenv(b) && *getenv(b) ? getenv(b) : NULL;
}

static pcgc_status env_int(const char *a, const char *b, long lo, long hi, long dflt, bool required, int *out,
                           pcgc_error *err) {
  const char *v = env2(a, b);
  if (!v && !required) {
    *out = (int)dflt;
    return PCGC_OK;
  }
  if (!v) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "PCGC_RENDEZVOUS is set, but %s%s%s%s is not", a, b ? " (or " : "",
                   b ? b : "", b ? ")" : "");
    pcgc_error_hint(err, "a process of a run without MPI needs its rank and the number of processes: set PCGC_RANK "
                         "and PCGC_WORLD_SIZE");
    return PCGC_ERR_INVALID;
  }
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (!*v || *end || errno || x < lo || x > hi)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "%s=%s: not an integer in [%ld, %ld]", env2(a, NULL) ? a : b, v, lo,
                          hi);
  *out = (int)x;
  return PCGC_OK;
}

pcgc_status pcgc_rendezvous_from_env(pcgc_rendezvous *rv, bool *present, pcgc_error *err) {
  memset(rv, 0, sizeof *rv);
  const char *v = getenv("PCGC_RENDEZVOUS");
  *present = v != NULL;
  if (!v) return PCGC_OK;
  /* HOST:PORT, or [V6ADDR]:PORT */
  const char *colon = v[0] == '[' ? strstr(v, "]:") : strrchr(v, ':');
  const char *host = v, *port = colon ? colon + 1 + (v[0] == '[') : NULL;
  size_t hn = colon ? (size_t)(colon - v) : 0;
  if (v[0] == '[') host++, hn = hn > 0 ? hn - 1 : 0;
  char *end = NULL;
  long p = port ? strtol(port, &end, 10) : 0;
  if (!colon || hn == 0 || hn >= sizeof rv->host || !*port || *end || p < 1 || p > 65535) {
    pcgc_error_set(err, PCGC_ERR_INVALID, "PCGC_RENDEZVOUS=%s: expected HOST:PORT with a port in [1, 65535]", v);
    pcgc_error_hint(err, "rank 0's host name or address and a free port, e.g. PCGC_RENDEZVOUS=node0:29511");
    return PCGC_ERR_INVALID;
  }
  memcpy(rv->host, host, hn);
  rv->host[hn] = 0;
  rv->port = (int)p;
  pcgc_status st;
  if ((st = env_int("PCGC_WORLD_SIZE", "WORLD_SIZE", 1, 1 << 20, 0, true, &rv->size, err)) ||
      (st = env_int("PCGC_RANK", "RANK", 0, rv->size - 1, 0, true, &rv->rank, err)) ||
      (st = env_int("PCGC_LOCAL_RANK", "LOCAL_RANK", 0, 1 << 20, rv->rank, false, &rv->local_rank, err)) ||
      (st = env_int("PCGC_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE", 1, 1 << 20, 0, false, &rv->local_size, err)))
    return st;
  int t = 300;
  if ((st = env_int("PCGC_RENDEZVOUS_TIMEOUT", NULL, 1, 86400, 300, false, &t, err))) return st;
  rv->timeout_s = t;
  return PCGC_OK;
}

/* ------------------------------------------------------------ sockets */

static pcgc_status io_fail(pcgc_ctl *c, int peer, const char *what, pcgc_error *err) {
  const tcp *T = c->impl;
  if (errno == 0)
    return pcgc_error_set(err, PCGC_ERR_IO, "rank %d: rank %d closed its connection (rendezvous %s) while %s: its "
                          "process ended or failed (see its message)", c->rank, peer, T->where, what);
  return pcgc_error_set(err, PCGC_ERR_IO, "rank %d: %s rank %d (rendezvous %s): %s", c->rank, what, peer, T->where,
                        strerror(errno));
}

static bool write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k, n -= (size_t)k;
  }
  return true;
}

static bool read_all(int fd, void *buf, size_t n) {
  char *p = buf;
  errno = 0;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k == 0) errno = 0;
    if (k <= 0) return false;
    p += k, n -= (size_t)k;
  }
  return true;
}

static const char *op_name(uint32_t op) {
  static const char *names[] = {"?", "broadcast", "gather", "scatter", "sum", "barrier", "send"};
  return op < sizeof names / sizeof *names ? names[op] : "?";
}

static pcgc_status put(pcgc_ctl *c, int peer, uint32_t op, const void *buf, size_t n, pcgc_error *err) {
  const tcp *T = c->impl;
  frame f = {FRAME_MAGIC, op, n};
  int fd = T->fd[c->rank == 0 ? peer : 0];
  if (!write_all(fd, &f, sizeof f) || !write_all(fd, buf, n)) return io_fail(c, peer, "sending to", err);
  return PCGC_OK;
}

static pcgc_status get(pcgc_ctl *c, int peer, uint32_t op, void *buf, size_t n, pcgc_error *err) {
  const tcp *T = c->impl;
  frame f;
  int fd = T->fd[c->rank == 0 ? peer : 0];
  if (!read_all(fd, &f, sizeof f)) return io_fail(c, peer, "receiving from", err);
  if (f.magic != FRAME_MAGIC || f.op != op || f.len != n)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rank %d expected a %s of %zu bytes from rank %d but got a %s of %llu:"
                          " the processes run different plans or options", c->rank, op_name(op), n, peer,
                          f.magic == FRAME_MAGIC ? op_name(f.op) : "garbled frame", (unsigned long long)f.len);
  if (!read_all(fd, buf, n)) return io_fail(c, peer, "receiving from", err);
  return PCGC_OK;
}

/* The addresses of host:port (host NULL: every local address, to listen on). */
static pcgc_status resolve(const char *host, int port, struct addrinfo **out, pcgc_error *err) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hint;
  memset(&hint, 0, sizeof hint);
  hint.ai_family = AF_UNSPEC;
  hint.ai_socktype = SOCK_STREAM;
  hint.ai_flags = host ? AI_ADDRCONFIG : AI_PASSIVE;
  int rc = getaddrinfo(host, ps, &hint, out);
  if (rc != 0)
    return pcgc_error_set(err, PCGC_ERR_IO, "rendezvous %s:%d: cannot resolve '%s': %s", host ? host : "*", port,
                          host ? host : "*", gai_strerror(rc));
  return PCGC_OK;
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Rank 0: listens, and takes every other rank's hello before the deadline. */
static pcgc_status serve(pcgc_ctl *c, const pcgc_rendezvous *rv, uint64_t token, double deadline, pcgc_error *err) {
  tcp *T = c->impl;
  struct addrinfo *ai = NULL;
  pcgc_status st = resolve(NULL, rv->port, &ai, err);
  if (st) return st;
  /* prefer IPv6's wildcard (it takes IPv4 too where the system allows), else IPv4's */
  int ls = -1, last = 0;
  for (int pass = 0; pass < 2 && ls < 0; pass++)
    for (struct addrinfo *a = ai; a && ls < 0; a = a->ai_next) {
      if ((a->ai_family == AF_INET6) != (pass == 0)) continue;
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      int one = 1, zero = 0;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, c->size < 128 ? c->size : 128) == 0) ls = fd;
      else last = errno, close(fd);
    }
  freeaddrinfo(ai);
  if (ls < 0) {
    pcgc_error_set(err, PCGC_ERR_IO, "rank 0 cannot listen on port %d for the rendezvous: %s", rv->port,
                   strerror(last));
    pcgc_error_hint(err, "choose a free port in PCGC_RENDEZVOUS (another run, or the launcher's own store, may hold %d)",
                    rv->port);
    return PCGC_ERR_IO;
  }
  int joined = 1;
  double report = now() + 10; /* a wait of more than 10 s says how far it got, every 10 s */
  while (joined < c->size && !st) {
    double t = now(), left = deadline - t, wait = left < report - t ? left : report - t;
    struct pollfd p = {ls, POLLIN, 0};
    int r = left > 0 ? poll(&p, 1, wait > 0 ? (int)(wait * 1000) + 1 : 0) : 0;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && now() < deadline) {
      if (now() >= report) {
        fprintf(stderr, "pcgc run: rank 0: %d of %d processes have joined at the rendezvous %s (waiting up to %g s)\n",
                joined, c->size, T->where, rv->timeout_s);
        report += 10;
      }
      continue;
    }
    if (r <= 0) {
      char missing[200] = "";
      int used = 0;
      for (int k = 1; k < c->size && used < 160; k++)
        if (T->fd[k] < 0) used += snprintf(missing + used, sizeof missing - (size_t)used, "%s%d", used ? ", " : "", k);
      pcgc_error_set(err, PCGC_ERR_IO, "rendezvous %s: %d of %d processes joined within %g s (missing rank%s %s%s)",
                     T->where, joined, c->size, rv->timeout_s, c->size - joined == 1 ? "" : "s", missing,
                     used >= 160 ? ", ..." : "");
      pcgc_error_hint(err, "start every rank with the same PCGC_RENDEZVOUS and PCGC_WORLD_SIZE, or raise "
                           "PCGC_RENDEZVOUS_TIMEOUT");
      st = PCGC_ERR_IO;
      break;
    }
    int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    tune(fd);
    /* a connection that says nothing within a few seconds is not one of ours */
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    hello h;
    uint32_t verdict = WELCOME;
    if (!read_all(fd, &h, sizeof h) || h.magic != HELLO_MAGIC) {
      close(fd);
      continue;
    }
    tv.tv_sec = 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (h.version != HELLO_VERSION) verdict = BAD_VERSION;
    else if (h.size != c->size) verdict = BAD_SIZE;
    else if (h.rank < 1 || h.rank >= c->size) verdict = BAD_RANK;
    else if (T->fd[h.rank] >= 0) verdict = DUP_RANK;
    else if (h.token != token) verdict = BAD_TOKEN;
    write_all(fd, &verdict, sizeof verdict);
    if (verdict != WELCOME) {
      /* the stray process is told why; the job goes on waiting for the right one */
      fprintf(stderr, "pcgc run: rank 0: turned away a process at the rendezvous (rank %d of %d): %s\n", (int)h.rank,
              (int)h.size,
              verdict == BAD_SIZE ? "another world size" : verdict == BAD_RANK ? "rank out of range"
              : verdict == DUP_RANK ? "that rank has joined already" : verdict == BAD_TOKEN ? "another plan"
                                                                                           : "another pcgc version");
      close(fd);
      continue;
    }
    T->fd[h.rank] = fd;
    joined++;
  }
  close(ls);
  return st;
}

static const char *verdict_text(uint32_t v) {
  switch (v) {
  case BAD_SIZE: return "rank 0 runs another number of processes (PCGC_WORLD_SIZE differs)";
  case BAD_RANK: return "its rank is out of range";
  case DUP_RANK: return "another process joined with the same rank";
  case BAD_TOKEN: return "rank 0 runs another plan (or the same plan lowered with other options)";
  case BAD_VERSION: return "rank 0 runs another version of pcgc";
  default: return "rank 0 refused it";
  }
}

/* Any other rank: connects (retrying while rank 0 is not listening yet) and says hello. */
static pcgc_status join(pcgc_ctl *c, const pcgc_rendezvous *rv, uint64_t token, double deadline, pcgc_error *err) {
  tcp *T = c->impl;
  int last = 0;
  double report = now() + 10;
  while (now() < deadline) {
    if (now() >= report) {
      fprintf(stderr, "pcgc run: rank %d: waiting for rank 0 at the rendezvous %s (%s; up to %g s)\n", c->rank,
              T->where, strerror(last ? last : ETIMEDOUT), rv->timeout_s);
      report += 10;
    }
    struct addrinfo *ai = NULL;
    pcgc_status st = resolve(rv->host, rv->port, &ai, err);
    if (st) return st;
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
      fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) last = errno, close(fd), fd = -1;
    }
    freeaddrinfo(ai);
    if (fd < 0) {
      struct timespec nap = {0, 100 * 1000 * 1000};
      nanosleep(&nap, NULL);
      continue;
    }
    tune(fd);
    hello h = {HELLO_MAGIC, HELLO_VERSION, c->rank, c->size, token};
    uint32_t verdict = ~0u;
    if (!write_all(fd, &h, sizeof h) || !read_all(fd, &verdict, sizeof verdict)) {
      /* rank 0 of an earlier run that was ending, or not pcgc: try again */
      last = errno ? errno : ECONNRESET;
      close(fd);
      struct timespec nap = {0, 100 * 1000 * 1000};
      nanosleep(&nap, NULL);
      continue;
    }
    if (verdict != WELCOME) {
      close(fd);
      return pcgc_error_set(err, PCGC_ERR_INVALID, "rank %d was turned away at the rendezvous %s: %s", c->rank,
                            T->where, verdict_text(verdict));
    }
    T->fd[0] = fd;
    return PCGC_OK;
  }
  pcgc_error_set(err, PCGC_ERR_IO, "rank %d: no answer from rank 0 at the rendezvous %s within %g s (%s)", c->rank,
                 T->where, rv->timeout_s, strerror(last ? last : ETIMEDOUT));
  pcgc_error_hint(err, "start rank 0 too, with PCGC_RENDEZVOUS naming its host, or raise PCGC_RENDEZVOUS_TIMEOUT");
  return PCGC_ERR_IO;
}

/* ------------------------------------------------------------ the interface */

void pcgc_ctl_init_solo(pcgc_ctl *c) {
  memset(c, 0, sizeof *c);
  c->kind = PCGC_CTL_SOLO;
  c->size = 1;
}

pcgc_status pcgc_ctl_init_mpi(pcgc_ctl *c, pcgc_error *err) {
  pcgc_ctl_init_solo(c);
  mpi_impl *m = calloc(1, sizeof *m);
  if (!m) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  if (MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS) {
    free(m);
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot duplicate MPI_COMM_WORLD");
  }
  MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m->comm, &c->rank);
  MPI_Comm_size(m->comm, &c->size);
  c->kind = PCGC_CTL_MPI;
  c->impl = m;
  return PCGC_OK;
}

pcgc_status pcgc_ctl_init_tcp(pcgc_ctl *c, const pcgc_rendezvous *rv, uint64_t token, pcgc_error *err) {
  pcgc_ctl_init_solo(c);
  tcp *T = calloc(1, sizeof *T);
  int n = rv->size > 1 ? rv->size : 1;
  if (!T || !(T->fd = malloc((size_t)n * sizeof *T->fd))) {
    free(T);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  for (int k = 0; k < n; k++) T->fd[k] = -1;
  snprintf(T->where, sizeof T->where, strchr(rv->host, ':') ? "[%s]:%d" : "%s:%d", rv->host, rv->port);
  c->kind = PCGC_CTL_TCP;
  c->rank = rv->rank;
  c->size = rv->size;
  c->impl = T;
  double deadline = now() + rv->timeout_s;
  pcgc_status st = c->size == 1 ? PCGC_OK : c->rank == 0 ? serve(c, rv, token, deadline, err)
                                                          : join(c, rv, token, deadline, err);
  if (st) pcgc_ctl_destroy(c);
  return st;
}

void pcgc_ctl_destroy(pcgc_ctl *c) {
  if (c->kind == PCGC_CTL_MPI && c->impl) {
    mpi_impl *m = c->impl;
    MPI_Comm_free(&m->comm);
  } else if (c->kind == PCGC_CTL_TCP && c->impl) {
    tcp *T = c->impl;
    for (int k = 0; k < c->size; k++)
      if (T->fd[k] >= 0) close(T->fd[k]);
    free(T->fd);
  }
  free(c->impl);
  pcgc_ctl_init_solo(c);
}

static MPI_Comm comm_of(const pcgc_ctl *c) { return ((const mpi_impl *)c->impl)->comm; }

static pcgc_status mpi_fail(const pcgc_ctl *c, int rc, const char *what, pcgc_error *err) {
  char s[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, s, &n);
  return pcgc_error_set(err, PCGC_ERR_IO, "rank %d: MPI %s failed: %s", c->rank, what, s);
}

static pcgc_status too_big(size_t n, pcgc_error *err) {
  return pcgc_error_set(err, PCGC_ERR_UNSUPPORTED, "a control message of %zu bytes is more than MPI's int counts",
                        n);
}

/* MPI's int counts and displacements of byte counts (rank 0 only). */
static pcgc_status mpi_counts(const pcgc_ctl *c, size_t n, const size_t *counts, int **cnt, int **dsp,
                              pcgc_error *err) {
  if (n > INT32_MAX) return too_big(n, err);
  if (c->rank != 0) return PCGC_OK;
  *cnt = malloc((size_t)c->size * sizeof **cnt), *dsp = malloc((size_t)c->size * sizeof **dsp);
  if (!*cnt || !*dsp) {
    free(*cnt), free(*dsp);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
  }
  size_t off = 0;
  for (int r = 0; r < c->size; r++) {
    if (counts[r] > INT32_MAX || off > INT32_MAX) {
      free(*cnt), free(*dsp);
      return too_big(off + counts[r], err);
    }
    (*cnt)[r] = (int)counts[r], (*dsp)[r] = (int)off, off += counts[r];
  }
  return PCGC_OK;
}

pcgc_status pcgc_ctl_bcast(pcgc_ctl *c, void *buf, size_t n, pcgc_error *err) {
  if (c->size == 1) return PCGC_OK;
  if (c->kind == PCGC_CTL_MPI) {
    if (n > INT32_MAX) return too_big(n, err);
    int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, 0, comm_of(c));
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "broadcast", err);
  }
  pcgc_status st = PCGC_OK;
  if (c->rank != 0) return get(c, 0, OP_BCAST, buf, n, err);
  for (int r = 1; r < c->size && !st; r++) st = put(c, r, OP_BCAST, buf, n, err);
  return st;
}

/* Rank 0's side of a TCP gather (receiving) or scatter (sending): counts[r]
 * bytes with each rank r > 0, at its place in `all` after rank 0's own. */
static pcgc_status star(pcgc_ctl *c, uint32_t op, void *all, const size_t *counts, pcgc_error *err) {
  pcgc_status st = PCGC_OK;
  size_t off = counts[0];
  for (int r = 1; r < c->size && !st; r++) {
    char *at = (char *)all + off;
    st = op == OP_GATHER ? get(c, r, op, at, counts[r], err) : put(c, r, op, at, counts[r], err);
    off += counts[r];
  }
  return st;
}

pcgc_status pcgc_ctl_gather(pcgc_ctl *c, const void *mine, size_t n, void *all, const size_t *counts,
                            pcgc_error *err) {
  if (c->rank == 0 && n != counts[0])
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rank 0 gathers %zu bytes of its own, %zu expected", n, counts[0]);
  if (c->rank == 0 && n) memcpy(all, mine, n);
  if (c->size == 1) return PCGC_OK;
  if (c->kind == PCGC_CTL_MPI) {
    int *cnt = NULL, *dsp = NULL, rc;
    pcgc_status st = mpi_counts(c, n, counts, &cnt, &dsp, err);
    if (st) return st;
    /* rank 0's own bytes are in place already */
    rc = MPI_Gatherv(c->rank == 0 ? MPI_IN_PLACE : mine, (int)n, MPI_BYTE, all, cnt, dsp, MPI_BYTE, 0, comm_of(c));
    free(cnt), free(dsp);
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "gather", err);
  }
  if (c->rank != 0) return put(c, 0, OP_GATHER, mine, n, err);
  return star(c, OP_GATHER, all, counts, err);
}

pcgc_status pcgc_ctl_scatter(pcgc_ctl *c, const void *all, const size_t *counts, void *mine, size_t n,
                             pcgc_error *err) {
  if (c->rank == 0 && n != counts[0])
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rank 0 takes %zu bytes of the scatter, %zu expected", n, counts[0]);
  if (c->rank == 0 && n) memmove(mine, all, n);
  if (c->size == 1) return PCGC_OK;
  if (c->kind == PCGC_CTL_MPI) {
    int *cnt = NULL, *dsp = NULL, rc;
    pcgc_status st = mpi_counts(c, n, counts, &cnt, &dsp, err);
    if (st) return st;
    rc = MPI_Scatterv(all, cnt, dsp, MPI_BYTE, c->rank == 0 ? MPI_IN_PLACE : mine, (int)n, MPI_BYTE, 0, comm_of(c));
    free(cnt), free(dsp);
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "scatter", err);
  }
  if (c->rank != 0) return get(c, 0, OP_SCATTER, mine, n, err);
  return star(c, OP_SCATTER, (void *)all, counts, err); /* a scatter only reads `all` */
}

pcgc_status pcgc_ctl_sum(pcgc_ctl *c, double v, double *total, pcgc_error *err) {
  *total = v;
  if (c->size == 1) return PCGC_OK;
  if (c->kind == PCGC_CTL_MPI) {
    int rc = MPI_Reduce(&v, total, 1, MPI_DOUBLE, MPI_SUM, 0, comm_of(c));
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "sum", err);
  }
  if (c->rank != 0) return put(c, 0, OP_SUM, &v, sizeof v, err);
  pcgc_status st = PCGC_OK;
  for (int r = 1; r < c->size && !st; r++) {
    double x = 0;
    if (!(st = get(c, r, OP_SUM, &x, sizeof x, err))) *total += x;
  }
  return st;
}

pcgc_status pcgc_ctl_barrier(pcgc_ctl *c, pcgc_error *err) {
  if (c->size == 1) return PCGC_OK;
  if (c->kind == PCGC_CTL_MPI) {
    int rc = MPI_Barrier(comm_of(c));
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "barrier", err);
  }
  char b = 0;
  pcgc_status st = PCGC_OK;
  if (c->rank != 0) {
    if ((st = put(c, 0, OP_BARRIER, &b, 1, err))) return st;
    return get(c, 0, OP_BARRIER, &b, 1, err);
  }
  for (int r = 1; r < c->size && !st; r++) st = get(c, r, OP_BARRIER, &b, 1, err);
  for (int r = 1; r < c->size && !st; r++) st = put(c, r, OP_BARRIER, &b, 1, err);
  return st;
}

pcgc_status pcgc_ctl_send0(pcgc_ctl *c, const void *buf, size_t n, pcgc_error *err) {
  if (c->rank == 0) return pcgc_error_set(err, PCGC_ERR_INVALID, "rank 0 sends to itself");
  if (c->kind == PCGC_CTL_MPI) {
    if (n > INT32_MAX) return too_big(n, err);
    int rc = MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, comm_of(c));
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "send", err);
  }
  return put(c, 0, OP_SEND0, buf, n, err);
}

pcgc_status pcgc_ctl_recv(pcgc_ctl *c, int from, void *buf, size_t n, pcgc_error *err) {
  if (c->rank != 0 || from < 1 || from >= c->size)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "rank %d receives from rank %d", c->rank, from);
  if (c->kind == PCGC_CTL_MPI) {
    if (n > INT32_MAX) return too_big(n, err);
    int rc = MPI_Recv(buf, (int)n, MPI_BYTE, from, 1, comm_of(c), MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? PCGC_OK : mpi_fail(c, rc, "receive", err);
  }
  return get(c, from, OP_SEND0, buf, n, err);
}
