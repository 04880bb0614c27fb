"""word_freq: reads {"text", "top"?, "keepStopWords"?} as JSON on stdin, prints JSON."""
import collections
import json
import re
import sys

STOP = set(
    "a an and are as at be but by for from has have he her his i in is it its of on or she "
    "so that the their them they this to was were will with you your we our not no".split()
)

args = json.load(sys.stdin)
words = [w.lower() for w in re.findall(r"[^\W\d_]+(?:['’][^\W\d_]+)*", args["text"])]
counted = words if args.get("keepStopWords") else [w for w in words if w not in STOP]
counts = collections.Counter(counted)
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.get("top", 10)]
json.dump(
    {"total": len(words), "distinct": len(set(words)), "top": [{"word": w, "count": c} for w, c in top]},
    sys.stdout,
)
