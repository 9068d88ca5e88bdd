#!/usr/bin/env python3
"""reseal_plan.py IN OUT OLD NEW: a copy of plan IN with the first OLD
replaced by NEW (a deliberate edit, for tests), its checksum recomputed so
that the loader accepts it and the edit is what is tested (plan format:
docs/plan-format.md, XXH3-64 of every byte before the "checksum" key)."""
import sys

import xxhash

src, dst, old, new = sys.argv[1:5]
text = open(src, encoding="utf-8").read()
if old not in text:
    sys.exit(f"reseal_plan.py: {old!r} is not in {src}")
text = text.replace(old, new, 1)
at = text.rindex('"checksum"')
head = text[:at].encode("utf-8")
digest = xxhash.xxh3_64_hexdigest(head)
with open(dst, "w", encoding="utf-8") as f:
    f.write(head.decode("utf-8") + '"checksum":\t"xxh3-64:' + digest + '"\n}\n')
