/*
 * search.h — how pcgc finds a parallel plan: the search's simulator (the
 * estimate it ranks candidates by), the baseline strategies, the expert
 * grid (data × tensor × pipeline parallelism) and `pcgc compile`, the
 * rule-driven joint search, the device-mapping DP, and plan files.
 * Everything here runs without a GPU.
 *
 * Layers: pcg/ (graphs) ← cost/ (machine and cost model, cost.h) ←
 * taskgraph/ (one iteration's pieces, stages, recomputation and tasks,
 * taskgraph.h) ← search/ (this) and codegen/. This header includes the two
 * below it, so a user of the search needs only it.
 */
#ifndef PCGC_SEARCH_H
#define PCGC_SEARCH_H

#include <stdbool.h>
#include <stddef.h>

#include "cost.h"
#include "pcg.h"
#include "taskgraph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================
 * Simulator (search/sim.c) and baseline strategies (search/strategy.c).
 * pcgc_simulate states every modelling rule; sim.c explains the algorithm.
 * Views, task kinds, timing options and results are taskgraph.h's.
 *
 * The simulator builds the task graph of one training iteration of a
 * parallel graph whose nodes have machine views, and runs it event by event:
 * every device has a compute stream and link ports, each running one task
 * at a time (links in the order tasks become ready, compute streams by
 * rank: see pcgc_simulate); communication overlaps compute whenever the
 * dependencies allow.
 *
 *     pcgc_graph *pg; pcgc_mapping mp;
 *     pcgc_strategy_build(PCGC_STRATEGY_DATA_PARALLEL, seq, &m, 0, &pg, &mp, &err);
 *     pcgc_sim_options o;
 *     pcgc_sim_options_default(&o);
 *     pcgc_sim_result r;
 *     if (pcgc_simulate(pg, &mp, &m, &o, &r, &err) == PCGC_OK)
 *       pcgc_sim_report(stdout, &r, &m, "bert_large, data-parallel");
 *     pcgc_sim_result_destroy(&r);
 *     pcgc_mapping_destroy(&mp);
 *     pcgc_graph_free(pg);
 * ================================================================== */

/* Simulates one training iteration (forward, backward, gradient
 * synchronisation, optimizer step) of the typed parallel graph g with views
 * mp on machine m. The task graph:
 *   - ordinary op: a forward task per output piece and micro-batch on the
 *     piece's device, timed by pcgc_cost_node_time, and its backward task
 *     (for ops with a gradient path to the loss and an input that needs a
 *     gradient); the loss's backward starts the backward pass;
 *   - an input piece on another device: a transfer of the piece (one per
 *     piece and destination), and in backward its gradient sent back;
 *   - partition, combine, pipeline, unpipeline: a transfer of every
 *     overlapping part (pcgc_relayout_cells) between pieces on different
 *     devices (with the same sum and replica index), reversed in backward;
 *     between pieces on the same device a copy task (in backward one that
 *     adds), as the program copies them (pcgc_cost_copy_time);
 *   - replicate: the piece sent to each other device holding a copy, point
 *     to point to one device, a broadcast collective to two or more;
 *     backward adds the copies' gradients like a reduce;
 *   - reduce: partial sums from one other device come point to point and an
 *     add task sums them; from two or more, one reduce collective over the
 *     group, timed as an all-reduce (a ring reduce is a reduce-scatter and a
 *     gather, the all-reduce's two phases); backward sends the gradient back
 *     like a replicate;
 *   - weights: the devices that read a weight element each keep a copy;
 *     after the last backward task that reads it, the copies' gradients are
 *     all-reduced over those devices (data parallelism's gradient
 *     synchronisation, overlapping the rest of backward), then each device
 *     runs an optimizer task on its piece;
 *   - zeroing: as the program zeroes every gradient once a step before the
 *     first backward adds into it, a backward task also takes
 *     pcgc_cost_fill_time of each gradient it is the first to add into (its
 *     producer's on the producer's device, or the one received on this
 *     device), and an optimizer task that of its weight's gradient;
 *   - staging: every transfer is the sender's copy of its bytes into a send
 *     buffer, the message, and the receiver's copy out of it (adding in
 *     backward), the copies on the two compute streams (PCGC_TASK_STAGE,
 *     taken first when a stream comes free, earlier micro-batches first);
 *     a broadcast, reduce or batch-norm all-reduce holds its members'
 *     streams for its time plus a copy in and one out, as the program
 *     stages them;
 *   - batch norm sharded over its batch (pcgc_bn_synced): each piece's
 *     kernel is two tasks of half its time, with the blocking all-reduce of
 *     its channel group's statistics (2 f64 per channel) between them,
 *     forward and backward, as codegen lowers it;
 *   - pipelined loss: micro-batches in o->schedule's order;
 *   - o->recompute: the graph is cut at bottleneck tensors (one tensor, not
 *     a partial sum, carries everything from one part to the next: the
 *     layer boundaries of a transformer) into units of about sqrt(n) of its
 *     n computed nodes; a kernel's output that crosses no cut is not kept
 *     but computed again before its backward, whose task takes the
 *     forward's time on top.
 * Each device's compute stream runs one task at a time; when it comes free
 * it takes, of the tasks ready by then, forward before backward, the oldest
 * micro-batch first, forward in topological order and backward in reverse,
 * optimizer updates last (in the order they become ready). So a pipeline
 * stage takes each micro-batch through all its operators before the next,
 * GPipe's backward goes micro-batch by micro-batch, and under 1F1B a
 * forward the in-flight limit allows goes before a waiting backward. Link
 * ports serve transfers and collectives first come, first served, each
 * starting once every port it holds is free, except that a transfer or a
 * blocking collective passes a gradient all-reduce that runs beside the
 * computation (links interleave a long all-reduce with short messages;
 * the all-reduce is not slowed, an optimistic bound); all-reduces wait for
 * everything before them. codegen/predict.c shares the rule.
 * Memory per device (pcgc_cost_memory): the weight pieces it keeps (with
 * gradients and optimizer state), activations (every output of a kernel but
 * the loss, every piece received in forward, data pieces read) of every
 * micro-batch under GPipe or of at most s-k under 1F1B, and message
 * staging as codegen's program holds it: the transfers it has sent and
 * that are not received yet, estimated as two micro-batches of the node
 * whose transfers from the device are the largest (at most all it sends),
 * plus the largest transfer it receives or broadcast/reduce it takes part
 * in; a weight's gradient all-reduce works in place. Its backward
 * workspace: the gradients the backward piece that holds the most has at
 * once (its outputs' and its inputs', one micro-batch). With
 * o->recompute, kernel outputs inside a unit count once, for the largest
 * unit on the device: one micro-batch of one unit is recomputed at a time.
 * Errors: bad views, a graph that is not typed, out of memory. r is zeroed
 * first and owns memory after PCGC_OK (pcgc_sim_result_destroy). */
pcgc_status pcgc_simulate(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m,
                          const pcgc_sim_options *o, pcgc_sim_result *r, pcgc_error *err);

/* What one search's simulations share (pcgc_sim_options.memo): the
 * operators found built alike across the dp copies, keyed by what that
 * depends on (the operator, its attributes, its and its inputs' types,
 * views and kinds, the copies' count and stride, the device count). An
 * operator that reads a model input through no weight is checked every time
 * (its pairing is shared with other readers). Thread-safe. */
typedef struct pcgc_sim_memo pcgc_sim_memo;
pcgc_status pcgc_sim_memo_new(pcgc_sim_memo **out, pcgc_error *err);
void pcgc_sim_memo_free(pcgc_sim_memo *memo);
/* Lookups that found an operator, and those that did not (it was checked). */
void pcgc_sim_memo_stats(const pcgc_sim_memo *memo, int64_t *hits, int64_t *misses);

/* ------------------------------------------------- baseline strategies */

typedef enum pcgc_strategy {
  PCGC_STRATEGY_SEQUENTIAL,     /* every operator on device 0 */
  PCGC_STRATEGY_DATA_PARALLEL,  /* every data input partitioned on dim 0 (the batch)
                                   by N, every weight replicated N ways, every
                                   operator's piece p on device p */
  PCGC_STRATEGY_COUNT
} pcgc_strategy;

const char *pcgc_strategy_name(pcgc_strategy s);           /* "sequential", "data-parallel" */
int pcgc_strategy_from_name(const char *name);             /* -1 if unknown */

/* From a typed sequential graph (no parallel operators), the parallel graph
 * (*out, typed; caller frees) and its mapping (caller destroys) of baseline
 * s on n_devices devices of m (0: all of them; sequential uses one). Data
 * parallelism inserts partition/replicate after every source and re-infers,
 * so the sequential operators take the sharded types; a batch that N does
 * not divide is an error naming the input. */
pcgc_status pcgc_strategy_build(pcgc_strategy s, const pcgc_graph *seq, const pcgc_machine *m, int n_devices,
                                pcgc_graph **out, pcgc_mapping *mp, pcgc_error *err);

/* What `pcgc simulate` does: builds baseline `strategy` (a name) of the
 * sequential graph `seq` on m, simulates it with options o (NULL: defaults)
 * and prints the report, titled with the model, strategy and machine, to f. */
pcgc_status pcgc_simulate_strategy(const pcgc_graph *seq, const char *strategy, const pcgc_machine *m, int n_devices,
                                   const pcgc_sim_options *o, FILE *f, pcgc_error *err);

/* ==================================================================
 * Expert strategies and compile (search/expert.c, search/strategy_file.c)
 *
 * The strategies an expert would try by hand, built from a sequential
 * graph, costed by the simulator, the fastest that fits in memory kept:
 *
 *   dp  data parallel degree b: data inputs partitioned on dim 0 (the
 *       batch), weights replicated b ways (as the data-parallel baseline);
 *   tp  tensor (Megatron) parallel degree t: the Megatron rules of the rule
 *       library (megatron_*, *_heads; then the column split of embeddings
 *       and of single linears whose weight outweighs the activations they
 *       touch) applied with degree t to every match, greedily, before dp;
 *   pp  pipeline stages s: contiguous ranges of the sequential graph's
 *       order with balanced forward FLOPs, stage k on devices
 *       [k·b·t, (k+1)·b·t); micro: micro-batches m, a pipeline(dim=0,
 *       degree=m) after every data input's partition.
 *
 * Views come from a greedy pass in topological order: each node takes,
 * among a few candidate views inside its stage's device block (its pieces
 * spread evenly over the block, its main producer's view, consecutive
 * devices), the one that moves the fewest bytes from its producers' pieces.
 *
 *     pcgc_compile_options o;
 *     pcgc_compile_options_default(&o);
 *     pcgc_compile_result r;
 *     if (pcgc_compile(seq, &m, &o, &r, &err) == PCGC_OK)
 *       printf("dp %d tp %d pp %d: %g s\n", r.choice.dp, r.choice.tp, r.choice.pp, r.sim.iteration_time);
 *     pcgc_compile_result_destroy(&r);
 * ================================================================== */

/* Degrees of an expert strategy; devices used = dp × tp × pp. */
typedef struct pcgc_expert_choice {
  int dp, tp, pp, micro;
  pcgc_schedule schedule;  /* order of the micro-batches: compile tries 1F1B beside
                              GPipe for pipelined candidates, which holds fewer
                              micro-batches' activations per stage */
  bool recompute;          /* activations recomputed (pcgc_sim_options.recompute):
                              tried for candidates out of memory otherwise */
  int zero;                /* ZeRO stage (pcgc_sim_options.zero): optimizer state
                              sharded over the data-parallel copies (1), and their
                              gradients (2, with one micro-batch): tried in turn for
                              candidates with dp > 1 out of memory otherwise, before
                              recompute */
} pcgc_expert_choice;

/* Field by field (the struct has padding, so memcmp is wrong). */
bool pcgc_expert_choice_equal(const pcgc_expert_choice *a, const pcgc_expert_choice *b);

/* A sequential graph prepared for expert strategies: the rule library
 * loaded once, the Megatron rewrite cached per degree. */
typedef struct pcgc_expert pcgc_expert;

/* seq must stay alive and unchanged while x is used; rules_dir NULL means
 * pcgc_rules_default_dir(). Errors: a graph that is not typed or already
 * parallel, rules that do not load. */
pcgc_status pcgc_expert_new(const pcgc_graph *seq, const pcgc_machine *m, const char *rules_dir, pcgc_expert **out,
                            pcgc_error *err);
void pcgc_expert_free(pcgc_expert *x);   /* accepts NULL */

/* How many rule applications tensor parallelism of degree t makes (0: no
 * Megatron rule matches, so tp = t is not a strategy of this model). */
int pcgc_expert_tp_matches(pcgc_expert *x, int t, pcgc_error *err);
/* The batch (dim 0 of the data inputs; the smallest when they differ, 0
 * when there is none) and the number of matrix operators (linear, matmul,
 * conv2d, attention...), which bounds pp. */
int64_t pcgc_expert_batch(const pcgc_expert *x);
int pcgc_expert_layers(const pcgc_expert *x);

/* Builds strategy c: the typed parallel graph (*out, caller frees) and its
 * mapping (caller destroys). dp × tp × pp must not exceed the machine; the
 * batch must be divisible by dp × micro. tp = pp = micro = 1 gives exactly
 * the data-parallel baseline on dp devices (sequential when dp = 1). */
pcgc_status pcgc_expert_build(pcgc_expert *x, pcgc_expert_choice c, pcgc_graph **out, pcgc_mapping *mp,
                              pcgc_error *err);

/* Greedy views (search/views.c) for the typed parallel graph pg in
 * topological order `order` with resident nodes `res`: node x goes into the
 * block of B devices starting at stage[x] * B, at the view (of: its pieces
 * spread evenly over the block, its main producer's, the block's first
 * device, stride t) that moves the fewest bytes of its reads. view has
 * pg->n_nodes entries. memo (may be NULL): the nodes' reads, kept by their
 * content (pcgc_views_memo; m is the machine it is keyed by), so that the
 * rewrites of one graph work out only their new nodes' reads. */
struct pcgc_views_memo;
pcgc_status pcgc_views_place(const pcgc_graph *pg, const int *order, const bool *res, const int *stage, int B, int t,
                             const pcgc_machine *m, struct pcgc_views_memo *memo, pcgc_view *view, pcgc_error *err);

/* Views for g, a rewrite of prev mapped by prev_mp: every node keeps its
 * stage (its view's start / block) by name (rewrite nodes "<anchor>/..." by
 * their anchor's), then the greedy placement above within blocks of `block`
 * devices (t: the tensor-parallel degree, a candidate stride). */
pcgc_status pcgc_views_replace(const pcgc_graph *g, const pcgc_graph *prev, const pcgc_mapping *prev_mp, int block,
                               int t, const pcgc_machine *m, struct pcgc_views_memo *memo, pcgc_mapping *out,
                               pcgc_error *err);

struct pcgc_ruleset; /* substitutions/substitutions.h */

/* ------------------------------------------------------ joint search
 * The rule-driven joint search (search/joint.c): best-first over parallel
 * graphs rewritten by rule instances, from a start strategy (the expert
 * result), each costed by the simulator with views re-placed
 * (pcgc_views_replace). Deterministic for the same inputs unless the time
 * limit cuts it short. */

/* Where a running joint search stands, for progress displays. */
typedef struct pcgc_joint_progress {
  int segment, segments;   /* 1-based segment being searched, of how many (0, 0: whole graph) */
  int expanded, evaluated; /* graphs expanded, rewrites simulated (this segment or graph) */
  double start, best;      /* s, simulated times of the start and the best found */
} pcgc_joint_progress;

typedef struct pcgc_joint_options {
  int budget;            /* graphs expanded at most (default 4) */
  double alpha;          /* keep candidates up to alpha x the best (default 1.05) */
  double time_limit;     /* s (default 30; <= 0: none) */
  int max_matches;       /* matches per instance per expansion (default 64; 0: all) */
  int max_held;          /* graphs held in the heap at most (default 32; 0: no limit):
                            past it a new graph replaces the worst, which bounds memory */
  const pcgc_sim_options *sim;  /* NULL: defaults */
  FILE *log;             /* a line per candidate when not NULL */
  int segment_nodes;     /* split a graph of more than 2x this many computed nodes
                            at bottleneck tensors into segments of about this many,
                            and search each alone; identical segments (the layers
                            of a transformer) are searched once (default 40; 0:
                            never split). See pcgc_joint_search. */
  /* called after each graph expanded and every 32 rewrites simulated (NULL:
   * never) */
  void (*progress)(void *ctx, const pcgc_joint_progress *p);
  void *progress_ctx;
  bool views_dp;         /* also map each rewrite by the device-mapping DP
                            (pcgc_views_dp) and keep its views when they simulate
                            faster than the greedy placement's (default true) */
  struct pcgc_views_memo *memo;  /* the DP's shared terms (NULL: one for the search) */
  int alts;             /* runner-ups kept (pcgc_joint_result.alt; default
                            PCGC_JOINT_ALTS, at most that; segments keep none) */
  bool branches;         /* then narrow the branches of fork-join regions (an
                            inception module's towers) onto disjoint device
                            groups where that simulates faster (default true;
                            trace lines "@branches S... at CONCAT") */
  int threads;           /* rewrites simulated at once, on worker threads (default
                            pcgc_threads_default(); 1: one at a time); the result
                            does not depend on it */
} pcgc_joint_options;

void pcgc_joint_options_default(pcgc_joint_options *o);

/* Runner-ups of a joint search: the next fastest graphs it found. */
#define PCGC_JOINT_ALTS 3

typedef struct pcgc_joint_alt {
  pcgc_graph *graph;
  pcgc_mapping mapping;
  double time;           /* its simulated iteration time, s */
  char *trace;           /* the rewrites from the start, '\n'-joined (as pcgc_joint_result.trace) */
} pcgc_joint_alt;

typedef struct pcgc_joint_result {
  pcgc_graph *graph;     /* the best graph found (the start when nothing beat it) */
  pcgc_mapping mapping;
  double time;           /* its simulated iteration time, s */
  double start_time;     /* the start's */
  int instances;         /* rule instances for this machine and graph */
  int expanded, evaluated, duplicates, refused, improvements;
  int wide;              /* of the evaluated: a rule applied everywhere it matches */
  int dropped;           /* graphs dropped because the heap was full */
  int dp_better;         /* of the evaluated: the DP's views beat the greedy's */
  char last_rule[160];   /* the rule of the last improvement */
  bool budget_hit, time_hit;
  bool exhausted;        /* stopped with no graph left within alpha x the best */
  double seconds;
  int64_t alike_hits;    /* operators whose dp copies a simulation found alike */
  int64_t alike_misses;  /* by the memo (pcgc_sim_memo), and those it checked */
  /* segmented search (0 segments: the graph was searched whole) */
  int segments;          /* the graph split into this many */
  int segments_searched; /* distinct segments searched (the rest are copies) */
  int segments_improved; /* segments replaced by a faster rewrite */
  bool splice_rejected;  /* the spliced graph simulated no faster: start kept */
  /* How graph was made from the start, one rewrite per line (syntax below;
   * pcgc_joint_replay applies them again). n_trace 0 and untraced false:
   * graph is the start. untraced: graph is a rewrite whose steps could not
   * be recorded (a segmented search whose splice the replay of its
   * translated steps does not reproduce); trace is then empty. */
  int n_trace;
  char **trace;          /* owned, like every line */
  bool untraced;
  /* A search of the whole graph (not segmented) keeps the PCGC_JOINT_ALTS
   * rewrites that simulated fastest after graph (distinct, fastest first,
   * each within alpha of the best when it was found; not the start), so that
   * pcgc_compile can compare their programs with graph's, as it does the
   * expert grid's best few (pcgc_compile_options.program_time) */
  int n_alt;
  pcgc_joint_alt alt[PCGC_JOINT_ALTS];
} pcgc_joint_result;

/* start/start_mp: a typed parallel graph and its views; block: devices per
 * pipeline stage (views keep stages), t: the tensor-parallel degree (a
 * candidate stride). rs: rules to rewrite with (verified by the caller).
 *
 * Large graphs (o->segment_nodes) are split where a single tensor carries
 * everything from one part to the next (a bottleneck: a cut of the
 * topological order crossed by one tensor, not a partial sum). Each segment
 * becomes a graph of its own: the tensors it reads from elsewhere are rebuilt
 * as inputs with their parallel types ("stubs"), and its output feeds an mse
 * loss, so it can be simulated alone. Isomorphic segments form one group,
 * searched once (time limit shared among the groups; budget per group), with
 * rewrites that change a stub refused. Each group's best rewrite is copied
 * into every member (names carried over by the isomorphism), the whole graph
 * gets views again and is simulated, and is kept only when faster than the
 * start. A graph with fewer than two segments is searched whole. */
pcgc_status pcgc_joint_search(const pcgc_graph *start, const pcgc_mapping *start_mp, int block, int t,
                              const pcgc_machine *m, const struct pcgc_ruleset *rs, const pcgc_joint_options *o,
                              pcgc_joint_result *r, pcgc_error *err);
/* The counts of search `from` (graphs expanded, rewrites simulated, duplicates, refused,
 * rule-wide, dropped, the DP's, seconds, copies found alike, how it ended) added into `into`'s:
 * two searches, or a graph's segments, reported as one. */
void pcgc_joint_result_add_counts(pcgc_joint_result *into, const pcgc_joint_result *from);
void pcgc_joint_result_destroy(pcgc_joint_result *r);

/* The trace of a joint search: one line per rewrite from the start, in the
 * order they were applied, each naming the rule instance and where it was
 * applied:
 *
 *   RULE [PARAM=VALUE]... at NODE...       one match: the matched nodes (in
 *                                          the rule's match order) by name in
 *                                          the graph it was applied to
 *   RULE [PARAM=VALUE]... everywhere N     rule-wide: the first match applied
 *                                          N times, the graph rewritten each time
 *
 *   megatron_mlp t=4 at fc1 relu1 fc2
 *   partition_through_relu dim=0 degree=2 everywhere 12
 *
 * PARAM=VALUE are the rule's parameters in declaration order (degrees and
 * dims, integers). Tokens are separated by one space; a node name holding a
 * space, '%' or a control character has them written as %XX (two hex
 * digits). Node names are those of the graph being rewritten (the start is
 * the expert strategy as pcgc_expert_build makes it, not its canonical form),
 * so the same steps apply to that strategy at other values of the model's
 * constants, where sizes change but names do not. The segmented search
 * records the steps of every segment in the names of the whole graph (copies
 * of a searched segment get its steps in their own names) and as single
 * matches only. */

/* Applies trace lines steps[0..n_steps) to start (typed; not changed) with
 * the rules of rs instantiated for m as the joint search instantiates them:
 * each step's instance is the rule of that name with those parameter values
 * (an error when there is none), its match the one whose matched nodes have
 * the recorded names (rule-wide: the first match, N times). *out (caller
 * frees) is the typed result. Errors (PCGC_ERR_INVALID, or the status of a
 * rewrite that fails) name the step, 1-based, and what no longer applies: a
 * line that does not parse, an unknown rule or parameter binding, a match
 * that is not there. */
pcgc_status pcgc_joint_replay(const pcgc_graph *start, int n_steps, const char *const *steps, const pcgc_machine *m,
                              const struct pcgc_ruleset *rs, pcgc_graph **out, pcgc_error *err);

typedef struct pcgc_compile_options {
  pcgc_sim_options sim;   /* how candidates are simulated (default: pcgc_sim_options_default) */
  const char *rules_dir;  /* NULL: pcgc_rules_default_dir() */
  double time_limit;      /* s; stop trying candidates once this much wall time has passed
                             (the data-parallel one is always tried); <= 0: no limit */
  FILE *log;              /* one line per candidate when not NULL */
  /* called before each candidate is built (NULL: not called): its index
   * from 0, how many there are, its degrees; for progress displays */
  void (*progress)(void *ctx, int index, int total, pcgc_expert_choice c);
  void *progress_ctx;
  /* then the joint search from the best expert strategy (joint.budget 0:
   * none), over the whole rule library, checked by execution first
   * (pcgc_ruleset_verify): unsound rules are left out unless allow_unsound */
  pcgc_joint_options joint;
  const char *extra_rules_dir;  /* more rules for the joint search (NULL: none) */
  bool allow_unsound;
  FILE *rules_report;     /* a line per rule checked, when not NULL */
  int threads;            /* worker threads for the grid, the rule check and the joint
                             search (default pcgc_threads_default(); 1: none); what
                             is chosen does not depend on it */
  /* not NULL: the expert grid is this one candidate (fit to memory by
   * recomputation as any other); building it or fitting it failing is the
   * error, with the reason */
  const pcgc_expert_choice *only;
  /* Not NULL: the iteration time of a candidate's program (what runs, as a
   * caller who can lower it predicts it: pcgc compile passes codegen's
   * simulation of the program; < 0 or NaN: unknown). The grid's best
   * candidates by estimate, up to rerank_max of them within rerank_margin
   * of the best (and of at most rerank_max_tasks tasks, so that lowering
   * them stays cheap), are then ranked by it instead, and the joint search
   * starts from the fastest program. Candidates within the margin are
   * simulated to the end for it. Deterministic. */
  double (*program_time)(void *ctx, const pcgc_graph *g, const pcgc_mapping *mp, pcgc_expert_choice c);
  void *program_ctx;
  double rerank_margin;        /* default 0.10 */
  int rerank_max;              /* default 4 (at most 8) */
  int64_t rerank_max_tasks;    /* default 100,000: the candidate's simulated tasks times its
                                  data-parallel degree, about a third of its program's
                                  instructions (lowering and simulating it: about a second) */
} pcgc_compile_options;

void pcgc_compile_options_default(pcgc_compile_options *o);

/* A reference point of the search: the best candidate of one family. */
typedef struct pcgc_compile_ref {
  bool tried;               /* some candidate of the family was built */
  bool feasible;            /* one was simulated and fits in memory */
  pcgc_expert_choice choice;
  double time;              /* s, its iteration time (feasible only) */
  char note[512];           /* why there is none, or why it is infeasible */
} pcgc_compile_ref;

typedef struct pcgc_compile_result {
  pcgc_expert_choice choice;  /* the fastest candidate that fits in memory */
  pcgc_graph *graph;          /* its parallel graph, in canonical form (nodes in the
                                 order and with the names of pcgc_graph_write_text) */
  pcgc_mapping mapping;       /* views of graph's nodes */
  pcgc_sim_result sim;        /* graph simulated with mapping */
  pcgc_compile_ref data_parallel;  /* dp = all devices */
  pcgc_compile_ref megatron;       /* best with tp > 1 and dp = pp = 1 */
  pcgc_compile_ref pipeline;       /* best with pp > 1 and dp = tp = 1 */
  int tried, feasible;        /* candidates simulated; of them, fitting in memory */
  int stopped;                /* of them, stopped while their task graph was built: a device's
                                 own work already took longer than the best so far (their
                                 memory is not known; not counted in feasible). Which ones
                                 depends on the order candidates finish in, so on the threads */
  int skipped;                /* left untried by the time limit */
  int reranked;               /* candidates whose programs were compared (options.program_time) */
  bool rerank_changed;        /* the fastest program was not the best estimate's: by_estimate
                                 is that one, with its estimate and program times */
  pcgc_expert_choice by_estimate;
  double by_estimate_program, chosen_program;
  double dp_program;          /* data parallel on every device as a program, when it was compared
                                 (the choice is then never slower than it); NaN otherwise */
  double expert_time;         /* s, the best expert strategy's iteration time */
  pcgc_joint_result joint;    /* the joint search's statistics (its graph and
                                 mapping moved into graph/mapping above) */
  bool joint_ran;
  /* The joint search's best and its runner-ups within rerank_margin (joint.alt), lowered
   * and ranked by their programs (options.program_time): how many were compared, and where
   * a runner-up's program beat the best estimate's (joint_rerank_changed; the runner-up
   * is then the joint search's graph, time and trace), both programs' times */
  int joint_reranked;
  bool joint_rerank_changed;
  double joint_by_estimate_time, joint_by_estimate_program, joint_chosen_program;
  /* Where the joint search improved on the expert strategy (joint.improvements > 0): the
   * expert strategy it started from, canonical, and its simulation, so that a caller who
   * lowers both (pcgc compile does) can keep it when its program turns out faster: the
   * search compares estimates, and a rewrite that shortens the estimate may add copies the
   * program pays for. NULL / empty otherwise. */
  pcgc_graph *start_graph;
  pcgc_mapping start_mapping;
  pcgc_sim_result start_sim;
  pcgc_expert_choice start_choice;  /* the expert strategy's choice (choice is data parallel's
                                       where joint_from_dp) */
  /* The joint search ran a second time from data parallel on every device where that
   * fits and is not its start (the same budget, in what is left of the time limit), and
   * that search's rewrites won: choice is data parallel's, joint that search's result
   * (its counts include the first's), and the plan's trace replays from data parallel. */
  bool joint_from_dp;
  int rules, rules_unsound;   /* rules loaded; of them, refused by the checker */
  double seconds;             /* wall time of the search */
} pcgc_compile_result;

/* Searches the expert strategies of the sequential graph seq on m:
 * (dp, tp, pp) over the divisors of the device count, either using every
 * device or only one kind of parallelism (fewer devices allowed), tp only
 * where Megatron rules match, pp at most the number of matrix operators,
 * micro in {pp, 2pp, 4pp} dividing the batch per replica. Candidates are
 * tried in a fixed order, data parallel on all devices first; the fastest
 * whose simulation has no device out of memory wins (ties: the earlier).
 * Deterministic unless the time limit cuts the search short. r is zeroed
 * first; after PCGC_OK it owns memory (pcgc_compile_result_destroy). No
 * feasible candidate is PCGC_ERR_INVALID with the reasons. */
pcgc_status pcgc_compile(const pcgc_graph *seq, const pcgc_machine *m, const pcgc_compile_options *o,
                         pcgc_compile_result *r, pcgc_error *err);
void pcgc_compile_result_destroy(pcgc_compile_result *r);

/* ------------------------------------------------------ device mapping
 * Views chosen jointly by dynamic programming (search/mapping.c, the DP in
 * search/mapping_sp.c), instead of node by node as the greedy placement
 * above does.
 *
 * Terms, under views v, of the computed nodes (sources, and parallel
 * operators that only distribute them, are resident: placed by their
 * readers, they cost nothing here):
 *   node x       (fwd + bwd of one piece, pcgc_cost_node_time) × micro(x)
 *                × (most of x's pieces on one device: they serialise);
 *   edge u -> x  (one per producer, whatever the slots) Σ reads of a piece
 *                of u by a piece of x on another device: micro(x) ×
 *                pcgc_comm_p2p_time(same node?, 1, bytes read);
 *   devices(x)   the device groups x's pieces occupy: device d is group d
 *                on up to 64 devices, else group ⌊64·d/D⌋.
 *
 * Cost. The computed nodes and their edges, with a virtual source before
 * every node that reads no computed node and a virtual sink after every
 * node no computed node reads, decomposed series-parallel: a part is an
 * edge; or "part a -> x, node x, part x -> b" in series; or the parts with
 * the same two ends in parallel (its branches). A part's cost and devices
 * (its two end nodes are not in it):
 *   edge      its term; no devices;
 *   series    both parts' costs plus x's term; their devices and x's;
 *   parallel  the branches in the order of their first node in topological
 *             order (a bare edge first), folded left: acc ⊕ b = max(acc, b)
 *             when their devices are disjoint (they run at the same time),
 *             else acc + b; the union of their devices.
 * cost(v) = the cost of the part from source to sink + the terms of the cut
 * edges. Edges are cut only where the graph is not series-parallel: when no
 * reduction applies (series: a node with one part in and one out, tried in
 * topological order; parallel: parts with the same ends), the earliest node
 * with two parts in loses its edge from its latest producer (which goes to
 * the sink if that was its last reader), and the decomposition starts over.
 * Not modelled: the backward transfers (the mirror of the forward ones),
 * weight-gradient all-reduces, overlap other than of parallel branches on
 * disjoint devices.
 *
 * Memory of device d, as pcgc_cost_memory(optimizer, weights, activations,
 * 0): weights, each distinct weight piece read on d (a float weight through
 * the parallel operators distributing it; the replicas of one shard are one
 * piece); activations, per piece on d of a kernel other than the loss its
 * outputs' piece bytes, each distinct data piece read on d, each distinct
 * piece of a computed producer read on d from another device (partition,
 * combine and the other parallel operators: every part received), each ×
 * the micro-batches of its tensor — the simulator's count under GPipe,
 * roughly. It is compared with pcgc_machine_usable_memory.
 *
 *     pcgc_views_memo *memo;            // one for every candidate of a compile
 *     pcgc_views_memo_new(&memo, &err);
 *     pcgc_views_dp_options o;
 *     pcgc_views_dp_options_default(&o);
 *     o.memo = memo;
 *     pcgc_mapping dp;
 *     pcgc_views_dp_stats s;
 *     if (pcgc_views_dp(g, &greedy, b * t, t, &m, &o, &dp, &s, &err) == PCGC_OK)
 *       printf("%g -> %g s (%d cut edges)\n", s.cost_init, s.cost, s.cut_edges);
 *     pcgc_views_memo_free(memo);
 */

#define PCGC_VIEWS_MAX_CANDIDATES 16

/* The cost above of views mp of the typed graph g on m; NAN with err set
 * when g is not typed, its piece maps fail, or memory runs out. */
double pcgc_views_cost(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_error *err);

/* The memory above of the fullest device under views mp (each device's
 * into per_device[0..D) when not NULL); NAN with err set as
 * pcgc_views_cost. */
double pcgc_views_memory(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_machine *m, pcgc_optim_kind opt,
                         double *per_device, pcgc_error *err);

/* The candidate views of node `node` (at most PCGC_VIEWS_MAX_CANDIDATES,
 * into out; 0 for a resident node), inside its stage block [base, base +
 * block), base = init's start rounded down to a multiple of block: the
 * greedy's candidates in its order (pieces spread over the block, which is
 * always allowed, then consecutive devices and every t-th), init's view of
 * the node and of each producer, and every start base + j·P (P pieces) with
 * strides 1, block/P, t and devices_per_node; only views that keep the
 * pieces on distinct devices of the block, one per distinct placement. */
int pcgc_views_candidates(const pcgc_graph *g, const pcgc_mapping *init, int node, int block, int t,
                          const pcgc_machine *m, pcgc_view *out);

/* Terms kept across pcgc_views_dp calls on different graphs (the candidates
 * of one compile): a node's piece time and the pieces each of its pieces
 * reads, keyed by its content (op, attributes, input and output types, the
 * machine), not its id; a pair matrix by its consumer's content, the input
 * slot and both candidate lists. Threads may share one (it locks). */
typedef struct pcgc_views_memo pcgc_views_memo; /* also named in pcgc_joint_options */

/* internal (views.c): piece p of a node reads `bytes` of piece q of its
 * input `slot`; node n's reads from the memo, computed once per content:
 * slot i's are (*r)[(*off)[i] .. (*off)[i + 1]), owned by the memo. */
typedef struct pcgc__vread {
  int64_t p, q;
  int slot;
  double bytes;
} pcgc__vread;
pcgc_status pcgc__views_memo_reads(pcgc_views_memo *M, const pcgc_graph *g, const pcgc_node *n, const pcgc_machine *m,
                                   const pcgc__vread **r, const int64_t **off, pcgc_error *err);

typedef struct pcgc_views_memo_stats {
  int64_t hits, misses;     /* lookups since pcgc_views_memo_new */
  int64_t nodes, matrices;  /* entries held */
  size_t bytes;             /* their size, roughly */
} pcgc_views_memo_stats;

pcgc_status pcgc_views_memo_new(pcgc_views_memo **out, pcgc_error *err);
void pcgc_views_memo_free(pcgc_views_memo *memo);
pcgc_views_memo_stats pcgc_views_memo_get_stats(const pcgc_views_memo *memo); /* zeros for NULL */

typedef struct pcgc_views_dp_options {
  pcgc_optim_kind optimizer; /* what weights cost in memory (default Adam) */
  int max_masks;             /* device sets the DP keeps per part and pair of end views
                                (default 4); past it the costliest go (masks_dropped) */
  pcgc_views_memo *memo;     /* shared terms; NULL (the default): one for the call */
  bool bf16;                 /* bf16 storage: activations moved and kept at bf16's bytes
                                (pcgc_value_dtype), as the simulator counts them */
} pcgc_views_dp_options;

void pcgc_views_dp_options_default(pcgc_views_dp_options *o);

typedef struct pcgc_views_dp_stats {
  int nodes;               /* views chosen (computed nodes) */
  int candidates_max;      /* most candidates of one node */
  int parts;               /* of the series-parallel decomposition */
  int cut_edges;           /* cut to make it series-parallel (0: the DP is exact) */
  int masks_max;           /* most device sets kept for one pair of end views */
  int64_t masks_dropped;   /* device sets dropped at max_masks (the optimum may be missed) */
  int64_t memo_hits, memo_misses;  /* node terms and pair matrices reused / computed */
  double dp_cost;          /* the DP's optimum over the candidates (first run) */
  double cost_init;        /* pcgc_views_cost of init */
  double cost;             /* of *out */
  bool kept_init;          /* *out = init */
  double capacity;         /* pcgc_machine_usable_memory */
  double memory_init;      /* pcgc_views_memory of init */
  double memory;           /* of *out */
  int memory_fixes;        /* nodes the memory repair fixed (the optimum overfilled a device) */
  int memory_moves;        /* and its moves once the views fit */
  bool memory_kept_init;   /* init kept because the views found overfill a device and init does not */
} pcgc_views_dp_stats;

/* Views of g minimising pcgc_views_cost over pcgc_views_candidates: a DP
 * over the decomposition that keeps, per part and pair of views of its two
 * ends, the Pareto set of (devices, cost) over the views inside it, so it
 * is exact on series-parallel graphs (while no set outgrows o->max_masks).
 * The non-series-parallel fallback, never a failure: each cut edge's
 * producer is fixed to its view in the optimum without the cut edges, which
 * makes the edge a term of its consumer alone; the result may then miss
 * the optimum.
 * Memory is a hard constraint. When the optimum overfills a device
 * (pcgc_views_memory above pcgc_machine_usable_memory), one node at a time
 * is fixed to the candidate that moves the most bytes off the overfull
 * devices and the DP re-solves the rest, until the views fit (8 nodes at
 * most, while the fixes cut the overflow fast enough to finish within
 * them; not tried when a node's piece alone outgrows a device, or the
 * devices the candidates use hold less, in all, than the optimum needs);
 * then single moves of the fixed nodes and their neighbours that lower the
 * cost and keep the views fitting (16 at most). A heuristic: the views
 * fit, but the best views that fit may cost less.
 * *out (caller destroys) is init unless it fits where init does not, or
 * fits as init does and costs strictly less: it never overfills a device
 * when init does not, and never costs more than init unless it fits where
 * init does not. init: views of every node (the stage blocks come from
 * them; resident nodes keep theirs); block: devices per stage; t: a
 * candidate stride; o: NULL for the defaults; stats may be NULL. Errors:
 * bad arguments, an untyped graph, out of memory. */
pcgc_status pcgc_views_dp(const pcgc_graph *g, const pcgc_mapping *init, int block, int t, const pcgc_machine *m,
                          const pcgc_views_dp_options *o, pcgc_mapping *out, pcgc_views_dp_stats *stats,
                          pcgc_error *err);

/* The DP's views (optimizer from so, memo may be NULL) in place of *mp, with
 * *sr (mp simulated with so) replaced by theirs, when they simulate faster
 * or fit where mp does not; *changed says whether they did. What compile
 * and the joint search do per candidate: never worse than mp. Only running
 * out of memory is an error; a graph the DP cannot map keeps mp. */
pcgc_status pcgc_views_dp_if_better(const pcgc_graph *g, int block, int t, const pcgc_machine *m,
                                    const pcgc_sim_options *so, pcgc_views_memo *memo, pcgc_mapping *mp,
                                    pcgc_sim_result *sr, bool *changed, pcgc_error *err);

/* ------------------------------------------------------ plan files
 * A mapped parallel graph as JSON (docs/plan-format.md). Version 2, the
 * plan, is what `pcgc compile -o` writes:
 *
 *   {"format": "pcgc-plan", "version": 2, "machine": "dgx-h100", "devices": 8,
 *    "optimizer": "adam",
 *    "model": "<pcgc_graph_write_text of the parallel graph>",
 *    "views": {"h1": [0, 1], ...},
 *    "predicted": {"iteration_s": 0.0123, "search_estimate_s": 0.0118, "data_parallel_s": 0.0150,
 *                  "peak_bytes": 1.2e9},
 *    "choice": {"dp": 2, "tp": 4, "pp": 1, "micro": 1, "schedule": "gpipe", "recompute": false},
 *    "program": {"digest": "9f…", "tasks": 1234, "instructions": 5678,
 *                "peak_bytes": 1.1e9, "arena_bytes": 1.1e9, "order": "critical-path"},
 *    "checksum": "xxh3-64:…"}
 *
 * "program" is codegen's summary of what the plan lowers to (null when it
 * could not be lowered); "predicted" is that program simulated
 * (pcgc_program_simulate), with the search's task-graph estimate beside it
 * (both the estimate when the plan could not be lowered; plans before the
 * program's simulation recorded the estimate alone); "checksum" covers
 * every byte before its own key.
 * Version 1 ("format": "pcgc-strategy", no devices, optimizer, program or
 * checksum) is still read. */

/* How a plan was derived, recorded by `pcgc compile` so that `pcgc verify`
 * can derive the same strategy again for other values of the model's
 * constants: the model text and the constants set on the command line
 * (--batch is B), how many joint-search improvements followed the expert
 * strategy (the choice is the info's) and the rewrites that lead from the
 * expert strategy to the plan's graph, as the joint search's trace. */
#define PCGC_DERIVATION_MAX_SETS 64
typedef struct pcgc_derivation {
  char file[1024];        /* the model file compile read */
  char *source;           /* its text (owned; NULL: not recorded, e.g. an ONNX model) */
  int n_set;
  char set_names[PCGC_DERIVATION_MAX_SETS][64], set_values[PCGC_DERIVATION_MAX_SETS][64];
  int loss;               /* --loss's op kind, -1: none */
  int rewrites;           /* joint-search improvements applied after the expert strategy */
  bool has_trace;         /* the plan records the rewrites (plans before it did: false) */
  int n_trace;
  char **trace;           /* the joint search's trace (pcgc_joint_replay), owned */
} pcgc_derivation;
void pcgc_derivation_free(pcgc_derivation *d);   /* frees source and trace; accepts NULL */
/* The plan's "derivation" member (checked like the rest of the plan):
 * PCGC_OK with d->source NULL and d->file empty when the plan has none. */
pcgc_status pcgc_strategy_file_derivation(const char *path, pcgc_derivation *d, pcgc_error *err);

typedef struct pcgc_strategy_info {
  int version;                           /* 1 or 2 (reading); writing always writes 2 */
  char machine[PCGC_MACHINE_NAME_MAX];
  int devices;                           /* device count lowered for (0: not recorded) */
  bool has_device_kind;                  /* plans before it was recorded: false */
  pcgc_device_kind device_kind;          /* the machine's: `pcgc run` picks its backend by it */
  bool has_optimizer;
  pcgc_optim_kind optimizer;             /* what the plan's memory assumes */
  pcgc_precision precision;              /* GEMM arithmetic (absent: f32) */
  bool has_predicted;
  double iteration_s, data_parallel_s;   /* data_parallel_s < 0: DP infeasible */
  double search_estimate_s;              /* the search's estimate of iteration_s (0: not recorded) */
  double predicted_peak_bytes;           /* the largest device memory predicted (0: not recorded) */
  bool has_choice;
  pcgc_expert_choice choice;
  const pcgc_derivation *derivation;     /* writing: recorded when not NULL (borrowed) */
  bool has_program;                      /* codegen's summary */
  uint64_t program_digest;
  int program_order;                     /* pcgc_codegen_options.order it was lowered with ("order":
                                            "critical-path" for 1; absent: 0, "topological") */
  int64_t program_tasks, program_instructions, planned_peak_bytes, planned_arena_bytes;
} pcgc_strategy_info;

/* g with its nodes renumbered and renamed as pcgc_graph_write_text writes
 * them (so the file's names are the graph's), and mp carried along. */
pcgc_status pcgc_strategy_canonical(const pcgc_graph *g, const pcgc_mapping *mp, pcgc_graph **out,
                                    pcgc_mapping *out_mp, pcgc_error *err);
/* Writes a canonical graph (pcgc_strategy_canonical) and its views
 * atomically: a temporary file beside path, fsync, rename. */
pcgc_status pcgc_strategy_file_write(const char *path, const pcgc_graph *g, const pcgc_mapping *mp,
                                     const pcgc_strategy_info *info, pcgc_error *err);
/* Reads a plan of version 1 or 2 (text of length len; path names it in
 * messages). Every error is PCGC_ERR_PARSE with path:line:col of the
 * offending JSON value (for the model, of the character in the "model"
 * string); a version 2 file whose checksum does not match its bytes
 * (corrupt, truncated, edited) is refused. n_devices > 0 checks every view
 * against it, and a version 2 plan's "devices". */
pcgc_status pcgc_strategy_file_parse(const char *text, size_t len, const char *path, int n_devices,
                                     pcgc_graph **out, pcgc_mapping *mp, pcgc_strategy_info *info, pcgc_error *err);
pcgc_status pcgc_strategy_file_load(const char *path, int n_devices, pcgc_graph **out, pcgc_mapping *mp,
                                    pcgc_strategy_info *info, pcgc_error *err);
/* True for a path ending in ".json", or a readable file whose first
 * non-blank character is '{' and which mentions "pcgc-plan" or "pcgc-strategy". */
bool pcgc_strategy_file_detect(const char *path);


#ifdef __cplusplus
}
#endif
#endif /* PCGC_SEARCH_H */
