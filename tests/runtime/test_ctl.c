/*
 * test_ctl.c — the TCP control plane (runtime/ctl.c) with real processes on
 * the loopback: the test is rank 0, forked children are the other ranks.
 * Every operation is checked for the values it moves (8 MB through send0 to
 * cover partial reads and writes), and each way a rendezvous goes wrong
 * for the message it gives: a stray process of another plan turned away
 * while the run waits for the right one, a rank that never comes, no rank 0,
 * a rank that dies, ranks that disagree on the next operation, and malformed
 * environment variables.
 *
 * Under mpirun (ctest's test_ctl_mpi: 3 ranks) it runs the same collectives
 * over the MPI transport instead, each rank exiting non-zero on a wrong value.
 */
#define _GNU_SOURCE
#include <check.h>
#include <mpi.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctl.h"

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
  socklen_t n = sizeof a;
  ck_assert(getsockname(fd, (struct sockaddr *)&a, &n) == 0);
  close(fd);
  return ntohs(a.sin_port);
}

static pcgc_rendezvous rv_of(int port, int rank, int size, double timeout) {
  pcgc_rendezvous rv;
  memset(&rv, 0, sizeof rv);
  strcpy(rv.host, "127.0.0.1");
  rv.port = port, rv.rank = rank, rv.size = size, rv.timeout_s = timeout;
  return rv;
}

#define BIG (8u << 20)

/* What every rank does in the collectives test; returns 0 when every value
 * it received is right. */
static int collectives(pcgc_ctl *c) {
  pcgc_error err;
  pcgc_error_clear(&err);
  int me = c->rank, n = c->size, bad = 0;
  char msg[32] = "";
  if (me == 0) strcpy(msg, "hello from rank 0");
  if (pcgc_ctl_bcast(c, msg, sizeof msg, &err) || strcmp(msg, "hello from rank 0") != 0) bad |= 1;
  /* gather: rank r gives r + 1 bytes of value r */
  char mine[8], all[64];
  size_t counts[8];
  memset(mine, me, sizeof mine);
  for (int r = 0; r < n; r++) counts[r] = (size_t)r + 1;
  if (pcgc_ctl_gather(c, mine, (size_t)me + 1, all, counts, &err)) bad |= 2;
  for (int r = 0, at = 0; me == 0 && r < n; at += r + 1, r++)
    for (int k = 0; k <= r; k++) bad |= all[at + k] != r ? 2 : 0;
  /* scatter: rank r gets r + 2 bytes of value 10 + r */
  for (int r = 0, at = 0; r < n; at += r + 2, r++) {
    counts[r] = (size_t)r + 2;
    memset(all + at, 10 + r, (size_t)r + 2);
  }
  char got[16];
  memset(got, 0, sizeof got);
  if (pcgc_ctl_scatter(c, all, counts, got, (size_t)me + 2, &err)) bad |= 4;
  for (int k = 0; k < me + 2; k++) bad |= got[k] != 10 + me ? 4 : 0;
  double total = 0;
  if (pcgc_ctl_sum(c, me + 0.5, &total, &err)) bad |= 8;
  if (me == 0 && total != 0.5 * n + n * (n - 1) / 2.0) bad |= 8;
  if (pcgc_ctl_barrier(c, &err)) bad |= 16;
  /* send0: three ints, then 8 MB of a pattern */
  unsigned char *big = malloc(BIG);
  if (me > 0) {
    int three[3] = {me, me * me, -me};
    for (unsigned k = 0; k < BIG; k++) big[k] = (unsigned char)(k * 7 + (unsigned)me);
    if (pcgc_ctl_send0(c, three, sizeof three, &err) || pcgc_ctl_send0(c, big, BIG, &err)) bad |= 32;
  } else {
    for (int r = 1; r < n; r++) {
      int three[3];
      if (pcgc_ctl_recv(c, r, three, sizeof three, &err) || three[0] != r || three[1] != r * r || three[2] != -r)
        bad |= 32;
      memset(big, 0, BIG);
      if (pcgc_ctl_recv(c, r, big, BIG, &err)) bad |= 64;
      for (unsigned k = 0; k < BIG; k++) bad |= big[k] != (unsigned char)(k * 7 + (unsigned)r) ? 64 : 0;
    }
  }
  free(big);
  int code = me == 0 ? 42 : 0;
  if (pcgc_ctl_bcast(c, &code, sizeof code, &err) || code != 42) bad |= 128;
  return bad;
}

/* Forks a process that joins as `rank` of `size` with `token` and then runs
 * `what`: 0 collectives, 1 nothing, 2 a sum where rank 0 gathers. Its exit
 * code: 0 fine, 100 + the error's status when the rendezvous failed, else
 * what went wrong; `msg` receives its error message through a pipe. */
static pid_t spawn(int port, int rank, int size, uint64_t token, double timeout, int what, int *msg_fd) {
  int p[2];
  ck_assert(pipe(p) == 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    close(p[0]);
    pcgc_ctl c;
    pcgc_error err;
    pcgc_error_clear(&err);
    pcgc_rendezvous rv = rv_of(port, rank, size, timeout);
    int code = 0;
    if (pcgc_ctl_init_tcp(&c, &rv, token, &err) != PCGC_OK) {
      code = 100 - err.status;
    } else if (what == 0) {
      code = collectives(&c);
    } else if (what == 2) {
      double t;
      code = pcgc_ctl_sum(&c, 1.0, &t, &err) ? 3 : 0;
    }
    ssize_t w = write(p[1], err.message, strlen(err.message) + 1);
    (void)w;
    if (code == 0) pcgc_ctl_destroy(&c);
    _exit(code);
  }
  close(p[1]);
  *msg_fd = p[0];
  return pid;
}

static int reap(pid_t pid, int fd, char *msg, size_t n) {
  int status = 0;
  ck_assert(waitpid(pid, &status, 0) == pid);
  ssize_t k = read(fd, msg, n - 1);
  msg[k > 0 ? k : 0] = 0;
  close(fd);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

START_TEST(collectives_over_four_processes) {
  int port = free_port(), fds[4];
  pid_t kids[4];
  for (int r = 1; r < 4; r++) kids[r] = spawn(port, r, 4, 77, 20, 0, &fds[r]);
  pcgc_ctl c;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_rendezvous rv = rv_of(port, 0, 4, 20);
  ck_assert_int_eq(pcgc_ctl_init_tcp(&c, &rv, 77, &err), PCGC_OK);
  ck_assert_int_eq(c.kind, PCGC_CTL_TCP);
  ck_assert_int_eq(c.size, 4);
  ck_assert_int_eq(collectives(&c), 0);
  pcgc_ctl_destroy(&c);
  char msg[1024];
  for (int r = 1; r < 4; r++) ck_assert_msg(reap(kids[r], fds[r], msg, sizeof msg) == 0, "rank %d: %s", r, msg);
}
END_TEST

START_TEST(another_plan_is_turned_away) {
  int port = free_port(), f1, f2;
  /* a stray process of another plan comes first; the right one a little later */
  pid_t stray = spawn(port, 1, 2, 99, 20, 1, &f1);
  char msg[1024];
  pcgc_ctl c;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_rendezvous rv = rv_of(port, 0, 2, 20);
  pid_t right = -1;
  if (fork() == 0) { /* rank 0 in its own process, so this one can order the arrivals */
    int rc = pcgc_ctl_init_tcp(&c, &rv, 5, &err) == PCGC_OK ? collectives(&c) : 99;
    _exit(rc);
  }
  ck_assert_int_eq(reap(stray, f1, msg, sizeof msg), 100 - PCGC_ERR_INVALID);
  ck_assert_msg(strstr(msg, "turned away") && strstr(msg, "another plan"), "%s", msg);
  right = spawn(port, 1, 2, 5, 20, 0, &f2);
  ck_assert_msg(reap(right, f2, msg, sizeof msg) == 0, "%s", msg);
  int status = 0;
  wait(&status);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

START_TEST(a_rank_that_never_comes) {
  int port = free_port(), f1;
  pid_t one = spawn(port, 1, 3, 1, 20, 1, &f1);
  pcgc_ctl c;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_rendezvous rv = rv_of(port, 0, 3, 1);
  ck_assert_int_eq(pcgc_ctl_init_tcp(&c, &rv, 1, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, "2 of 3 processes joined within 1 s (missing rank 2)"), "%s", err.message);
  ck_assert_int_eq(c.kind, PCGC_CTL_SOLO); /* nothing left open */
  char msg[1024];
  reap(one, f1, msg, sizeof msg); /* it joined, then its rank 0 went away */
}
END_TEST

START_TEST(no_rank_zero) {
  pcgc_ctl c;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_rendezvous rv = rv_of(free_port(), 1, 2, 1);
  ck_assert_int_eq(pcgc_ctl_init_tcp(&c, &rv, 1, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, "rank 1: no answer from rank 0 at the rendezvous 127.0.0.1:") &&
                    strstr(err.message, "within 1 s"),
                "%s", err.message);
  ck_assert_msg(strstr(err.hint, "start rank 0 too"), "%s", err.hint);
}
END_TEST

START_TEST(a_rank_that_dies) {
  int port = free_port(), f1;
  pid_t one = spawn(port, 1, 2, 1, 20, 1, &f1); /* joins, then exits */
  pcgc_ctl c;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_rendezvous rv = rv_of(port, 0, 2, 20);
  ck_assert_int_eq(pcgc_ctl_init_tcp(&c, &rv, 1, &err), PCGC_OK);
  char msg[1024];
  reap(one, f1, msg, sizeof msg);
  double t;
  ck_assert_int_eq(pcgc_ctl_sum(&c, 1, &t, &err), PCGC_ERR_IO);
  ck_assert_msg(strstr(err.message, "rank 1 closed its connection") && strstr(err.message, "while receiving from"),
                "%s", err.message);
  pcgc_ctl_destroy(&c);
}
END_TEST

START_TEST(ranks_that_disagree) {
  int port = free_port(), f1;
  pid_t one = spawn(port, 1, 2, 1, 20, 2, &f1); /* sums while rank 0 gathers */
  pcgc_ctl c;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_rendezvous rv = rv_of(port, 0, 2, 20);
  ck_assert_int_eq(pcgc_ctl_init_tcp(&c, &rv, 1, &err), PCGC_OK);
  char mine[4] = {0}, all[12];
  size_t counts[2] = {4, 8};
  ck_assert_int_eq(pcgc_ctl_gather(&c, mine, 4, all, counts, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "rank 0 expected a gather of 8 bytes from rank 1 but got a sum of 8"), "%s",
                err.message);
  pcgc_ctl_destroy(&c);
  char msg[1024];
  reap(one, f1, msg, sizeof msg);
}
END_TEST

START_TEST(environment) {
  pcgc_rendezvous rv;
  pcgc_error err;
  bool present = true;
  unsetenv("PCGC_RENDEZVOUS");
  pcgc_error_clear(&err);
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_OK);
  ck_assert(!present);
  setenv("PCGC_RENDEZVOUS", "node7:29511", 1);
  setenv("PCGC_RANK", "3", 1);
  setenv("PCGC_WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1); /* torchrun's name, where pcgc's is unset */
  unsetenv("PCGC_LOCAL_RANK");
  unsetenv("PCGC_RENDEZVOUS_TIMEOUT");
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_OK);
  ck_assert(present);
  ck_assert_str_eq(rv.host, "node7");
  ck_assert_int_eq(rv.port, 29511);
  ck_assert_int_eq(rv.rank, 3);
  ck_assert_int_eq(rv.size, 8);
  ck_assert_int_eq(rv.local_rank, 1);
  ck_assert(rv.timeout_s == 300);
  setenv("PCGC_RENDEZVOUS", "[fe80::1]:80", 1);
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_OK);
  ck_assert_str_eq(rv.host, "fe80::1");
  ck_assert_int_eq(rv.port, 80);
  static const char *bad[] = {"node7", "node7:", ":29511", "node7:0", "node7:65536", "node7:29x", "[::1]29511"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    setenv("PCGC_RENDEZVOUS", bad[i], 1);
    pcgc_error_clear(&err);
    ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_ERR_INVALID);
    ck_assert_msg(strstr(err.message, "expected HOST:PORT with a port in [1, 65535]"), "%s: %s", bad[i], err.message);
  }
  setenv("PCGC_RENDEZVOUS", "node7:29511", 1);
  setenv("PCGC_RANK", "8", 1);
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "PCGC_RANK=8: not an integer in [0, 7]"), "%s", err.message);
  unsetenv("PCGC_RANK");
  unsetenv("RANK");
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "but PCGC_RANK (or RANK) is not"), "%s", err.message);
  setenv("RANK", "2", 1);
  setenv("PCGC_RENDEZVOUS_TIMEOUT", "0", 1);
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_ERR_INVALID);
  ck_assert_msg(strstr(err.message, "PCGC_RENDEZVOUS_TIMEOUT=0: not an integer in [1, 86400]"), "%s", err.message);
  setenv("PCGC_RENDEZVOUS_TIMEOUT", "5", 1);
  ck_assert_int_eq(pcgc_rendezvous_from_env(&rv, &present, &err), PCGC_OK);
  ck_assert_int_eq(rv.rank, 2);
  ck_assert(rv.timeout_s == 5);
  unsetenv("PCGC_RENDEZVOUS");
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("ctl");
  TCase *t = tcase_create("tcp");
  tcase_set_timeout(t, 60);
  tcase_add_test(t, collectives_over_four_processes);
  tcase_add_test(t, another_plan_is_turned_away);
  tcase_add_test(t, a_rank_that_never_comes);
  tcase_add_test(t, no_rank_zero);
  tcase_add_test(t, a_rank_that_dies);
  tcase_add_test(t, ranks_that_disagree);
  tcase_add_test(t, environment);
  suite_add_tcase(s, t);
  return s;
}

int main(void) {
  if (getenv("OMPI_COMM_WORLD_SIZE")) { /* one rank of test_ctl_mpi */
    MPI_Init(NULL, NULL);
    pcgc_ctl c;
    pcgc_error err;
    pcgc_error_clear(&err);
    int bad = pcgc_ctl_init_mpi(&c, &err) != PCGC_OK ? 256 : collectives(&c);
    if (!bad && c.kind != PCGC_CTL_MPI) bad = 512;
    if (bad) fprintf(stderr, "test_ctl over MPI: rank %d: failed checks %#x %s\n", c.rank, bad, err.message);
    else if (c.rank == 0) printf("test_ctl over MPI: %d ranks agree\n", c.size);
    pcgc_ctl_destroy(&c);
    MPI_Finalize();
    return bad ? EXIT_FAILURE : EXIT_SUCCESS;
  }
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
