/*
 * onnx_import.h — ONNX models as PCGs.
 *
 * Parses an ONNX ModelProto (protobuf-c bindings generated at build time
 * from Debian's /usr/include/onnx/onnx.proto) and maps its operators onto
 * the PCG's (docs/onnx.md lists the mapping). Initializers become weight
 * nodes that keep their values (pcgc_node.value), so a run starts from the
 * trained weights; a symbolic batch dimension takes its size from
 * opts->batch; initializers stored as external data are read from files
 * beside the model. An operator or attribute that cannot be mapped is an
 * error naming the node, its op type and opset, with the supported list.
 */
#ifndef PCGC_ONNX_IMPORT_H
#define PCGC_ONNX_IMPORT_H

#include "pcg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pcgc_onnx_options {
  int64_t batch;   /* size for symbolic dims (dim_param); 0 = default 1 */
} pcgc_onnx_options;

/* Loads `path` (reading external data relative to its folder). NULL on
 * error with `err` filled (the file name; the node name and op in the
 * message). The graph is typed (inferred). `opts` may be NULL. */
pcgc_graph *pcgc_onnx_load(const char *path, const pcgc_onnx_options *opts, pcgc_error *err);

/* Parses an in-memory model; external data is resolved relative to `dir`
 * (may be NULL: then external data is an error). `name` is used in messages. */
pcgc_graph *pcgc_onnx_parse(const void *data, size_t len, const char *name, const char *dir,
                            const pcgc_onnx_options *opts, pcgc_error *err);

/* True if `path` names an ONNX file (by its .onnx extension). */
bool pcgc_onnx_is_onnx_path(const char *path);

#ifdef __cplusplus
}
#endif
#endif
