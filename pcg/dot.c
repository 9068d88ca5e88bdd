/*
 * dot.c — Graphviz drawing of a PCG (`pcgc dot`, pcgc_graph_write_dot).
 *
 * One DOT node per graph node, labelled with its name, its op and its output
 * type(s) (pcgc_ptensor_format, so shard degrees, sum, replica and micro-batch
 * degrees show), and one edge per input, labelled with the input slot when
 * the consumer has more than one input (and with the producer's output name
 * when it has more than one output). Shapes say what a node is:
 *
 *   input       invhouse, light blue        weight   cylinder, light yellow
 *   compute     rounded box, white          loss     octagon, light red
 *   parallel    hexagon, bold, one colour per kind, attributes in the label:
 *               partition blue, combine green, replicate yellow, reduce
 *               orange, pipeline purple, unpipeline pink
 *
 * Nodes are written in id order and nothing is inferred, so a graph that is
 * cyclic or untyped can still be drawn while debugging. Labels are escaped for
 * DOT quoted strings; bytes that are not valid UTF-8 become '?'.
 */
#include "pcg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A FILE with sticky failure, as in text.c. */
typedef struct dot_out {
  FILE *f;
  bool failed;
  int err_no;
} dot_out;

static void out_fail(dot_out *o)
{
  if (!o->failed) {
    o->failed = true;
    o->err_no = errno;
  }
}

static void out_puts(dot_out *o, const char *s)
{
  if (o->failed) return;
  size_t n = strlen(s);
  if (n != 0 && fwrite(s, 1, n, o->f) != n) out_fail(o);
}

static void out_printf(dot_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void out_printf(dot_out *o, const char *fmt, ...)
{
  if (o->failed) return;
  va_list ap;
  va_start(ap, fmt);
  int r = vfprintf(o->f, fmt, ap);
  va_end(ap);
  if (r < 0) out_fail(o);
}

/* Length of the valid UTF-8 sequence at s (a non-ASCII lead byte), or 0. */
static size_t utf8_seq_len(const unsigned char *s)
{
  size_t n;
  unsigned min;
  unsigned cp;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) {
    n = 2, cp = s[0] & 0x1Fu, min = 0x80;
  } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
    n = 3, cp = s[0] & 0x0Fu, min = 0x800;
  } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
    n = 4, cp = s[0] & 0x07u, min = 0x10000;
  } else {
    return 0;
  }
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0u) != 0x80u) return 0;
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

/* Writes s escaped for the inside of a DOT quoted string. */
static void out_escaped(dot_out *o, const char *s)
{
  char buf[256];
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p != '\0';) {
    if (k + 8 > sizeof buf) {
      buf[k] = '\0';
      out_puts(o, buf);
      k = 0;
    }
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      buf[k++] = '\\';
      buf[k++] = (char)c;
      p++;
    } else if (c == '\n') {
      buf[k++] = '\\';
      buf[k++] = 'n';
      p++;
    } else if (c < 0x20 || c == 0x7F) {
      buf[k++] = ' ';
      p++;
    } else if (c < 0x80) {
      buf[k++] = (char)c;
      p++;
    } else {
      size_t n = utf8_seq_len(p);
      if (n == 0) {
        buf[k++] = '?';
        p++;
      } else {
        memcpy(buf + k, p, n);
        k += n;
        p += n;
      }
    }
  }
  buf[k] = '\0';
  out_puts(o, buf);
}

/* The look of a node: shape, style and fill colour. */
typedef struct dot_look {
  const char *shape, *style, *fill;
} dot_look;

static dot_look look_of(pcgc_op_kind k)
{
  switch (k) {
  case PCGC_OP_INPUT: return (dot_look){"invhouse", "filled", "#cfe2f3"};
  case PCGC_OP_WEIGHT: return (dot_look){"cylinder", "filled", "#fff2cc"};
  case PCGC_OP_PARTITION: return (dot_look){"hexagon", "filled,bold", "#9fc5e8"};
  case PCGC_OP_COMBINE: return (dot_look){"hexagon", "filled,bold", "#b6d7a8"};
  case PCGC_OP_REPLICATE: return (dot_look){"hexagon", "filled,bold", "#ffd966"};
  case PCGC_OP_REDUCE: return (dot_look){"hexagon", "filled,bold", "#f6b26b"};
  case PCGC_OP_PIPELINE: return (dot_look){"hexagon", "filled,bold", "#b4a7d6"};
  case PCGC_OP_UNPIPELINE: return (dot_look){"hexagon", "filled,bold", "#d5a6bd"};
  default: break;
  }
  switch (pcgc_op_class_of(k)) {
  case PCGC_CLASS_LOSS: return (dot_look){"octagon", "filled", "#f4cccc"};
  case PCGC_CLASS_PARALLEL: return (dot_look){"hexagon", "filled,bold", "#d9d9d9"};
  default: return (dot_look){"box", "rounded,filled", "#ffffff"};
  }
}

static const char *out_name(const pcgc_node *nd, int slot)
{
  if (nd->out_names != NULL && nd->out_names[slot] != NULL) return nd->out_names[slot];
  return slot == 0 && nd->name != NULL ? nd->name : "";
}

/* The op line of a label: "linear", or "partition(dim=0, degree=4)" for
 * parallel operators, whose attributes are what they do. */
static void out_op_line(dot_out *o, const pcgc_node *nd)
{
  out_escaped(o, pcgc_op_name(nd->kind));
  if (pcgc_op_class_of(nd->kind) != PCGC_CLASS_PARALLEL) return;
  out_puts(o, "(");
  int n = pcgc_op_num_attrs(nd->kind);
  for (int i = 0; i < n; i++) {
    char buf[512];
    pcgc_attr_format(buf, sizeof buf, nd->attrs, i);
    if (i) out_puts(o, ", ");
    out_escaped(o, buf);
  }
  out_puts(o, ")");
}

static void out_node(dot_out *o, const pcgc_node *nd)
{
  dot_look look = look_of(nd->kind);
  out_printf(o, "  n%d [shape=%s, style=\"%s\", fillcolor=\"%s\", label=\"", nd->id,
             look.shape, look.style, look.fill);
  out_escaped(o, nd->name != NULL ? nd->name : "");
  out_puts(o, "\\n");
  out_op_line(o, nd);
  for (int s = 0; s < nd->n_out; s++) {
    out_puts(o, "\\n");
    if (nd->n_out > 1) {
      out_escaped(o, out_name(nd, s));
      out_puts(o, ": ");
    }
    if (nd->typed && nd->out != NULL) {
      char buf[256];
      pcgc_ptensor_format(buf, sizeof buf, &nd->out[s]);
      out_escaped(o, buf);
    } else {
      out_puts(o, "?");
    }
  }
  out_puts(o, "\"];\n");
}

pcgc_status pcgc_graph_write_dot(FILE *f, const pcgc_graph *g, pcgc_error *err)
{
  if (f == NULL || g == NULL) {
    return pcgc_error_set(err, PCGC_ERR_INVALID, "pcgc_graph_write_dot: NULL argument");
  }
  for (int v = 0; v < g->n_nodes; v++) {
    const pcgc_node *nd = &g->nodes[v];
    for (int i = 0; i < nd->n_in; i++) {
      pcgc_ref r = nd->in[i];
      if (r.node < 0 || r.node >= g->n_nodes || r.slot < 0 ||
          r.slot >= g->nodes[r.node].n_out) {
        return pcgc_error_set(err, PCGC_ERR_GRAPH,
                              "node '%s': input %d refers to %d:%d, which does not exist",
                              nd->name ? nd->name : "?", i, r.node, r.slot);
      }
    }
  }

  dot_out o = {.f = f};
  out_puts(&o, "digraph pcg {\n");
  if (g->name != NULL) {
    out_puts(&o, "  label=\"");
    out_escaped(&o, g->name);
    out_puts(&o, "\";\n  labelloc=t;\n");
  }
  out_puts(&o, "  rankdir=TB;\n"
               "  node [fontname=\"Helvetica\", fontsize=10];\n"
               "  edge [fontname=\"Helvetica\", fontsize=9];\n");
  for (int v = 0; v < g->n_nodes; v++) out_node(&o, &g->nodes[v]);
  for (int v = 0; v < g->n_nodes; v++) {
    const pcgc_node *nd = &g->nodes[v];
    for (int i = 0; i < nd->n_in; i++) {
      const pcgc_node *src = &g->nodes[nd->in[i].node];
      out_printf(&o, "  n%d -> n%d", src->id, nd->id);
      bool slot_label = nd->n_in > 1, out_label = src->n_out > 1;
      if (slot_label || out_label) {
        out_puts(&o, " [");
        if (slot_label) out_printf(&o, "label=\"%d\"", i);
        if (out_label) {
          out_puts(&o, slot_label ? ", taillabel=\"" : "taillabel=\"");
          out_escaped(&o, out_name(src, nd->in[i].slot));
          out_puts(&o, "\"");
        }
        out_puts(&o, "]");
      }
      out_puts(&o, ";\n");
    }
  }
  out_puts(&o, "}\n");

  if (!o.failed && (fflush(f) != 0 || ferror(f))) out_fail(&o);
  if (o.failed) {
    return pcgc_error_set(err, PCGC_ERR_IO, "cannot write the DOT graph: %s",
                          o.err_no ? strerror(o.err_no) : "write error");
  }
  return PCGC_OK;
}
