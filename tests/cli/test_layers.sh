#!/usr/bin/env bash
# test_layers.sh — the layering README.md's "Layout" and search/search.h state:
#   pcg/ <- cost/ <- taskgraph/ <- search/ and codegen/ (codegen needs no search/)
# 1. every quoted #include of a layer's sources names a header of a layer at
#    or below it;
# 2. no two source files of cost/, taskgraph/, search/ or codegen/ call each
#    other in a circle (from the symbols their object files define and use).
#
#   test_layers.sh PCGC SOURCE_DIR      (run in the build directory)
set -euo pipefail
src=${2:?usage: test_layers.sh PCGC SOURCE_DIR}
build=$(pwd)
python3 - "$src" "$build" <<'PY'
import collections, glob, os, re, subprocess, sys
src, build = sys.argv[1], sys.argv[2]
below = {
    'pcg': {'pcg'},
    'cost': {'pcg', 'cost'},
    'taskgraph': {'pcg', 'cost', 'taskgraph'},
    'codegen': {'pcg', 'cost', 'taskgraph', 'codegen'},
    'search': {'pcg', 'cost', 'taskgraph', 'substitutions', 'search'},
}
home = {}
for layer in below:
    for h in glob.glob(os.path.join(src, layer, '*.h')) + glob.glob(os.path.join(src, layer, '*.def')):
        home[os.path.basename(h)] = layer
bad = []
for layer, ok in below.items():
    for f in sorted(glob.glob(os.path.join(src, layer, '*.[ch]'))):
        for no, line in enumerate(open(f, encoding='utf-8'), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            h = os.path.basename(m.group(1))
            owner = home.get(h)
            if owner is None:
                for other in ('substitutions', 'runtime', 'onnx'):
                    if os.path.exists(os.path.join(src, other, h)):
                        owner = other
            if owner is not None and owner not in ok:
                bad.append(f'{os.path.relpath(f, src)}:{no}: includes {h} of {owner}/, above {layer}/')
for b in bad:
    print('layering:', b)
objs = {}
for layer in ('cost', 'taskgraph', 'search', 'codegen'):
    for o in glob.glob(os.path.join(build, 'CMakeFiles', 'pcgc_' + layer + '.dir', layer, '*.c.o')):
        stem = os.path.basename(o)[:-4]
        if os.path.exists(os.path.join(src, layer, stem + '.c')):  # not a stale object of a moved file
            objs[layer + '/' + stem] = o
if len(objs) < 10:
    print(f'layering: found only {len(objs)} object files under {build}/CMakeFiles: run in the build directory')
    sys.exit(1)
defs, uses = {}, collections.defaultdict(set)
for name, o in objs.items():
    out = subprocess.run(['nm', o], capture_output=True, text=True, check=True).stdout
    for l in out.splitlines():
        p = l.split()
        if len(p) == 3 and p[1] in 'TDBR':
            defs[p[2]] = name
        elif len(p) == 2 and p[0] == 'U':
            uses[name].add(p[1])
graph = {n: sorted({defs[u] for u in uses[n] if u in defs and defs[u] != n}) for n in objs}
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = counter[0]; counter[0] += 1
    stack.append(v); on.add(v)
    for w in graph[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v:
                break
        sccs.append(comp)
for v in sorted(graph):
    if v not in index:
        visit(v)
circles = [sorted(c) for c in sccs if len(c) > 1]
for c in circles:
    print('layering: these files call each other in a circle:', ', '.join(c))
    for a in c:
        for b in graph[a]:
            if b in c:
                used = sorted(u for u in uses[a] if defs.get(u) == b)
                print(f'  {a} -> {b}: {", ".join(used[:6])}')
for layer in ('codegen', 'taskgraph', 'cost'):
    for n in sorted(objs):
        if n.startswith(layer + '/'):
            for b in graph[n]:
                if b.split('/')[0] not in below[layer]:
                    bad.append(f'{n} calls {b}')
                    print(f'layering: {n} calls into {b}, above {layer}/')
if bad or circles:
    sys.exit(1)
print(f'layers ok: {len(objs)} object files, {sum(len(v) for v in graph.values())} file-to-file calls, no circles')
PY
