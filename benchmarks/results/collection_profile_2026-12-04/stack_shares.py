import re, sys, collections
path, *funcs = sys.argv[1:]
threads = collections.Counter(); incl = collections.defaultdict(collections.Counter)
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    if not stack: continue
    n = int(n); parts = stack.split(";"); th = parts[0]
    threads[th] += n
    names = {re.sub(r" \(.*", "", p) for p in parts[1:]}
    for f in funcs:
        if any(f == x or x.endswith("." + f) or x == f for x in names):
            incl[th][f] += n
for th, total in threads.most_common():
    if not incl[th]: continue
    print(th, total, "samples")
    for f in funcs:
        if incl[th][f]: print(f"   {incl[th][f] / total:6.1%}  {f}")
