#!/usr/bin/python3
"""make_plan.py MODEL.pcg MACHINE OUT.json [NAME=START,STRIDE ...] [--schedule gpipe|1f1b]

Wraps a hand-written parallel model (tests/data/parallel/) into a strategy
file for `pcgc run`: every assigned name gets view [0, 1] (piece p on device
p) unless NAME=START,STRIDE says otherwise."""
import json, re, sys

args = [a for a in sys.argv[1:] if not a.startswith('--')]
schedule = 'gpipe'
if '--schedule' in sys.argv:
    schedule = sys.argv[sys.argv.index('--schedule') + 1]
    args.remove(schedule)
model, machine, out = args[:3]
over = dict((kv.split('=')[0], [int(x) for x in kv.split('=')[1].split(',')]) for kv in args[3:])
text = open(model).read()
names = re.findall(r'^\s*([A-Za-z_][\w.]*)\s*=\s*\w+\(', text, re.M)
views = {n: over.get(n, [0, 1]) for n in names}
doc = {"format": "pcgc-strategy", "version": 1, "machine": machine, "model": text, "views": views,
       "choice": {"dp": 1, "tp": 1, "pp": 1, "micro": 1, "schedule": schedule, "recompute": False}}
json.dump(doc, open(out, 'w'), indent=1)
