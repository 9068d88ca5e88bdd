/*
 * test_cuda_nccl.c — the CUDA backend's NCCL operations (cuda_kernels.h).
 *
 * One process, one GPU: a one-member communicator, on which a sum is the
 * identity. Each operation runs in the sequence the runtime uses: the buffer
 * is zeroed and refilled by work queued on the compute stream (a memset and
 * an adding box move: asynchronous), the operation, a move of the result into
 * another buffer on the compute stream, a download. Every element must come
 * back exactly (integer-valued f32 and i64 beyond 2^32). With one member
 * this checks the results and that the event plumbing breaks nothing; then
 * n == 0, refused dtypes, bad slots, roots and peers, and a communicator
 * left open for pcgc_cuda_close to tear down.
 *
 * Two GPUs, when the node has them: one thread per device, each with its own
 * context, joined in two 2-member communicators (one per direction, as the
 * runtime opens them). There the ordering is observable: all-reduce, a
 * started and waited all-reduce, broadcast and reduce must see the compute
 * stream's writes just before them and be seen by the moves after them; each
 * member sends before it receives, which completes only if a send does not
 * hold the compute stream (nor the host, on the pair's first message).
 *
 * Exit 0 when every check passes, 1 otherwise, 77 (skipped) without a GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "cuda_kernels.h"

#define SKIP 77
#define N ((int64_t)(1 << 20) + 3) /* not a multiple of any block size */

static atomic_int n_failed;

#define CHECK(cond, ...)                                         \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "FAIL: %s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                              \
      fputc('\n', stderr);                                       \
      atomic_fetch_add(&n_failed, 1);                            \
    }                                                            \
  } while (0)

/* the call succeeded; otherwise its message */
#define OK(call, err) CHECK((call) == PCGC_OK, "%s: %s", #call, (err).message)

/* the call failed with status `want` and a message containing `part` */
#define REFUSED(call, want, part, err)                                                       \
  do {                                                                                       \
    pcgc_error_clear(&(err));                                                                \
    pcgc_status st_ = (call);                                                                \
    CHECK(st_ == (want) && strstr((err).message, (part)) != NULL,                            \
          "%s: status %d (want %d), message \"%s\" (want \"%s\" in it)", #call, (int)st_,     \
          (int)(want), (err).message, (part));                                               \
  } while (0)

typedef enum kind { ALLREDUCE, START_WAIT, BROADCAST, REDUCE } kind;
static const char *const kind_name[] = {"all-reduce", "all-reduce start+wait", "broadcast", "reduce"};

/* integer-valued test data of member m: exact under sums of a few members */
static void fill(pcgc_dtype t, void *h, int m) {
  for (int64_t i = 0; i < N; i++)
    if (t == PCGC_F32) ((float *)h)[i] = (float)(i % 1000 - 500 + 1000 * m);
    else ((int64_t *)h)[i] = i * 4099 - 7 + ((int64_t)m << 40); /* beyond 2^32 */
}

static void compare(const char *what, pcgc_dtype t, const void *got, const void *want) {
  int64_t bad = 0;
  for (int64_t i = 0; i < N; i++) {
    int same = t == PCGC_F32 ? ((const float *)got)[i] == ((const float *)want)[i]
                             : ((const int64_t *)got)[i] == ((const int64_t *)want)[i];
    if (!same && bad++ < 5) {
      if (t == PCGC_F32)
        fprintf(stderr, "  %s: [%lld] = %.9g, want %.9g\n", what, (long long)i, (double)((const float *)got)[i],
                (double)((const float *)want)[i]);
      else
        fprintf(stderr, "  %s: [%lld] = %lld, want %lld\n", what, (long long)i,
                (long long)((const int64_t *)got)[i], (long long)((const int64_t *)want)[i]);
    }
  }
  CHECK(bad == 0, "%s of %s: %lld of %lld values wrong", what, pcgc_dtype_name(t), (long long)bad, (long long)N);
}

/* One member's device buffers for one dtype: its data, the buffer the
 * operation works on, and where the result is moved after it. */
typedef struct bufs {
  pcgc_dtype t;
  void *src, *buf, *out;
  void *host;
} bufs;

static int bufs_init(bufs *b, pcgc_cuda *cu, pcgc_dtype t, int member, pcgc_error *err) {
  size_t bytes = (size_t)N * pcgc_dtype_size(t);
  memset(b, 0, sizeof *b);
  b->t = t;
  b->host = malloc(bytes);
  if (!b->host) return -1;
  fill(t, b->host, member);
  if (!(b->src = pcgc_cuda_alloc(cu, bytes, err)) || !(b->buf = pcgc_cuda_alloc(cu, bytes, err)) ||
      !(b->out = pcgc_cuda_alloc(cu, bytes, err)))
    return -1;
  return pcgc_cuda_upload(cu, b->src, b->host, bytes, err) == PCGC_OK ? 0 : -1;
}

static void bufs_free(bufs *b, pcgc_cuda *cu) {
  pcgc_cuda_free(cu, b->src);
  pcgc_cuda_free(cu, b->buf);
  pcgc_cuda_free(cu, b->out);
  free(b->host);
}

/* buf = src, by a memset and a move queued on the compute stream */
static pcgc_status refill(pcgc_cuda *cu, bufs *b, pcgc_error *err) {
  const int64_t dims[1] = {N}, zero[1] = {0};
  pcgc_status st = pcgc_cuda_zero(cu, b->buf, (size_t)N * pcgc_dtype_size(b->t), err);
  /* f32: an adding move is a kernel; i64 cannot add: a device copy */
  return st ? st : pcgc_cuda_move(cu, b->t, b->t, 1, b->buf, dims, zero, b->src, dims, zero, zero, dims, b->t == PCGC_F32, err);
}

/* out = buf, queued; then b->host = out */
static pcgc_status fetch(pcgc_cuda *cu, bufs *b, pcgc_error *err) {
  const int64_t dims[1] = {N}, zero[1] = {0};
  pcgc_status st = pcgc_cuda_move(cu, b->t, b->t, 1, b->out, dims, zero, b->buf, dims, zero, zero, dims, false, err);
  return st ? st : pcgc_cuda_download(cu, b->host, b->out, (size_t)N * pcgc_dtype_size(b->t), err);
}

/* refill, the operation, fetch */
static pcgc_status run(pcgc_cuda *cu, pcgc_cuda_comm *c, bufs *b, kind k, int root, pcgc_error *err) {
  pcgc_status st = refill(cu, b, err);
  if (st) return st;
  switch (k) {
  case ALLREDUCE: st = pcgc_cuda_allreduce(cu, c, b->buf, N, b->t, err); break;
  case START_WAIT:
    st = pcgc_cuda_allreduce_start(cu, c, b->buf, N, b->t, 1, err);
    if (!st) st = pcgc_cuda_comm_wait(cu, 1, err);
    break;
  case BROADCAST: st = pcgc_cuda_broadcast(cu, c, b->buf, N, b->t, root, err); break;
  case REDUCE: st = pcgc_cuda_reduce(cu, c, b->buf, N, b->t, root, err); break;
  }
  return st ? st : fetch(cu, b, err);
}

/* ------------------------------------------------------------ one member */

static void test_one_member(pcgc_cuda *cu) {
  pcgc_error err;
  pcgc_error_clear(&err);
  char id[PCGC_CUDA_COMM_ID_BYTES];
  pcgc_cuda_comm *c = NULL, *left_open = NULL;
  bufs b[2];
  const pcgc_dtype types[2] = {PCGC_F32, PCGC_I64};

  if (pcgc_cuda_comm_id(id, &err) != PCGC_OK || pcgc_cuda_comm_open(cu, id, 1, 0, &c, &err) != PCGC_OK) {
    CHECK(0, "one-member communicator: %s", err.message);
    return;
  }
  OK(pcgc_cuda_comm_slots(cu, 2, &err), err);
  for (int d = 0; d < 2; d++) {
    if (bufs_init(&b[d], cu, types[d], 0, &err)) {
      CHECK(0, "buffers: %s", err.message);
      return;
    }
    void *want = malloc((size_t)N * 8);
    if (!want) {
      CHECK(0, "out of host memory");
      return;
    }
    fill(types[d], want, 0);
    for (int k = ALLREDUCE; k <= REDUCE; k++) {
      pcgc_status st = run(cu, c, &b[d], (kind)k, 0, &err);
      CHECK(st == PCGC_OK, "%s of %s: %s", kind_name[k], pcgc_dtype_name(types[d]), err.message);
      if (st == PCGC_OK) compare(kind_name[k], types[d], b[d].host, want);
    }
    free(want);
  }

  /* nothing to do: no buffer needed, no error */
  OK(pcgc_cuda_allreduce(cu, c, NULL, 0, PCGC_F32, &err), err);
  OK(pcgc_cuda_allreduce_start(cu, c, NULL, 0, PCGC_I64, 0, &err), err);
  OK(pcgc_cuda_comm_wait(cu, 0, &err), err);
  OK(pcgc_cuda_broadcast(cu, c, NULL, 0, PCGC_F32, 0, &err), err);
  OK(pcgc_cuda_reduce(cu, c, NULL, 0, PCGC_F32, 0, &err), err);

  /* refusals, each with a message naming the operation */
  REFUSED(pcgc_cuda_allreduce(cu, c, b[0].buf, 4, PCGC_F16, &err), PCGC_ERR_UNSUPPORTED, "all-reduce of f16", err);
  REFUSED(pcgc_cuda_broadcast(cu, c, b[0].buf, 4, PCGC_F16, 0, &err), PCGC_ERR_UNSUPPORTED, "broadcast of f16", err);
  REFUSED(pcgc_cuda_allreduce(cu, c, b[0].buf, -1, PCGC_F32, &err), PCGC_ERR_INVALID, "-1 elements", err);
  REFUSED(pcgc_cuda_allreduce_start(cu, c, b[0].buf, 4, PCGC_F32, 2, &err), PCGC_ERR_INVALID, "slot 2", err);
  REFUSED(pcgc_cuda_comm_wait(cu, -1, &err), PCGC_ERR_INVALID, "slot -1", err);
  REFUSED(pcgc_cuda_broadcast(cu, c, b[0].buf, 4, PCGC_F32, 1, &err), PCGC_ERR_INVALID, "root 1", err);
  REFUSED(pcgc_cuda_reduce(cu, c, b[0].buf, 4, PCGC_F32, -1, &err), PCGC_ERR_INVALID, "root -1", err);
  REFUSED(pcgc_cuda_send(cu, c, b[0].buf, 4, PCGC_F32, 0, &err), PCGC_ERR_INVALID, "itself", err);
  REFUSED(pcgc_cuda_recv(cu, c, b[0].buf, 4, PCGC_F32, 0, &err), PCGC_ERR_INVALID, "itself", err);
  REFUSED(pcgc_cuda_send(cu, c, b[0].buf, 4, PCGC_F32, 1, &err), PCGC_ERR_INVALID, "peer 1", err);
  REFUSED(pcgc_cuda_comm_open(cu, id, 2, 2, &left_open, &err), PCGC_ERR_INVALID, "rank 2 of 2", err);
  CHECK(left_open == NULL, "a refused open left a communicator");

  /* still usable after the refusals */
  pcgc_error_clear(&err);
  if (run(cu, c, &b[0], ALLREDUCE, 0, &err) == PCGC_OK) {
    float *want = malloc((size_t)N * sizeof *want);
    if (want) fill(PCGC_F32, want, 0);
    if (want) compare("all-reduce after refusals", PCGC_F32, b[0].host, want);
    free(want);
  } else {
    CHECK(0, "all-reduce after refusals: %s", err.message);
  }
  OK(pcgc_cuda_sync(cu, &err), err);
  pcgc_cuda_comm_close(cu, c);

  /* a second communicator, used and left open: pcgc_cuda_close closes it */
  if (pcgc_cuda_comm_id(id, &err) == PCGC_OK && pcgc_cuda_comm_open(cu, id, 1, 0, &left_open, &err) == PCGC_OK) {
    OK(pcgc_cuda_allreduce_start(cu, left_open, b[1].buf, N, PCGC_I64, 0, &err), err);
    OK(pcgc_cuda_sync(cu, &err), err); /* waits for the started all-reduce too */
  } else {
    CHECK(0, "second communicator: %s", err.message);
  }
  for (int d = 0; d < 2; d++) bufs_free(&b[d], cu);
  printf("one member: %s\n", atomic_load(&n_failed) ? "FAILED" : "ok");
}

/* ------------------------------------------------------------ two GPUs */

typedef struct member {
  int dev;                      /* device, and rank in comm a; 1 - dev in comm b */
  const char *id_a, *id_b;
  pthread_barrier_t *opened;
  atomic_int *n_open;           /* contexts opened, for both to agree before joining */
} member;

static void *two_member(void *arg) {
  member *m = arg;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_cuda *cu = pcgc_cuda_open(m->dev, &err); /* sets this thread's device */
  if (cu) atomic_fetch_add(m->n_open, 1);
  else CHECK(0, "device %d: %s", m->dev, err.message);
  pthread_barrier_wait(m->opened);
  if (atomic_load(m->n_open) != 2) {
    pcgc_cuda_close(cu);
    return NULL;
  }
  int r = m->dev, other = 1 - r;
  pcgc_cuda_comm *a = NULL, *b = NULL; /* a: 0 -> 1 (device 0 is rank 0), b: 1 -> 0 (device 1 is rank 0) */
  /* both members open a, then b: each open returns when both joined */
  if (pcgc_cuda_comm_open(cu, m->id_a, 2, r, &a, &err) || pcgc_cuda_comm_open(cu, m->id_b, 2, other, &b, &err)) {
    CHECK(0, "device %d: %s", r, err.message);
    pcgc_cuda_close(cu);
    return NULL;
  }
  OK(pcgc_cuda_comm_slots(cu, 2, &err), err);
  bufs f, l;
  void *mine = malloc((size_t)N * 8), *theirs = malloc((size_t)N * 8), *want = malloc((size_t)N * 8);
  if (!mine || !theirs || !want || bufs_init(&f, cu, PCGC_F32, r, &err) || bufs_init(&l, cu, PCGC_I64, r, &err)) {
    CHECK(0, "device %d: buffers: %s", r, err.message);
    exit(EXIT_FAILURE); /* the other member would wait for us forever */
  }
  char what[96];
  bufs *bs[2] = {&f, &l};
  for (int d = 0; d < 2; d++) {
    bufs *x = bs[d];
    size_t es = pcgc_dtype_size(x->t);
    fill(x->t, mine, r);
    fill(x->t, theirs, other);
    for (int k = ALLREDUCE; k <= REDUCE; k++) {
      int root = k == BROADCAST ? 1 : 0;
      pcgc_status st = run(cu, a, x, (kind)k, root, &err);
      snprintf(what, sizeof what, "device %d: %s", r, kind_name[k]);
      CHECK(st == PCGC_OK, "%s of %s: %s", what, pcgc_dtype_name(x->t), err.message);
      if (st || (k == REDUCE && r != root)) continue; /* a reduce leaves the others' buffers alone */
      if (k == BROADCAST) memcpy(want, root == r ? mine : theirs, (size_t)N * es);
      else
        for (int64_t i = 0; i < N; i++)
          if (x->t == PCGC_F32) ((float *)want)[i] = ((float *)mine)[i] + ((float *)theirs)[i];
          else ((int64_t *)want)[i] = ((int64_t *)mine)[i] + ((int64_t *)theirs)[i];
      compare(what, x->t, x->host, want);
    }
    /* each sends its data on its own direction, then receives the other's */
    pcgc_cuda_comm *to = r == 0 ? a : b, *from = r == 0 ? b : a;
    pcgc_status st = refill(cu, x, &err); /* buf = mine, queued */
    if (!st) st = pcgc_cuda_send(cu, to, x->buf, N, x->t, 1, &err);
    if (!st) st = pcgc_cuda_recv(cu, from, x->out, N, x->t, 0, &err);
    if (!st) st = pcgc_cuda_download(cu, x->host, x->out, (size_t)N * es, &err);
    if (!st) st = pcgc_cuda_sync(cu, &err); /* the send's end */
    snprintf(what, sizeof what, "device %d: send/receive", r);
    CHECK(st == PCGC_OK, "%s of %s: %s", what, pcgc_dtype_name(x->t), err.message);
    if (!st) compare(what, x->t, x->host, theirs);
  }
  OK(pcgc_cuda_sync(cu, &err), err);
  bufs_free(&f, cu);
  bufs_free(&l, cu);
  free(mine);
  free(theirs);
  free(want);
  pcgc_cuda_comm_close(cu, a); /* b is left to pcgc_cuda_close */
  pcgc_cuda_close(cu);
  return NULL;
}

static void test_two_gpus(void) {
  char msg[256] = "", id_a[PCGC_CUDA_COMM_ID_BYTES], id_b[PCGC_CUDA_COMM_ID_BYTES];
  int ndev = pcgc_cuda_device_count(msg, sizeof msg);
  if (ndev < 2) {
    printf("two GPUs: skipped (this node has %d)\n", ndev < 0 ? 0 : ndev);
    return;
  }
  pcgc_error err;
  pcgc_error_clear(&err);
  if (pcgc_cuda_comm_id(id_a, &err) || pcgc_cuda_comm_id(id_b, &err)) {
    CHECK(0, "communicator ids: %s", err.message);
    return;
  }
  int before = atomic_load(&n_failed);
  pthread_barrier_t opened;
  atomic_int n_open = 0;
  pthread_barrier_init(&opened, NULL, 2);
  member m[2] = {{0, id_a, id_b, &opened, &n_open}, {1, id_a, id_b, &opened, &n_open}};
  pthread_t th[2];
  int started = 0;
  for (; started < 2; started++)
    if (pthread_create(&th[started], NULL, two_member, &m[started]) != 0) break;
  if (started < 2) {
    fprintf(stderr, "FAIL: cannot start a thread\n");
    exit(EXIT_FAILURE); /* the started one waits at the barrier */
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&opened);
  printf("two GPUs: %s\n", atomic_load(&n_failed) != before ? "FAILED" : "ok");
}

int main(void) {
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_cuda *cu = pcgc_cuda_open(0, &err);
  if (!cu) {
    printf("%s: %s\n", err.status == PCGC_ERR_UNSUPPORTED ? "SKIP" : "FAIL", err.message);
    return err.status == PCGC_ERR_UNSUPPORTED ? SKIP : EXIT_FAILURE;
  }
  printf("device: %s\n", pcgc_cuda_describe(cu));
  test_one_member(cu);
  pcgc_cuda_close(cu);
  test_two_gpus();
  return atomic_load(&n_failed) ? EXIT_FAILURE : EXIT_SUCCESS;
}
