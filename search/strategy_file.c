/*
 * strategy_file.c — strategy files (search.h, "strategy files";
 * docs/plan-format.md): a mapped parallel graph as JSON, written by
 * `pcgc compile -o` and read by `pcgc simulate STRATEGY.json`.
 *
 * The graph travels as its canonical text (pcgc_graph_write_text) and the
 * views by node name. Names in that text are sanitized and nodes reordered
 * (data inputs first, then topological order), so a graph is first made
 * canonical (pcgc_strategy_canonical): written, parsed back, and its views
 * carried over by position, since the parser numbers nodes in text order.
 * A canonical graph writes back identically, so its names are the file's.
 *
 * Errors point into the file: cJSON reports where malformed JSON stops; for
 * well-formed JSON with a bad value, a small scanner (member_at) finds the
 * offset of the member in the text, since cJSON keeps no positions; an error
 * in the embedded model is mapped from (line, col) of the model text to the
 * character of the JSON string that holds it.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>
#include <xxhash.h>

#include "search.h"

/* ------------------------------------------------------- canonical form */

static pcgc_status graph_text(const pcgc_graph *g, char **text, size_t *len, pcgc_error *err) {
  *text = NULL;
  *len = 0;
  FILE *f = open_memstream(text, len);
  if (!f) return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing the model text");
  pcgc_status st = pcgc_graph_write_text(f, g, err);
  if (fclose(f) != 0 && st == PCGC_OK) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing the model text");
  if (st != PCGC_OK) {
    free(*text);
    *text = NULL;
  }
  return st;
}

pcgc_status pcgc_strategy_canonical(const pcgc_graph *g, const pcgc_mapping *mp, pcgc_graph **out,
                                    pcgc_mapping *out_mp, pcgc_error *err) {
  if (out) *out = NULL;
  if (out_mp) memset(out_mp, 0, sizeof *out_mp);
  if (!g || !mp || !out || !out_mp || mp->n_nodes != g->n_nodes)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_strategy_canonical: bad argument");
  char *text;
  size_t len;
  pcgc_status st = graph_text(g, &text, &len, err);
  if (st != PCGC_OK) return st;
  pcgc_graph *g2 = pcgc_model_parse(text, len, "<strategy model>", NULL, err);
  free(text);
  if (!g2) return err && err->status ? err->status : PCGC_ERR_PARSE;
  int n = g->n_nodes, *order = malloc((size_t)(n ? n : 1) * sizeof *order),
      *seq = malloc((size_t)(n ? n : 1) * sizeof *seq);
  if (!order || !seq) {
    st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    goto done;
  }
  if ((st = pcgc_graph_topo_order(g, order, err)) != PCGC_OK) goto done;
  int k = 0; /* text.c's order: the data inputs, then every other node */
  for (int i = 0; i < n; i++)
    if (g->nodes[order[i]].kind == PCGC_OP_INPUT) seq[k++] = order[i];
  for (int i = 0; i < n; i++)
    if (g->nodes[order[i]].kind != PCGC_OP_INPUT) seq[k++] = order[i];
  bool same = g2->n_nodes == n;
  for (int i = 0; same && i < n; i++) {
    const pcgc_node *a = &g->nodes[seq[i]], *b = &g2->nodes[i];
    same = a->kind == b->kind && a->n_out == b->n_out && pcgc_ptensor_equal(&a->out[0], &b->out[0]);
  }
  if (!same) {
    st = pcgc_error_set(err, PCGC_ERR_INVALID, "internal error: the canonical text of '%s' reads back differently",
                        g->name ? g->name : "graph");
    goto done;
  }
  if ((st = pcgc_mapping_init(out_mp, n, (pcgc_view){0, 1}, err)) != PCGC_OK) goto done;
  for (int i = 0; i < n; i++) out_mp->view[i] = mp->view[seq[i]];
  *out = g2;
  g2 = NULL;
done:
  free(order);
  free(seq);
  pcgc_graph_free(g2);
  return st;
}

/* ------------------------------------------------------------- writing */

static bool add_hex(cJSON *o, const char *key, const char *prefix, uint64_t x) {
  char b[48];
  snprintf(b, sizeof b, "%s%016llx", prefix, (unsigned long long)x);
  return cJSON_AddStringToObject(o, key, b) != NULL;
}

static cJSON *to_json(const pcgc_graph *g, const pcgc_mapping *mp, const pcgc_strategy_info *info, const char *text) {
  cJSON *root = cJSON_CreateObject(), *views, *o;
  if (!root || !cJSON_AddStringToObject(root, "format", "pcgc-plan") || !cJSON_AddNumberToObject(root, "version", 2) ||
      !cJSON_AddStringToObject(root, "machine", info ? info->machine : "") ||
      !cJSON_AddNumberToObject(root, "devices", info ? info->devices : 0) ||
      (info && info->precision != PCGC_PREC_F32 &&
       !cJSON_AddStringToObject(root, "precision", pcgc_precision_name(info->precision))) ||
      (info && info->has_device_kind &&
       !cJSON_AddStringToObject(root, "device_kind", info->device_kind == PCGC_DEVICE_GPU ? "gpu" : "cpu")) ||
      !cJSON_AddStringToObject(root, "optimizer",
                               pcgc_optimizer_name(info && info->has_optimizer ? info->optimizer : PCGC_OPTIM_SGD)) ||
      !cJSON_AddStringToObject(root, "model", text) || !(views = cJSON_AddObjectToObject(root, "views")))
    goto fail;
  for (int i = 0; i < g->n_nodes; i++) {
    if (pcgc_op_class_of(g->nodes[i].kind) == PCGC_CLASS_SOURCE) continue;
    int v[2] = {mp->view[i].start, mp->view[i].stride};
    cJSON *a = cJSON_CreateIntArray(v, 2);
    if (!a || !cJSON_AddItemToObject(views, g->nodes[i].name, a)) {
      cJSON_Delete(a);
      goto fail;
    }
  }
  if (info && info->has_predicted) {
    if (!(o = cJSON_AddObjectToObject(root, "predicted")) || !cJSON_AddNumberToObject(o, "iteration_s", info->iteration_s))
      goto fail;
    if (info->search_estimate_s > 0 && !cJSON_AddNumberToObject(o, "search_estimate_s", info->search_estimate_s))
      goto fail;
    if (info->data_parallel_s >= 0 ? !cJSON_AddNumberToObject(o, "data_parallel_s", info->data_parallel_s)
                                   : !cJSON_AddNullToObject(o, "data_parallel_s"))
      goto fail;
    if (info->predicted_peak_bytes > 0 && !cJSON_AddNumberToObject(o, "peak_bytes", info->predicted_peak_bytes))
      goto fail;
  }
  if (info && info->has_choice) {
    if (!(o = cJSON_AddObjectToObject(root, "choice")) || !cJSON_AddNumberToObject(o, "dp", info->choice.dp) ||
        !cJSON_AddNumberToObject(o, "tp", info->choice.tp) || !cJSON_AddNumberToObject(o, "pp", info->choice.pp) ||
        !cJSON_AddNumberToObject(o, "micro", info->choice.micro) ||
        !cJSON_AddStringToObject(o, "schedule", pcgc_schedule_name(info->choice.schedule)) ||
        !cJSON_AddBoolToObject(o, "recompute", info->choice.recompute) ||
        (info->choice.zero == 1 && !cJSON_AddBoolToObject(o, "zero", true)) ||
        (info->choice.zero >= 2 && !cJSON_AddNumberToObject(o, "zero", info->choice.zero)))
      goto fail;
  }
  if (info && info->derivation) {
    const pcgc_derivation *d = info->derivation;
    cJSON *sets;
    if (!(o = cJSON_AddObjectToObject(root, "derivation")) || !cJSON_AddStringToObject(o, "file", d->file) ||
        !(d->source ? cJSON_AddStringToObject(o, "source", d->source) : cJSON_AddNullToObject(o, "source")) ||
        !(sets = cJSON_AddObjectToObject(o, "sets")) ||
        !(d->loss >= 0 ? cJSON_AddStringToObject(o, "loss", pcgc_op_name((pcgc_op_kind)d->loss))
                       : cJSON_AddNullToObject(o, "loss")) ||
        !cJSON_AddNumberToObject(o, "rewrites", d->rewrites))
      goto fail;
    for (int i = 0; i < d->n_set; i++)
      if (!cJSON_AddStringToObject(sets, d->set_names[i], d->set_values[i])) goto fail;
    cJSON *tr = NULL; /* (used only with a trace) */
    if (d->has_trace && !(tr = cJSON_AddArrayToObject(o, "trace"))) goto fail;
    for (int i = 0; d->has_trace && i < d->n_trace; i++) {
      cJSON *line = cJSON_CreateString(d->trace[i]);
      if (!line || !cJSON_AddItemToArray(tr, line)) {
        cJSON_Delete(line);
        goto fail;
      }
    }
  }
  if (info && info->has_program) {
    if (!(o = cJSON_AddObjectToObject(root, "program")) || !add_hex(o, "digest", "", info->program_digest) ||
        !cJSON_AddNumberToObject(o, "tasks", (double)info->program_tasks) ||
        !cJSON_AddNumberToObject(o, "instructions", (double)info->program_instructions) ||
        !cJSON_AddNumberToObject(o, "peak_bytes", (double)info->planned_peak_bytes) ||
        !cJSON_AddNumberToObject(o, "arena_bytes", (double)info->planned_arena_bytes) ||
        (info->program_order == 1 && !cJSON_AddStringToObject(o, "order", "critical-path")))
      goto fail;
  } else if (!cJSON_AddNullToObject(root, "program")) {
    goto fail;
  }
  return root;
fail:
  cJSON_Delete(root);
  return NULL;
}

/* The checksum of a plan's bytes before its "checksum" key. */
static uint64_t plan_checksum(const char *text, size_t n) { return XXH3_64bits(text, n); }

pcgc_status pcgc_strategy_file_write(const char *path, const pcgc_graph *g, const pcgc_mapping *mp,
                                     const pcgc_strategy_info *info, pcgc_error *err) {
  if (!path || !g || !mp || mp->n_nodes != g->n_nodes || !info || info->devices < 1)
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_strategy_file_write: bad argument (info with devices >= 1 needed)");
  char *model;
  size_t mlen;
  pcgc_status st = graph_text(g, &model, &mlen, err);
  if (st != PCGC_OK) return st;
  cJSON *root = to_json(g, mp, info, model);
  free(model);
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  size_t len = text ? strlen(text) : 0;
  /* the printed object ends "\n}": the checksum becomes its last member */
  char *out = len >= 2 ? malloc(len + 64) : NULL;
  if (!out) {
    free(text);
    return pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory writing %s", path);
  }
  size_t n = len - 2;
  memcpy(out, text, n);
  free(text);
  n += (size_t)sprintf(out + n, ",\n\t");
  n += (size_t)sprintf(out + n, "\"checksum\":\t\"xxh3-64:%016llx\"\n}\n", (unsigned long long)plan_checksum(out, n));
  st = pcgc_write_file_atomic(path, out, n, err);
  free(out);
  return st;
}

/* ------------------------------------------------------------- reading */

/* Positions in JSON text, for messages. */
typedef struct jtext {
  const char *t;
  size_t n;
  const char *path;
} jtext;

static size_t skip_ws(const jtext *J, size_t i) {
  while (i < J->n && (J->t[i] == ' ' || J->t[i] == '\t' || J->t[i] == '\n' || J->t[i] == '\r')) i++;
  return i;
}

/* i at '"': the index after the closing quote. */
static size_t skip_string(const jtext *J, size_t i) {
  for (i++; i < J->n && J->t[i] != '"'; i++)
    if (J->t[i] == '\\') i++;
  return i < J->n ? i + 1 : J->n;
}

static size_t skip_value(const jtext *J, size_t i) {
  i = skip_ws(J, i);
  if (i >= J->n) return i;
  if (J->t[i] == '"') return skip_string(J, i);
  if (J->t[i] == '{' || J->t[i] == '[') {
    int depth = 0;
    while (i < J->n) {
      char c = J->t[i];
      if (c == '"') {
        i = skip_string(J, i);
        continue;
      }
      if (c == '{' || c == '[') depth++;
      if (c == '}' || c == ']') depth--;
      i++;
      if (depth == 0) break;
    }
    return i;
  }
  while (i < J->n && J->t[i] != ',' && J->t[i] != '}' && J->t[i] != ']') i++;
  return i;
}

/* The member `key` of the object whose '{' is at obj: the offsets of its
 * key and of its value; false if there is none. */
static bool member_at(const jtext *J, size_t obj, const char *key, size_t *key_at, size_t *val_at) {
  size_t i = skip_ws(J, obj), kl = strlen(key);
  if (i >= J->n || J->t[i] != '{') return false;
  i++;
  for (;;) {
    i = skip_ws(J, i);
    if (i >= J->n || J->t[i] != '"') return false;
    size_t k = i, e = skip_string(J, i);
    i = skip_ws(J, e);
    if (i >= J->n || J->t[i] != ':') return false;
    size_t v = skip_ws(J, i + 1);
    if (e - k - 2 == kl && memcmp(J->t + k + 1, key, kl) == 0) {
      *key_at = k;
      *val_at = v;
      return true;
    }
    i = skip_ws(J, skip_value(J, v));
    if (i >= J->n || J->t[i] != ',') return false;
    i++;
  }
}

static pcgc_srcloc loc_of(const jtext *J, size_t off) { return pcgc_srcloc_at(J->t, J->n, off, J->path); }

static pcgc_status bad_at(pcgc_error *err, const jtext *J, size_t off, const char *fmt, const char *arg) {
  char msg[768];
  snprintf(msg, sizeof msg, fmt, arg);
  pcgc_error_set(err, PCGC_ERR_PARSE, "plan: %s", msg);
  pcgc_error_at(err, loc_of(J, off), 1, J->t, J->n);
  pcgc_error_hint(err, "plans are written by `pcgc compile MODEL --machine M -o FILE` (docs/plan-format.md); "
                       "compile it again rather than editing it");
  return PCGC_ERR_PARSE;
}

/* Offset of top-level member `key`'s value, else of the document. */
static size_t top_at(const jtext *J, const char *key) {
  size_t k, v;
  return member_at(J, 0, key, &k, &v) ? v : skip_ws(J, 0);
}

/* The offset, in the JSON string at q, of (line, col) of the string's text. */
static size_t string_offset(const jtext *J, size_t q, int line, int col) {
  int l = 1, c = 1;
  size_t i = q + 1;
  while (i < J->n && J->t[i] != '"') {
    if (l > line || (l == line && c >= col)) return i;
    bool nl = false;
    if (J->t[i] == '\\' && i + 1 < J->n) {
      nl = J->t[i + 1] == 'n';
      i += J->t[i + 1] == 'u' ? 6 : 2;
    } else {
      i++;
    }
    if (nl) {
      l++;
      c = 1;
    } else {
      c++;
    }
  }
  return i < J->n ? i : q;
}

static bool is_int(const cJSON *v, double lo) {
  return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && v->valuedouble >= lo &&
         v->valuedouble <= 1e9;
}

pcgc_status pcgc_strategy_file_parse(const char *text, size_t len, const char *path, int n_devices,
                                     pcgc_graph **out, pcgc_mapping *mp, pcgc_strategy_info *info, pcgc_error *err) {
  if (out) *out = NULL;
  if (mp) memset(mp, 0, sizeof *mp);
  if (info) memset(info, 0, sizeof *info);
  if (!text || !out || !mp) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_strategy_file_parse: bad argument");
  jtext J = {text, len, path ? path : "<strategy>"};
  pcgc_status strict = pcgc_json_check_strict(text, len, J.path, err);
  if (strict != PCGC_OK) {
    if (strict == PCGC_ERR_PARSE) {
      char msg[sizeof err->message];
      snprintf(msg, sizeof msg, "plan: %.1000s", err->message);
      memcpy(err->message, msg, sizeof msg);
    }
    return strict;
  }
  cJSON *root = cJSON_ParseWithLength(text, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t off = at && at >= text && at <= text + len ? (size_t)(at - text) : 0;
    return bad_at(err, &J, off, "malformed JSON%s", "");
  }
  pcgc_graph *g = NULL;
  pcgc_status st = PCGC_OK;
  const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"),
              *ver = cJSON_GetObjectItemCaseSensitive(root, "version"),
              *mach = cJSON_GetObjectItemCaseSensitive(root, "machine"),
              *model = cJSON_GetObjectItemCaseSensitive(root, "model"),
              *views = cJSON_GetObjectItemCaseSensitive(root, "views"),
              *pred = cJSON_GetObjectItemCaseSensitive(root, "predicted"),
              *choice = cJSON_GetObjectItemCaseSensitive(root, "choice"),
              *devs = cJSON_GetObjectItemCaseSensitive(root, "devices"),
              *optim = cJSON_GetObjectItemCaseSensitive(root, "optimizer"),
              *dkind = cJSON_GetObjectItemCaseSensitive(root, "device_kind"),
              *prec = cJSON_GetObjectItemCaseSensitive(root, "precision"),
              *prog = cJSON_GetObjectItemCaseSensitive(root, "program"),
              *sum = cJSON_GetObjectItemCaseSensitive(root, "checksum");
  pcgc_strategy_info in;
  memset(&in, 0, sizeof in);
  if (!cJSON_IsObject(root)) {
    st = bad_at(err, &J, skip_ws(&J, 0), "expected a JSON object%s", "");
  } else if (!cJSON_IsString(fmt) ||
             (strcmp(fmt->valuestring, "pcgc-plan") != 0 && strcmp(fmt->valuestring, "pcgc-strategy") != 0)) {
    st = bad_at(err, &J, top_at(&J, "format"), "not a pcgc plan (no \"format\": \"pcgc-plan\")%s", "");
  } else if (!cJSON_IsNumber(ver) || ver->valuedouble != (strcmp(fmt->valuestring, "pcgc-plan") == 0 ? 2 : 1)) {
    st = bad_at(err, &J, top_at(&J, "version"),
                "unsupported \"version\": this pcgc reads plans of version 2 (and strategy files of version 1); "
                "a newer pcgc wrote it, or it is damaged%s", "");
  } else if (ver->valuedouble == 2 && !is_int(devs, 1)) {
    st = bad_at(err, &J, top_at(&J, "devices"), "\"devices\" must be the plan's device count, an integer from 1 to 1000000000%s", "");
  } else if (ver->valuedouble == 2 && n_devices > 0 && devs->valuedouble != n_devices) {
    char msg[200];
    snprintf(msg, sizeof msg, "the plan was lowered for %d devices, but the machine has %d: compile it again for this "
             "machine", (int)devs->valuedouble, n_devices);
    st = bad_at(err, &J, top_at(&J, "devices"), "%s", msg);
  } else if (ver->valuedouble == 2 && (!cJSON_IsString(optim) || pcgc_optimizer_from_name(optim->valuestring) < 0)) {
    st = bad_at(err, &J, top_at(&J, "optimizer"), "\"optimizer\" must be \"sgd\", \"momentum\" or \"adam\"%s", "");
  } else if (ver->valuedouble == 2 && !cJSON_IsNull(prog) && !cJSON_IsObject(prog)) {
    st = bad_at(err, &J, top_at(&J, "program"), "\"program\" must be an object or null%s", "");
  } else if (ver->valuedouble == 2 && !cJSON_IsString(sum)) {
    st = bad_at(err, &J, top_at(&J, "checksum"), "the plan has no \"checksum\" (every plan pcgc compile writes has "
                "one): it is truncated or was edited%s", "");
  } else if (!cJSON_IsString(mach) || strlen(mach->valuestring) >= sizeof in.machine) {
    st = bad_at(err, &J, top_at(&J, "machine"), "\"machine\" must be a machine name%s", "");
  } else if (prec && (!cJSON_IsString(prec) || pcgc_precision_from_name(prec->valuestring) < 0)) {
    st = bad_at(err, &J, top_at(&J, "precision"), "\"precision\" must be \"f32\", \"tf32\" or \"bf16\"%s", "");
  } else if (dkind && (!cJSON_IsString(dkind) || (strcmp(dkind->valuestring, "gpu") && strcmp(dkind->valuestring, "cpu")))) {
    st = bad_at(err, &J, top_at(&J, "device_kind"), "\"device_kind\" must be \"gpu\" or \"cpu\"%s", "");
  } else if (!cJSON_IsString(model)) {
    st = bad_at(err, &J, top_at(&J, "model"), "\"model\" must be a string: the model text of the parallel graph%s", "");
  } else if (!cJSON_IsObject(views)) {
    st = bad_at(err, &J, top_at(&J, "views"), "\"views\" must be an object {\"node\": [start, stride], ...}%s", "");
  } else if (pred && !cJSON_IsObject(pred)) {
    st = bad_at(err, &J, top_at(&J, "predicted"), "\"predicted\" must be an object%s", "");
  } else if (choice && !cJSON_IsObject(choice)) {
    st = bad_at(err, &J, top_at(&J, "choice"), "\"choice\" must be an object%s", "");
  }
  if (st == PCGC_OK) {
    snprintf(in.machine, sizeof in.machine, "%s", mach->valuestring);
    in.version = (int)ver->valuedouble;
    in.has_device_kind = dkind != NULL;
    in.precision = prec ? (pcgc_precision)pcgc_precision_from_name(prec->valuestring) : PCGC_PREC_F32;
    in.device_kind = dkind && strcmp(dkind->valuestring, "gpu") == 0 ? PCGC_DEVICE_GPU : PCGC_DEVICE_CPU;
    if (in.version == 2) {
      in.devices = (int)devs->valuedouble;
      in.has_optimizer = true;
      in.optimizer = (pcgc_optim_kind)pcgc_optimizer_from_name(optim->valuestring);
    }
    if (pred) {
      const cJSON *it = cJSON_GetObjectItemCaseSensitive(pred, "iteration_s"),
                  *dp = cJSON_GetObjectItemCaseSensitive(pred, "data_parallel_s");
      size_t po = top_at(&J, "predicted"), k, v;
      if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0)) {
        st = bad_at(err, &J, member_at(&J, po, "iteration_s", &k, &v) ? v : po,
                    "\"predicted\".\"iteration_s\" must be seconds >= 0%s", "");
      } else if (dp && !cJSON_IsNull(dp) && (!cJSON_IsNumber(dp) || !(dp->valuedouble >= 0))) {
        st = bad_at(err, &J, member_at(&J, po, "data_parallel_s", &k, &v) ? v : po,
                    "\"predicted\".\"data_parallel_s\" must be seconds >= 0 or null%s", "");
      } else {
        in.has_predicted = true;
        in.iteration_s = it->valuedouble;
        in.data_parallel_s = cJSON_IsNumber(dp) ? dp->valuedouble : -1;
        const cJSON *pk = cJSON_GetObjectItemCaseSensitive(pred, "peak_bytes");
        if (cJSON_IsNumber(pk) && pk->valuedouble > 0) in.predicted_peak_bytes = pk->valuedouble;
        const cJSON *se = cJSON_GetObjectItemCaseSensitive(pred, "search_estimate_s");
        if (cJSON_IsNumber(se) && se->valuedouble > 0) in.search_estimate_s = se->valuedouble;
      }
    }
  }
  if (st == PCGC_OK && choice) {
    static const char *const keys[] = {"dp", "tp", "pp", "micro"};
    int vals[4];
    size_t co = top_at(&J, "choice");
    for (int i = 0; i < 4 && st == PCGC_OK; i++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(choice, keys[i]);
      size_t k, vo;
      if (!is_int(v, 1))
        st = bad_at(err, &J, member_at(&J, co, keys[i], &k, &vo) ? vo : co,
                    "\"choice\".\"%s\" must be an integer from 1 to 1000000000", keys[i]);
      else vals[i] = (int)v->valuedouble;
    }
    /* the schedule is optional (files before it say nothing: GPipe) */
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(choice, "schedule");
    int sched = PCGC_SCHEDULE_GPIPE;
    if (st == PCGC_OK && sc && (!cJSON_IsString(sc) || (sched = pcgc_schedule_from_name(sc->valuestring)) < 0)) {
      size_t k, vo;
      st = bad_at(err, &J, member_at(&J, co, "schedule", &k, &vo) ? vo : co,
                  "\"choice\".\"schedule\" must be \"gpipe\" or \"1f1b\"%s", "");
    }
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(choice, "recompute");
    if (st == PCGC_OK && rc && !cJSON_IsBool(rc)) {
      size_t k, vo;
      st = bad_at(err, &J, member_at(&J, co, "recompute", &k, &vo) ? vo : co,
                  "\"choice\".\"recompute\" must be true or false%s", "");
    }
    const cJSON *zo = cJSON_GetObjectItemCaseSensitive(choice, "zero"); /* optional: files before it say nothing */
    /* true or false (ZeRO-1 or none, as plans before ZeRO-2 have it), or the stage 0 to 3 */
    if (st == PCGC_OK && zo && !cJSON_IsBool(zo) &&
        !(cJSON_IsNumber(zo) && (zo->valuedouble == 0 || zo->valuedouble == 1 || zo->valuedouble == 2 ||
                                 zo->valuedouble == 3))) {
      size_t k, vo;
      st = bad_at(err, &J, member_at(&J, co, "zero", &k, &vo) ? vo : co,
                  "\"choice\".\"zero\" must be true, false or the ZeRO stage 0, 1, 2 or 3%s", "");
    }
    if (st == PCGC_OK) {
      in.has_choice = true;
      in.choice = (pcgc_expert_choice){vals[0], vals[1], vals[2], vals[3], (pcgc_schedule)sched, cJSON_IsTrue(rc),
                                       cJSON_IsNumber(zo) ? (int)zo->valuedouble : cJSON_IsTrue(zo) ? 1 : 0};
    }
  }
  if (st == PCGC_OK && cJSON_IsObject(prog)) { /* codegen's summary */
    static const char *const keys[] = {"tasks", "instructions", "peak_bytes", "arena_bytes"};
    int64_t *dst[] = {&in.program_tasks, &in.program_instructions, &in.planned_peak_bytes, &in.planned_arena_bytes};
    size_t po = top_at(&J, "program"), k, vo;
    const cJSON *dg = cJSON_GetObjectItemCaseSensitive(prog, "digest");
    char *end = NULL;
    unsigned long long d = cJSON_IsString(dg) ? strtoull(dg->valuestring, &end, 16) : 0;
    if (!cJSON_IsString(dg) || strlen(dg->valuestring) != 16 || *end)
      st = bad_at(err, &J, member_at(&J, po, "digest", &k, &vo) ? vo : po,
                  "\"program\".\"digest\" must be 16 hexadecimal digits%s", "");
    in.program_digest = d;
    for (int i = 0; i < 4 && st == PCGC_OK; i++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(prog, keys[i]);
      if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9e18 || v->valuedouble != floor(v->valuedouble))
        st = bad_at(err, &J, member_at(&J, po, keys[i], &k, &vo) ? vo : po,
                    "\"program\".\"%s\" must be an integer from 0 to 9e18", keys[i]);
      else *dst[i] = (int64_t)v->valuedouble;
    }
    const cJSON *od = cJSON_GetObjectItemCaseSensitive(prog, "order"); /* optional: plans before it say nothing */
    if (st == PCGC_OK && od) {
      if (cJSON_IsString(od) && strcmp(od->valuestring, "critical-path") == 0) in.program_order = 1;
      else if (!(cJSON_IsString(od) && strcmp(od->valuestring, "topological") == 0))
        st = bad_at(err, &J, member_at(&J, po, "order", &k, &vo) ? vo : po,
                    "\"program\".\"order\" must be \"topological\" or \"critical-path\"%s", "");
    }
    in.has_program = st == PCGC_OK;
  }
  if (st == PCGC_OK) { /* the model; its errors point into the "model" string */
    const char *mt = model->valuestring;
    g = pcgc_model_parse(mt, strlen(mt), J.path, NULL, err);
    if (!g) {
      pcgc_error e = *err;
      size_t q = top_at(&J, "model");
      size_t off = e.line > 0 ? string_offset(&J, q, e.line, e.col) : q;
      char msg[sizeof e.message];
      snprintf(msg, sizeof msg, "in \"model\" (its line %d): %.900s", e.line, e.message);
      pcgc_error_set(err, PCGC_ERR_PARSE, "strategy file: %s", msg);
      pcgc_srcloc at = loc_of(&J, off);
      pcgc_error_at(err, at, e.len, J.t, J.n);
      if (at.col > 200 && e.source_line[0]) {
        /* the JSON line is the whole model: show the model's own line, no caret */
        err->source_line[0] = '\0';
        size_t used = strlen(err->message);
        snprintf(err->message + used, sizeof err->message - used, "\n  model line %d, column %d: %.300s", e.line,
                 e.col, e.source_line);
      }
      if (e.hint[0]) pcgc_error_hint(err, "%s", e.hint);
      st = PCGC_ERR_PARSE;
    }
  }
  if (st == PCGC_OK && (st = pcgc_mapping_init(mp, g->n_nodes, (pcgc_view){0, 1}, err)) == PCGC_OK) {
    bool *seen = calloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *seen);
    size_t vo = top_at(&J, "views");
    int nd = n_devices > 0 ? n_devices : in.devices;
    if (!seen) st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, views) {
      if (st != PCGC_OK) break;
      size_t ko = vo, va = vo;
      member_at(&J, vo, v->string, &ko, &va);
      int id = pcgc_graph_find(g, v->string);
      const cJSON *a0 = cJSON_GetArrayItem(v, 0), *a1 = cJSON_GetArrayItem(v, 1);
      if (id < 0) {
        st = bad_at(err, &J, ko, "\"views\" names '%s', which is no node of the model", v->string);
      } else if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2 || !is_int(a0, 0) || !is_int(a1, 0)) {
        st = bad_at(err, &J, va, "the view of '%s' must be [start, stride], integers from 0 to 1000000000", v->string);
      } else if (nd > 0 && a0->valuedouble >= nd) {
        char msg[400];
        snprintf(msg, sizeof msg, "the view of '%.200s' starts at device %d, but the %s has %d devices",
                 v->string, (int)a0->valuedouble, n_devices > 0 ? "machine" : "plan", nd);
        st = bad_at(err, &J, va, "%s", msg);
      } else {
        mp->view[id] = (pcgc_view){(int)a0->valuedouble, (int)a1->valuedouble};
        seen[id] = true;
      }
    }
    for (int i = 0; st == PCGC_OK && i < g->n_nodes; i++)
      if (!seen[i] && pcgc_op_class_of(g->nodes[i].kind) != PCGC_CLASS_SOURCE) {
        char msg[400];
        snprintf(msg, sizeof msg, "\"views\" has no view for %s '%.200s' (every operator needs one)",
                 pcgc_op_name(g->nodes[i].kind), g->nodes[i].name);
        st = bad_at(err, &J, top_at(&J, "views"), "%s", msg);
      }
    free(seen);
  }
  if (st == PCGC_OK && in.version == 2) { /* the bytes before the "checksum" key */
    size_t k = 0, v = 0;
    char want[48];
    bool found = member_at(&J, 0, "checksum", &k, &v);
    snprintf(want, sizeof want, "xxh3-64:%016llx", found ? (unsigned long long)plan_checksum(J.t, k) : 0ULL);
    if (!found || strcmp(want, sum->valuestring) != 0)
      st = bad_at(err, &J, found ? v : 0,
                  "the checksum does not match the plan's content: the file is corrupt, truncated or was edited "
                  "after pcgc compile wrote it%s", "");
  }
  cJSON_Delete(root);
  if (st != PCGC_OK) {
    pcgc_mapping_destroy(mp);
    pcgc_graph_free(g);
    return st;
  }
  if (info) *info = in;
  *out = g;
  return PCGC_OK;
}

pcgc_status pcgc_strategy_file_load(const char *path, int n_devices, pcgc_graph **out, pcgc_mapping *mp,
                                    pcgc_strategy_info *info, pcgc_error *err) {
  if (out) *out = NULL;
  if (mp) memset(mp, 0, sizeof *mp);
  if (!path) return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_strategy_file_load: no path");
  size_t len;
  char *text = pcgc_read_file(path, &len, err);
  if (!text) return err && err->status ? err->status : PCGC_ERR_IO;
  pcgc_status st = pcgc_strategy_file_parse(text, len, path, n_devices, out, mp, info, err);
  free(text);
  return st;
}

bool pcgc_strategy_file_detect(const char *path) {
  if (!path) return false;
  size_t n = strlen(path);
  if (n >= 5 && strcmp(path + n - 5, ".json") == 0) return true;
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  char buf[4097];
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = '\0';
  size_t i = 0;
  while (i < got && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')) i++;
  return i < got && buf[i] == '{' && (strstr(buf, "pcgc-plan") || strstr(buf, "pcgc-strategy"));
}

void pcgc_derivation_free(pcgc_derivation *d) {
  if (!d) return;
  free(d->source);
  d->source = NULL;
  for (int i = 0; i < d->n_trace; i++) free(d->trace[i]);
  free(d->trace);
  d->trace = NULL;
  d->n_trace = 0;
  d->has_trace = false;
}

pcgc_status pcgc_strategy_file_derivation(const char *path, pcgc_derivation *d, pcgc_error *err) {
  memset(d, 0, sizeof *d);
  d->loss = -1;
  size_t len = 0;
  char *text = pcgc_read_file(path, &len, err);
  if (!text) return err && err->status ? err->status : PCGC_ERR_IO;
  /* the whole plan is checked first (checksum, version, members) */
  pcgc_graph *g = NULL;
  pcgc_mapping mp;
  pcgc_status st = pcgc_strategy_file_parse(text, len, path, 0, &g, &mp, NULL, err);
  if (st == PCGC_OK) {
    pcgc_mapping_destroy(&mp);
    pcgc_graph_free(g);
  }
  cJSON *root = st == PCGC_OK ? cJSON_ParseWithLength(text, len) : NULL;
  const cJSON *o = root ? cJSON_GetObjectItemCaseSensitive(root, "derivation") : NULL;
  jtext J = {text, len, path};
  if (st == PCGC_OK && o) {
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(o, "file"), *src = cJSON_GetObjectItemCaseSensitive(o, "source"),
                *sets = cJSON_GetObjectItemCaseSensitive(o, "sets"), *loss = cJSON_GetObjectItemCaseSensitive(o, "loss"),
                *rw = cJSON_GetObjectItemCaseSensitive(o, "rewrites"), *tr = cJSON_GetObjectItemCaseSensitive(o, "trace");
    size_t at = top_at(&J, "derivation");
    if (!cJSON_IsObject(o) || !cJSON_IsString(file) || strlen(file->valuestring) >= sizeof d->file ||
        !(cJSON_IsString(src) || cJSON_IsNull(src)) || !cJSON_IsObject(sets) ||
        !(cJSON_IsString(loss) || cJSON_IsNull(loss)) || !cJSON_IsNumber(rw) || !(rw->valuedouble >= 0) ||
        rw->valuedouble > 1e9) {
      st = bad_at(err, &J, at, "\"derivation\" must be {\"file\", \"source\" (text or null), \"sets\" {NAME: "
                  "\"VALUE\"}, \"loss\" (an op name or null), \"rewrites\" (0 to 1e9)}%s", "");
    } else {
      snprintf(d->file, sizeof d->file, "%s", file->valuestring);
      d->rewrites = (int)rw->valuedouble;
      if (cJSON_IsString(loss) && (d->loss = pcgc_op_from_name(loss->valuestring)) < 0)
        st = bad_at(err, &J, at, "\"derivation\".\"loss\" names no operator%s", "");
      const cJSON *it;
      cJSON_ArrayForEach(it, sets) {
        if (st != PCGC_OK) break;
        if (d->n_set >= PCGC_DERIVATION_MAX_SETS || !cJSON_IsString(it) || strlen(it->string) >= sizeof d->set_names[0] ||
            strlen(it->valuestring) >= sizeof d->set_values[0]) {
          st = bad_at(err, &J, at, "\"derivation\".\"sets\" holds at most 64 constants, each \"NAME\": \"VALUE\"%s",
                      "");
          break;
        }
        snprintf(d->set_names[d->n_set], sizeof d->set_names[0], "%s", it->string);
        snprintf(d->set_values[d->n_set++], sizeof d->set_values[0], "%s", it->valuestring);
      }
      size_t n = cJSON_IsString(src) ? strlen(src->valuestring) : 0;
      if (st == PCGC_OK && cJSON_IsString(src) && !(d->source = malloc(n + 1)))
        st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
      else if (st == PCGC_OK && d->source)
        memcpy(d->source, src->valuestring, n + 1);
      if (st == PCGC_OK && tr) { /* the joint search's rewrites, one line each */
        int nt = cJSON_IsArray(tr) ? cJSON_GetArraySize(tr) : -1;
        const cJSON *line;
        if (nt < 0) st = bad_at(err, &J, at, "\"derivation\".\"trace\" must be a list of rewrite lines%s", "");
        else if (nt > 0 && !(d->trace = calloc((size_t)nt, sizeof *d->trace)))
          st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
        d->has_trace = st == PCGC_OK;
        cJSON_ArrayForEach(line, tr) {
          if (st != PCGC_OK) break;
          if (!cJSON_IsString(line))
            st = bad_at(err, &J, at, "\"derivation\".\"trace\" holds a line that is not a string%s", "");
          else if (!(d->trace[d->n_trace++] = strdup(line->valuestring)))
            st = pcgc_error_set(err, PCGC_ERR_NOMEM, "out of memory");
        }
      }
    }
  }
  cJSON_Delete(root);
  free(text);
  if (st != PCGC_OK) pcgc_derivation_free(d);
  return st;
}
